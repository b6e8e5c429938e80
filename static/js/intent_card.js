// The connection card (templates/interactions/_connection_intent.html): opens and closes its <dialog>, returns focus
// to the card, opens the provider sign-in in a popup (new-tab fallback), and re-reads the card from the server when
// the sign-in window reports back or closes. The window's message is only a hint: the card shown is always the
// server's. Loaded once per page however many cards include it.
(function () {
  if (window.switchboardIntentCard) return;
  window.switchboardIntentCard = true;

  var MESSAGE_TYPE = "paperclip.connection-intent.oauth";
  var focusAfterSwap = null; // interaction id whose card should take focus once it is swapped in
  var popups = {}; // interaction id -> {window, timer, answered}

  function byId(id) { return document.getElementById(id); }
  function card(id) { return byId("intent-card-" + id); }
  function dialog(id) { return byId("intent-dialog-" + id); }

  function focusCard(id) {
    var element = card(id);
    if (!element) return;
    var target = element.classList.contains("connection-intent-focus-target")
      ? element
      : element.querySelector(".connection-intent-focus-target") || element;
    target.focus();
  }

  function refreshCard(id) {
    var element = card(id);
    if (!element || !window.htmx) return;
    focusAfterSwap = id;
    htmx.ajax("GET", element.getAttribute("data-card-url"), { target: element, swap: "outerHTML" });
  }

  function setPhase(id, phase) {
    var element = card(id);
    var url = element && element.getAttribute("data-phase-url");
    if (!url || !window.htmx) { refreshCard(id); return; }
    focusAfterSwap = id;
    htmx.ajax("POST", url, { target: element, swap: "outerHTML", values: { phase: phase } });
  }

  function closeDialog(id) {
    var box = dialog(id);
    if (box && box.open) box.close();
  }

  // Opening: show the dialog with a loading line while htmx fetches its body.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var id = event.detail.elt.getAttribute && event.detail.elt.getAttribute("data-intent-open");
    if (!id) return;
    var box = dialog(id);
    if (!box) return;
    var body = byId("intent-dialog-" + id + "-body");
    body.innerHTML = "";
    var loading = document.createElement("p");
    loading.setAttribute("aria-busy", "true");
    loading.textContent = "Loading connection options…";
    body.appendChild(loading);
    if (!box.open) {
      box.showModal();
      pushDialogEntry(id);
    }
  });

  // Browser Back closes an open dialog before it leaves the page: opening adds a history entry for the same address,
  // and Back returns to the page's own entry, which closes the dialog. While the dialog is open that entry carries a
  // mark instead of htmx's state, so htmx does not restore the page from its history on that Back; the state is put
  // back once the dialog has closed. Closing the dialog any other way takes the added entry off again.
  var historyDialog = null; // the interaction id whose dialog added the current history entry
  function pushDialogEntry(id) {
    if (historyDialog) return;
    history.replaceState({ switchboardDialogBase: true, saved: history.state }, "");
    history.pushState({ switchboardDialog: id }, "");
    historyDialog = id;
  }
  window.addEventListener("popstate", function (event) {
    var state = event.state;
    if (!state || !state.switchboardDialogBase) return;
    history.replaceState(state.saved, "");
    var id = historyDialog;
    historyDialog = null;
    if (id) closeDialog(id);
  });
  function dropDialogEntry() {
    if (!historyDialog) return;
    historyDialog = null;
    history.back();
  }
  // Only a close the person made takes the entry off (history.back() is asynchronous: after a close the page made
  // itself, a sign-in window closing, it could undo a navigation the person just started). Otherwise the entry
  // stays, and the next Back only restores the page's state.
  var closingByPerson = false;
  document.addEventListener("cancel", function (event) {
    if (event.target.classList && event.target.classList.contains("connection-dialog")) closingByPerson = true;
  }, true);
  // An answer to a request made from inside the dialog (Not now, a connection used) replaced the card, and its open
  // dialog with it, without a close event.
  document.addEventListener("htmx:afterSettle", function (event) {
    var elt = event.detail.requestConfig && event.detail.requestConfig.elt;
    var fromDialog = elt && elt.closest && elt.closest("[data-intent-dialog]");
    if (fromDialog && historyDialog && !document.querySelector("dialog.connection-dialog[open]")) dropDialogEntry();
  });

  // A dialog body that failed to load: say so inside the dialog, with a way to try again.
  document.addEventListener("htmx:responseError", function (event) {
    var id = event.detail.elt.getAttribute && event.detail.elt.getAttribute("data-intent-open");
    if (!id) return;
    var body = byId("intent-dialog-" + id + "-body");
    if (!body) return;
    var message = "";
    var holder = document.createElement("div");
    holder.innerHTML = event.detail.xhr.responseText;
    var alert = holder.querySelector("[role=alert]");
    if (alert) message = alert.textContent.trim();
    body.innerHTML = "";
    var box = document.createElement("div");
    box.className = "alert alert-danger";
    box.setAttribute("role", "alert");
    var title = document.createElement("strong");
    title.textContent = "Couldn’t load connection setup. ";
    box.appendChild(title);
    box.appendChild(document.createTextNode(message));
    body.appendChild(box);
    var again = document.createElement("button");
    again.type = "button";
    again.textContent = "Try again";
    again.addEventListener("click", function () { htmx.trigger(event.detail.elt, "submit"); });
    var close = document.createElement("button");
    close.type = "button";
    close.className = "secondary outline";
    close.textContent = "Close";
    close.setAttribute("data-intent-close", "");
    body.appendChild(again);
    body.appendChild(close);
  });

  // A resolved or refreshed card replaced the old one (and its dialog): give it focus. Only a swap that brought the
  // card in counts: another region settling first (the Inbox badge, told at the same moment) must not focus the old
  // card just before it is replaced.
  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail.target;
    if (target && target.id === "setup-flow" || !focusAfterSwap) return;
    var id = focusAfterSwap;
    var settled = event.target;
    var swappedIn = card(id);
    if (!swappedIn || !settled || !(settled === swappedIn || (settled.contains && settled.contains(swappedIn)))) return;
    if (!(dialog(id) && dialog(id).open)) {
      focusAfterSwap = null;
      focusCard(id);
    }
  });

  // Requests from inside a dialog that resolve the card come back as the card: focus it afterwards.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var elt = event.detail.elt;
    var content = elt && elt.closest && elt.closest("[data-intent-dialog], [data-intent-card]");
    if (!content) return;
    var retarget = event.detail.xhr.getResponseHeader("HX-Retarget") || "";
    if (retarget.indexOf("#intent-card-") === 0) focusAfterSwap = retarget.slice("#intent-card-".length);
  });

  document.addEventListener("click", function (event) {
    var close = event.target.closest && event.target.closest("[data-intent-close]");
    if (!close) return;
    var box = close.closest("dialog");
    if (!box) return;
    closingByPerson = true;
    box.close();
  });

  // Closing the dialog (button or Escape) empties it and returns focus to the card.
  document.addEventListener("close", function (event) {
    var box = event.target;
    if (!box.classList || !box.classList.contains("connection-dialog")) return;
    var id = box.id.replace(/^intent-dialog-/, "");
    var body = byId("intent-dialog-" + id + "-body");
    if (body) body.innerHTML = "";
    if (historyDialog === id && closingByPerson) dropDialogEntry();
    closingByPerson = false;
    focusCard(id);
  }, true);

  // Provider sign-in from the dialog: a popup named per card; the form posts into it (the server answers with the
  // redirect to the provider, so no authorization URL ever reaches this page).
  function windowName(id) { return "switchboard-oauth-" + id; }

  function openSignInWindow(id) {
    return window.open("", windowName(id), "popup,width=560,height=720");
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var id = form.getAttribute && form.getAttribute("data-intent-oauth");
    if (!id) {
      openOnSetupClick(event);
      return;
    }
    var submitter = event.submitter;
    if (submitter && submitter.getAttribute("formtarget") === "_blank") {
      watchSignIn(id, null);
      return; // the new-tab fallback: let the browser open it
    }
    var popup = openSignInWindow(id);
    if (!popup) {
      event.preventDefault();
      var blocked = form.querySelector(".connection-dialog-popup-blocked");
      if (blocked) blocked.hidden = false;
      return;
    }
    form.target = windowName(id);
    watchSignIn(id, popup);
  });

  // One click: the setup form's "Sign in with <provider>" (or "Reconnect with") inside a card's dialog opens the
  // sign-in window while the click still counts as the person's (browsers block windows opened later). htmx then
  // saves the setup; its answer is the sign-in step, whose form is posted into that window at once. Any other
  // answer (a refusal shown in the form, the card itself) closes the window again.
  var opening = {}; // interaction id -> the window opened on the click, until the setup's answer is in
  function openOnSetupClick(event) {
    var submitter = event.submitter;
    if (!submitter || !submitter.hasAttribute("data-oauth-sign-in")) return;
    var content = event.target.closest && event.target.closest("[data-intent-dialog]");
    if (!content) return;
    var id = content.getAttribute("data-intent-dialog");
    var popup = openSignInWindow(id);
    if (!popup) return; // blocked: the sign-in step's own button is the fallback
    try {
      popup.document.title = "Opening sign-in…";
      popup.document.body.textContent = "Opening the sign-in…";
    } catch (ignored) { /* a window of that name already shows another page */ }
    opening[id] = { window: popup, answered: false };
  }

  function continueSignIn() {
    Object.keys(opening).forEach(function (id) {
      if (!opening[id].answered) return; // the setup's answer is not in yet (another request settled)
      var popup = opening[id].window;
      var form = document.querySelector('form[data-intent-oauth="' + id + '"]');
      delete opening[id];
      if (popup.closed) return;
      if (!form) { popup.close(); return; }
      var note = form.parentNode.querySelector("[data-intent-oauth-open]");
      if (note) note.hidden = false;
      form.target = windowName(id);
      watchSignIn(id, popup);
      form.submit(); // no submit event: this handler already did what the listener above would
    });
  }

  function signInWaitingFor(event) {
    var elt = event.detail.elt;
    var content = elt && elt.closest && elt.closest("[data-intent-dialog]");
    var id = content && content.getAttribute("data-intent-dialog");
    return id && opening[id] ? id : null;
  }

  // The setup's answer is about to be swapped in (the form that asked is still in the page): once it has
  // settled, the sign-in step's form is there to post, or it is not and the window closes.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var id = signInWaitingFor(event);
    if (id) opening[id].answered = true;
  });
  document.addEventListener("htmx:afterSettle", continueSignIn);
  // No answer to swap (the network failed, or an error page): close the window the click opened.
  function abandon(event) {
    var id = signInWaitingFor(event);
    if (!id) return;
    opening[id].window.close();
    delete opening[id];
  }
  document.addEventListener("htmx:sendError", abandon);
  document.addEventListener("htmx:responseError", abandon);

  function watchSignIn(id, popup) {
    var previous = popups[id];
    if (previous && previous.timer) clearInterval(previous.timer);
    var entry = { window: popup, timer: null, answered: false };
    popups[id] = entry;
    if (!popup) return;
    entry.timer = setInterval(function () {
      if (!popup.closed) return;
      clearInterval(entry.timer);
      if (entry.answered) return;
      // Closed without an answer: the request stays retryable.
      closeDialog(id);
      setPhase(id, "needs_retry");
    }, 500);
  }

  window.addEventListener("message", function (event) {
    if (event.origin !== window.location.origin) return;
    var data = event.data;
    if (!data || data.type !== MESSAGE_TYPE || typeof data.interactionId !== "string") return;
    var id = data.interactionId;
    if (!card(id)) return;
    if (popups[id]) popups[id].answered = true;
    // Never trust the message: re-read the card, which shows what the server recorded.
    closeDialog(id);
    refreshCard(id);
    // The sign-in answered the card in its own window: the Inbox badge looks again now, not at its next poll.
    htmx.trigger(document.body, "inbox-changed");
  });
})();
