// The admin's "Test this profile" button: asks the server to run one short prompt through the
// saved profile and shows the answer or the error beside the form, which stays usable meanwhile.
"use strict";

(function () {
  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (input) return input.value;
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function show(output, text, ok) {
    output.hidden = false;
    output.textContent = text;  // model output is untrusted text: never HTML
    output.classList.toggle("errornote", !ok);
    output.classList.toggle("success", ok);
  }

  async function runTest(button, output) {
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    show(output, "Testing… (one short prompt through the saved profile; unsaved changes are not used)", true);
    try {
      const response = await fetch(button.dataset.url, {
        method: "POST",
        headers: { "X-CSRFToken": csrfToken(), "Accept": "application/json" },
        credentials: "same-origin",
      });
      const data = await response.json();
      if (data.ok) {
        show(output, `${data.profile}: answered “${data.answer}” in ${data.seconds} s (prompt: “${data.prompt}”).`, true);
      } else {
        show(output, `${data.profile || "Profile"}: ${data.error}`, false);
      }
    } catch (error) {
      show(output, `The test could not be run: ${error}`, false);
    } finally {
      button.disabled = false;
      button.removeAttribute("aria-busy");
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    const button = document.querySelector(".zett-profile-test");
    const output = document.querySelector(".zett-profile-test-result");
    if (!button || !output) return;
    button.addEventListener("click", function () { runTest(button, output); });
  });
})();
