// Live views: every data-live section re-reads its fragment on its own period (the
// page's, or data-every-ms: the charts move once per sample). One request per view
// per period; a failed read marks the page stale, never blanks it.
(function () {
  "use strict";
  var stamp = document.getElementById("updated");
  if (!stamp) { return; }
  var period = parseInt(stamp.getAttribute("data-refresh-ms"), 10) || 2000;
  function watch(view) {
    var every = parseInt(view.getAttribute("data-every-ms"), 10) || period;
    function refresh() {
      fetch(view.getAttribute("data-live"), {credentials: "same-origin", cache: "no-store"})
        .then(function (answer) {
          if (!answer.ok) { throw new Error(String(answer.status)); }
          return answer.text();
        })
        .then(function (html) {
          view.innerHTML = html;
          stamp.textContent = "live · " + new Date().toLocaleTimeString();
          stamp.className = "";
        }, function () {
          stamp.textContent = "not updating — check the connection";
          stamp.className = "stale";
        })
        .then(function () { window.setTimeout(refresh, every); });
    }
    window.setTimeout(refresh, every);
  }
  Array.prototype.forEach.call(document.querySelectorAll("[data-live]"), watch);
}());
