// Live updates: the server pushes a fresh rendering of <main> as a
// server-sent event whenever a watched object changes; no page reload.
(function () {
  var live = document.getElementById("live");
  var fleet = document.getElementById("fleet");
  window.fleetUpdates = 0;
  var source = new EventSource("/events");
  source.addEventListener("fleet", function (event) {
    fleet.innerHTML = event.data;
    window.fleetUpdates += 1;
    live.dataset.live = "live";
    live.textContent = "live · " + new Date().toLocaleTimeString();
  });
  source.onerror = function () {
    live.dataset.live = "reconnecting";
    live.textContent = "reconnecting…";
  };
})();
