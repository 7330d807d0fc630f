// Chat and monitor pages: connection state, reconnect after clean closes, live elapsed times,
// forms that reset after sending (no inline handlers: the CSP forbids them).
(function () {
  "use strict";

  function label(text, state) {
    document.querySelectorAll("[data-testid=connection]").forEach(function (el) {
      el.textContent = text;
      el.dataset.state = state;
    });
  }

  document.body.addEventListener("htmx:wsOpen", function () { label("live", "open"); });

  // Message and steering forms empty themselves once their frame is on the wire.
  document.body.addEventListener("htmx:wsAfterSend", function (event) {
    var form = event.target.closest && event.target.closest("form[data-reset-on-send]");
    if (form) { form.reset(); }
  });

  document.body.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail.event.code;
    // 44xx: the server refused us (login, permission, unknown session): never retry.
    if (code >= 4400 && code < 4500) {
      label(code === 4401 ? "signed out: reload to log in" : "not allowed", "refused");
      return;
    }
    label("reconnecting…", "closed");
    // The ws extension retries only after 1006/1011/1012/1013; Daphne closes with 1000 on its
    // websocket timeout and on restarts, so retry those ourselves (the snapshot fills any gap).
    var retried = [1006, 1011, 1012, 1013].indexOf(code) >= 0;
    if (!retried && code !== 1001 && document.body.contains(event.target)) {
      var wrapper = event.detail.socketWrapper;
      setTimeout(function () { wrapper.reconnect(); }, 1000 + Math.random() * 2000);
    }
  });

  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll("[data-started-at]").forEach(function (el) {
      var started = parseFloat(el.dataset.startedAt);
      if (!isNaN(started)) { el.textContent = Math.max(0, now - started).toFixed(1) + " s"; }
    });
  }
  setInterval(tick, 1000);
})();
