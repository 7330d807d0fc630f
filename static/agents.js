// Chat and monitor pages: connection state, reconnect after clean closes, live elapsed times,
// the composer (what its box sends, when it empties) and following new content.
// No inline handlers: the CSP forbids them, so everything is bound here.
(function () {
  "use strict";

  function label(text, state) {
    document.querySelectorAll("[data-testid=connection]").forEach(function (el) {
      el.textContent = text;
      el.dataset.state = state;
    });
  }

  document.body.addEventListener("htmx:wsOpen", function () { label("live", "open"); });

  // -- the composer ------------------------------------------------------------------------

  function composer() { return document.getElementById("message-form"); }

  function openQuestion() {
    return document.querySelector("#waiting [data-testid=question-card]");
  }

  // While the agent waits on a question, the main box answers it (steering keeps its own
  // control): say so in the placeholder, so what is typed there is never taken as steering.
  function followQuestion() {
    var form = composer();
    if (!form) { return; }
    var box = form.querySelector("textarea[name=text]");
    if (!box.dataset.placeholder) { box.dataset.placeholder = box.placeholder; }
    var question = openQuestion();
    if (question) {
      box.placeholder = "Answer the agent's question: " + (question.dataset.question || "");
      form.dataset.answers = question.dataset.waitId;
    } else {
      box.placeholder = box.dataset.placeholder;
      delete form.dataset.answers;
    }
  }

  document.body.addEventListener("htmx:wsConfigSend", function (event) {
    var form = event.target;
    if (form !== composer()) { return; }
    var question = openQuestion();
    if (!question) { return; }
    var params = event.detail.parameters;
    var text = params.text;
    delete params.text;
    params.type = "answer";
    params.id = question.dataset.waitId;
    params.answer = text;
  });

  // Each frame a page sends gets exactly one reply (or error fragment) back, in order: the
  // form that sent it learns its outcome, and empties only when it was accepted. A refused
  // message keeps its text, beside the reason, so nothing typed is lost.
  var sentFrom = [];

  document.body.addEventListener("htmx:wsAfterSend", function (event) {
    var form = event.target.closest && event.target.closest("form");
    sentFrom.push(form || null);
    var errors = document.getElementById("errors");
    if (errors) { errors.innerHTML = ""; }
  });

  var ACCEPTED = /data-testid="control-reply"[^>]*data-reply="accepted"/;
  var ANSWERED = /data-testid="(control-reply|frame-error)"/;

  document.body.addEventListener("htmx:wsAfterMessage", function (event) {
    var message = typeof event.detail.message === "string" ? event.detail.message : "";
    if (ANSWERED.test(message)) {
      var form = sentFrom.shift();
      if (form && form.hasAttribute("data-reset-on-send") && ACCEPTED.test(message)) {
        form.reset();
      }
      if (form === composer()) { focusBox(); }
    }
    followQuestion();
    followRun();
  });

  // Enter sends, Shift+Enter is a newline (as is Enter while an input method composes).
  document.body.addEventListener("keydown", function (event) {
    var form = composer();
    if (!form || event.target !== form.querySelector("textarea[name=text]")) { return; }
    if (event.key !== "Enter" || event.shiftKey || event.altKey || event.ctrlKey ||
        event.metaKey || event.isComposing) { return; }
    event.preventDefault();
    if (event.target.value.trim()) { form.requestSubmit(); }
  });

  function focusBox() {
    var form = composer();
    if (form) { form.querySelector("textarea[name=text]").focus({ preventScroll: true }); }
  }

  // Stop sits beside Send while a run is active; it submits the status bar's cancel form.
  function followRun() {
    var stop = document.getElementById("stop-run");
    if (!stop) { return; }
    var bar = document.getElementById("run-status");
    var active = bar && ["running", "waiting", "queued"].indexOf(bar.dataset.status) >= 0;
    stop.hidden = !active;
    stop.disabled = !document.querySelector("#run-status [data-testid=cancel-form]");
  }

  document.body.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("#stop-run")) {
      var cancel = document.querySelector("#run-status [data-testid=cancel-form]");
      if (cancel) { cancel.requestSubmit(); }
    }
  });

  // -- message actions: copy, edit and resend, regenerate ------------------------------------

  function bubbleText(article) {
    var bubble = article.querySelector(".bubble");
    return bubble ? bubble.innerText.trim() : "";
  }

  // The user message a reply answered: the nearest one before it in the transcript.
  function askedBefore(article) {
    var node = article.previousElementSibling;
    while (node && node.dataset.role !== "user") { node = node.previousElementSibling; }
    return node;
  }

  function compose(text, send) {
    var form = composer();
    if (!form) { return; }
    var box = form.querySelector("textarea[name=text]");
    box.value = text;
    focusBox();
    if (send) { form.requestSubmit(); }
  }

  document.body.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-msg-action]");
    if (!button) { return; }
    var article = button.closest("[data-testid=message]");
    if (!article) { return; }
    var action = button.dataset.msgAction;
    if (action === "copy" && navigator.clipboard) {
      navigator.clipboard.writeText(bubbleText(article)).then(function () {
        button.dataset.copied = "1";
        setTimeout(function () { delete button.dataset.copied; }, 1500);
      });
    } else if (action === "edit") {
      compose(bubbleText(article), false);
    } else if (action === "regenerate") {
      var asked = askedBefore(article);
      if (asked) { compose(bubbleText(asked), true); }
    }
  });

  // -- monitor filters: rows, live ones included, shown only when they match -------------

  function filterRuns() {
    var form = document.getElementById("monitor-filters");
    if (!form) { return; }
    var status = form.elements.status.value;
    var profile = form.elements.profile.value.trim().toLowerCase();
    var user = form.elements.user.value.trim().toLowerCase();
    document.querySelectorAll("[data-testid=monitor-row]").forEach(function (row) {
      row.hidden = !!(
        (status && row.dataset.status !== status) ||
        (profile && (row.dataset.profile || "").toLowerCase().indexOf(profile) < 0) ||
        (user && (row.dataset.user || "").toLowerCase().indexOf(user) < 0)
      );
    });
  }

  document.body.addEventListener("input", function (event) {
    if (event.target.closest && event.target.closest("#monitor-filters")) { filterRuns(); }
  });
  document.body.addEventListener("reset", function (event) {
    if (event.target.id === "monitor-filters") { setTimeout(filterRuns, 0); }
  });
  document.body.addEventListener("submit", function (event) {
    if (event.target.id === "monitor-filters") { event.preventDefault(); }
  });
  document.body.addEventListener("htmx:wsAfterMessage", filterRuns);

  // -- following new content ------------------------------------------------------------
  // A reader at the bottom of the chat follows what arrives (answers, tool cards, waits), so
  // the message box stays in view; one who scrolled up keeps their place and is offered a
  // "jump to latest" button instead.

  var SLACK = 48;  // pixels from the bottom that still count as "at the bottom"
  var following = true;
  var snapshotSeen = false;

  function atBottom() {
    var doc = document.documentElement;
    return window.innerHeight + window.scrollY >= doc.scrollHeight - SLACK;
  }

  function jumpButton() { return document.getElementById("jump-latest"); }

  function toBottom() {
    window.scrollTo(0, document.documentElement.scrollHeight);
    var jump = jumpButton();
    if (jump) { jump.hidden = true; }
  }

  document.body.addEventListener("htmx:wsBeforeMessage", function () {
    following = atBottom();
  });

  document.body.addEventListener("htmx:wsAfterMessage", function () {
    if (!document.getElementById("transcript") || !jumpButton()) { return; }
    if (!snapshotSeen) {  // the first snapshot: open a long chat at its end
      snapshotSeen = true;
      toBottom();
      return;
    }
    if (following) { toBottom(); } else if (!atBottom()) { jumpButton().hidden = false; }
  });

  window.addEventListener("scroll", function () {
    var jump = jumpButton();
    if (jump && !jump.hidden && atBottom()) { jump.hidden = true; }
  }, { passive: true });

  document.body.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("#jump-latest")) {
      toBottom();
      var form = composer();
      if (form) { form.querySelector("textarea[name=text]").focus({ preventScroll: true }); }
    }
  });

  document.body.addEventListener("htmx:wsClose", function (event) {
    sentFrom = [];  // frames in flight get no reply on a closed socket
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
  followQuestion();
  followRun();
  focusBox();
})();
