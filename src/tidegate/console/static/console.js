// Live views: every data-live section re-reads its fragment on the refresh period.
// One request per view per period; a failed read marks the page stale, never blanks it.
(function () {
  "use strict";
  var stamp = document.getElementById("updated");
  if (!stamp) { return; }
  var period = parseInt(stamp.getAttribute("data-refresh-ms"), 10) || 2000;
  var views = document.querySelectorAll("[data-live]");
  function refresh() {
    var reads = Array.prototype.map.call(views, function (view) {
      return fetch(view.getAttribute("data-live"), {credentials: "same-origin", cache: "no-store"})
        .then(function (answer) {
          if (!answer.ok) { throw new Error(String(answer.status)); }
          return answer.text();
        })
        .then(function (html) { view.innerHTML = html; });
    });
    Promise.all(reads).then(function () {
      stamp.textContent = "live · " + new Date().toLocaleTimeString();
      stamp.className = "";
    }, function () {
      stamp.textContent = "not updating — check the connection";
      stamp.className = "stale";
    }).then(function () { window.setTimeout(refresh, period); });
  }
  window.setTimeout(refresh, period);
}());
