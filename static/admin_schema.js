// Settings forms generated from a settings model: show the one matching the sibling selector
// (the provider, the extension key) as it changes, including in inline rows added later.
"use strict";

(function () {
  function selectorOf(widget) {
    const raw = widget.querySelector(".zett-schema-raw textarea");
    const own = widget.dataset.schemaField;
    if (!raw || !raw.name.endsWith(own)) return null;
    const name = raw.name.slice(0, raw.name.length - own.length) + widget.dataset.schemaSelector;
    return widget.closest("form").querySelector(`[name="${CSS.escape(name)}"]`);
  }

  function sync(widget) {
    const selector = selectorOf(widget);
    if (!selector) return;
    for (const set of widget.querySelectorAll(".zett-schema-set")) {
      set.hidden = set.dataset.schemaKey !== selector.value;
    }
  }

  function syncAll() {
    document.querySelectorAll(".zett-schema").forEach(sync);
  }

  document.addEventListener("DOMContentLoaded", syncAll);
  document.addEventListener("formset:added", syncAll);
  document.addEventListener("change", function (event) {
    if (event.target.closest && !event.target.closest(".zett-schema")) syncAll();
  });
})();
