// The end of a card's sign-in in its window (templates/oauth/opener.html): tell the task page (a hint it re-reads
// from the server) and close; opened without a task page behind it, go back to the task instead. A file, not an
// inline script, so the Content-Security-Policy allows scripts from this origin only.
(function () {
  var data = document.getElementById("opener-data");
  var message = JSON.parse(data.dataset.message);
  var targetOrigin = data.dataset.targetOrigin;
  if (window.opener && !window.opener.closed) {
    window.opener.postMessage(message, targetOrigin);
    window.close();
  } else {
    window.location.replace(data.dataset.fallbackUrl);
  }
})();
