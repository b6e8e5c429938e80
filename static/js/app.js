// Shows htmx request failures (other than 422, which swaps its own inline errors) in the page's status region.
document.addEventListener("htmx:responseError", function (event) {
  var flash = document.getElementById("flash");
  if (!flash) return;
  var message = "Something went wrong. Try again.";
  var xhr = event.detail.xhr;
  try {
    var data = JSON.parse(xhr.responseText);
    if (data && data.error) message = data.error;
  } catch (e) {
    var holder = document.createElement("div");
    holder.innerHTML = xhr.responseText;
    var alert = holder.querySelector("[role=alert]");
    if (alert) message = alert.textContent.trim();
  }
  flash.innerHTML = "";
  var box = document.createElement("div");
  box.className = "alert alert-danger";
  box.setAttribute("role", "alert");
  box.textContent = message;
  flash.appendChild(box);
});

// A refused change leaves the page as it was (4xx is not swapped): a form marked data-reset-on-refusal puts its
// fields back to the saved values it was rendered with (the Members page's role select), so it never shows a role
// that did not save.
document.addEventListener("htmx:responseError", function (event) {
  var form = event.detail.elt && event.detail.elt.closest && event.detail.elt.closest("form[data-reset-on-refusal]");
  if (form) form.reset();
});

// Focus fields marked data-autofocus once htmx has processed them (a plain autofocus fires before htmx attaches
// its listeners, so typing straight away could be lost).
document.addEventListener("htmx:load", function (event) {
  var target = event.detail.elt.querySelector && event.detail.elt.querySelector("[data-autofocus]");
  if (target) target.focus();
});

// The phone navigation: Menu shows and hides the main links (on wide screens the button stays hidden by CSS).
function enableNavToggles(root) {
  (root.querySelectorAll ? root : document).querySelectorAll(".nav-toggle[hidden]").forEach(function (button) {
    button.hidden = false;
    button.closest("nav").classList.add("nav-collapsible");
  });
}
document.addEventListener("DOMContentLoaded", function () { enableNavToggles(document); });
document.addEventListener("htmx:load", function (event) { enableNavToggles(event.detail.elt); });
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest(".nav-toggle");
  if (!button) return;
  var open = button.getAttribute("aria-expanded") !== "true";
  button.setAttribute("aria-expanded", open ? "true" : "false");
  button.closest("nav").classList.toggle("nav-open", open);
});

// After a refused setup (a provider refusal or field errors swapped in), bring the reason into view and give it focus,
// so the person reads what went wrong and the submit button is close at hand.
document.addEventListener("htmx:afterSettle", function (event) {
  var config = event.detail.requestConfig;
  var form = config && config.elt;
  if (!form || !form.hasAttribute || !form.hasAttribute("data-busy-form")) return;  // only the setup form's answers
  var flow = document.getElementById("setup-flow");
  var reason = flow && flow.querySelector("#setup-flow-refusal, #setup-flow-errors, [aria-invalid='true']");
  if (!reason) return;
  if (!reason.hasAttribute("tabindex") && !/^(INPUT|SELECT|TEXTAREA)$/.test(reason.tagName)) reason.setAttribute("tabindex", "-1");
  reason.focus();
  reason.scrollIntoView({ block: "center" });
});

// A poll marked data-poll-paused-by-dialog skips its request while a dialog is open, so an open card dialog is never
// replaced under the person. (Here rather than as an htmx trigger filter: filters are evaluated as code, which the
// Content-Security-Policy does not allow.)
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail.elt;
  if (elt && elt.hasAttribute && elt.hasAttribute("data-poll-paused-by-dialog") && document.querySelector("dialog[open]")) {
    event.preventDefault();
  }
});

// A component marked data-swap-forbidden (the `swap_forbidden()` template global) swaps its own 403 answer too (the
// page-wide htmx config swaps only 2xx and 422), so a refused save shows its reason inline and keeps the draft.
document.addEventListener("htmx:beforeSwap", function (event) {
  var target = event.target;
  if (event.detail.xhr.status === 403 && target && target.closest && target.closest("[data-swap-forbidden]")) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// A Copy button (data-copy names the input whose value it copies): the one-time webhook secret. It says what
// happened in its status region, and falls back to selecting the text where the clipboard is not allowed.
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest("button[data-copy]");
  if (!button) return;
  var field = document.getElementById(button.getAttribute("data-copy"));
  var status = document.getElementById(button.getAttribute("aria-describedby"));
  if (!field) return;
  function say(text) { if (status) status.textContent = text; }
  function selectIt() { field.focus(); field.select(); say("Selected: press Ctrl+C (or ⌘C) to copy."); }
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(function () { say("Copied."); }, selectIt);
  } else {
    selectIt();
  }
});

// Focus after a swap: when the element that had the focus was replaced (a comment posted, a saved form, a switched
// method), the browser drops focus to <body>. Put it back inside the updated region, in this order: an element marked
// data-focus-after-swap; the same field or choice (a radio, a switch) when the person was changing one; a field marked
// invalid; the region's alert or status; the region itself. A boosted form post (the whole page answered) focuses its
// message. Swaps that did not take the focus away (a poll while the person reads elsewhere) change nothing.
(function () {
  var lost = null; // {region, id, name, value, submit} of the focus the current swap is about to remove

  function focusable(element) {
    if (!element || element.disabled || element.closest("[hidden]")) return false;
    if (!/^(A|BUTTON|INPUT|SELECT|TEXTAREA|SUMMARY)$/.test(element.tagName) && !element.hasAttribute("tabindex")) {
      element.setAttribute("tabindex", "-1");
    }
    return true;
  }

  function sameControl(region, was) {
    if (!was || was.submit) return null;
    if (was.id) return document.getElementById(was.id);
    if (!was.name) return null;
    var match = null;
    region.querySelectorAll("input, select, textarea").forEach(function (field) {
      if (!match && field.name === was.name && (field.type !== "radio" && field.type !== "checkbox" || field.value === was.value)) match = field;
    });
    return match;
  }

  function statusIn(region) {
    var found = null;
    region.querySelectorAll("[role=alert], [role=status]").forEach(function (element) {
      if (!found && element.textContent.trim() && !element.closest("[hidden]") && element.offsetParent !== null) found = element;
    });
    return found;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    var active = document.activeElement;
    lost = null;
    if (!target || !active || active === document.body || !target.contains(active)) return;
    lost = {
      id: active.id || "",
      name: active.getAttribute("name") || "",
      value: active.value,
      submit: active.type === "submit" || active.tagName === "A",
      boosted: target === document.body,
    };
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var was = lost;
    var active = document.activeElement;
    if (!was || active && active !== document.body && document.contains(active)) return;
    lost = null;
    var region = event.target === document ? document.body : event.target;
    if (!region || !document.contains(region)) return;
    if (was.boosted) {
      var message = document.querySelector("#flash .alert, main [role=alert], main [aria-invalid='true']");
      if (message && focusable(message)) message.focus();
      return; // a new page without a message keeps the browser's own start
    }
    var candidates = [
      region.querySelector("[data-focus-after-swap]"),
      sameControl(region, was),
      region.querySelector("[aria-invalid='true']"),
      statusIn(region),
      region,
    ];
    for (var i = 0; i < candidates.length; i++) {
      if (candidates[i] && region.contains(candidates[i]) && focusable(candidates[i])) {
        candidates[i].focus();
        return;
      }
    }
  });
})();

// The phone menu closes on Escape and gives the focus back to Menu.
document.addEventListener("keydown", function (event) {
  if (event.key !== "Escape") return;
  var nav = document.querySelector("nav.nav-open");
  if (!nav) return;
  var button = nav.querySelector(".nav-toggle");
  nav.classList.remove("nav-open");
  if (button) {
    button.setAttribute("aria-expanded", "false");
    button.focus();
  }
});
