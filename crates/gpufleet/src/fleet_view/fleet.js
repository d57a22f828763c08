// The fleet view's client: plain JavaScript, no build step. It fetches the
// model once (/api/fleet), then applies the deltas of /events (only the
// records that changed, numbered; a gap means something was missed, so it
// fetches the model again). It draws only what is on screen: one heatmap
// cell per rack, the Node rows in the scrolled window, and the detail the
// URL's hash names (#rack=, #node=, #gpu=, #job=ns/name), so a link to a
// detail opens it.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var live = $("live"), heatmap = $("heatmap"), list = $("nodes"), spacer = list.firstElementChild;
  var detail = $("detail"), results = $("results"), search = $("search");
  var ROW = 30;
  var mode = document.body.dataset.mode;

  // The model, by key.
  var racks = new Map();   // name -> rack record
  var slots = new Map();   // "rack#index" -> slot record
  var rackSlots = new Map(); // rack name -> [slot keys]
  var nodes = new Map();   // name -> node record
  var jobs = new Map();    // "ns/name" -> job record
  var gpus = new Map();    // uuid (lower case) -> slot key
  var serials = new Map(); // serial -> uuid
  var summary = {};
  var watched = true;
  var seq = -1;            // -1: no model yet
  var pending = [];        // deltas that arrived before the model
  var rows = [];           // Node names in list order (after filter and sort)
  var rowsDirty = true;
  var heatDirty = true;
  var lastUpdate = null;
  var touched = { racks: new Set() }; // racks whose heatmap cell may have changed
  var wasDisconnected = false;
  window.fleetUpdates = 0;
  // Main-thread milliseconds spent on the model's changes (parsing and
  // applying deltas, then drawing them), read by the benchmark.
  window.fleetWork = { apply: 0, draw: 0, deltas: 0 };

  function esc(text) {
    return String(text == null ? "" : text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  // One time format everywhere: UTC, to the second.
  function fmtTime(value) {
    if (!value) return "—";
    var d = value instanceof Date ? value : new Date(value);
    if (isNaN(d)) return String(value);
    return d.toISOString().slice(0, 19).replace("T", " ") + "Z";
  }
  function slotKey(rack, index) { return rack + "#" + index; }
  function hash(kind, value) { return "#" + kind + "=" + encodeURIComponent(value); }

  // ----- the model -----
  function putSlot(slot) {
    var key = slotKey(slot.rack, slot.index);
    var old = slots.get(key);
    if (old) old.gpus.forEach(function (g) { gpus.delete(g.uuid.toLowerCase()); serials.delete(g.serial); });
    else {
      var keys = rackSlots.get(slot.rack) || [];
      keys.push(key);
      rackSlots.set(slot.rack, keys);
    }
    slots.set(key, slot);
    slot.gpus.forEach(function (g) { gpus.set(g.uuid.toLowerCase(), key); serials.set(g.serial, g.uuid); });
  }
  function dropSlot(rack, index) {
    var key = slotKey(rack, index), old = slots.get(key);
    if (!old) return;
    old.gpus.forEach(function (g) { gpus.delete(g.uuid.toLowerCase()); serials.delete(g.serial); });
    slots.delete(key);
    var keys = (rackSlots.get(rack) || []).filter(function (k) { return k !== key; });
    rackSlots.set(rack, keys);
  }
  function load(model) {
    racks.clear(); slots.clear(); rackSlots.clear(); nodes.clear(); jobs.clear(); gpus.clear(); serials.clear();
    model.racks.forEach(function (r) { racks.set(r.name, r); });
    model.slots.forEach(putSlot);
    model.nodes.forEach(function (n) { nodes.set(n.name, n); });
    model.jobs.forEach(function (j) { jobs.set(j.namespace + "/" + j.name, j); });
    summary = model.summary;
    watched = model.tfjobs_watched;
    seq = model.seq;
    rowsDirty = heatDirty = true;
  }
  function apply(delta) {
    (delta.racks_removed || []).forEach(function (name) { racks.delete(name); rackSlots.delete(name); heatDirty = true; });
    (delta.racks || []).forEach(function (r) { if (!racks.has(r.name)) heatDirty = true; racks.set(r.name, r); touched.racks.add(r.name); });
    (delta.slots_removed || []).forEach(function (k) { dropSlot(k[0], k[1]); touched.racks.add(k[0]); rowsDirty = true; });
    (delta.slots || []).forEach(function (s) {
      var old = slots.get(slotKey(s.rack, s.index));
      if (!old || old.node !== s.node) rowsDirty = true;
      putSlot(s); touched.racks.add(s.rack);
    });
    (delta.nodes_removed || []).forEach(function (n) { nodes.delete(n); rowsDirty = true; });
    (delta.nodes || []).forEach(function (n) {
      var old = nodes.get(n.name);
      if (!old || old.rack !== n.rack || old.slot !== n.slot) rowsDirty = true;
      nodes.set(n.name, n);
    });
    (delta.jobs_removed || []).forEach(function (k) { jobs.delete(k[0] + "/" + k[1]); });
    (delta.jobs || []).forEach(function (j) { jobs.set(j.namespace + "/" + j.name, j); });
    if (delta.summary) summary = delta.summary;
    seq = delta.seq;
    window.fleetUpdates += 1;
    // A filter that depends on state (only problems, hottest first) must re-run.
    if (onlyProblems() || sortBy() !== "rack" && sortBy() !== "name") rowsDirty = true;
  }
  // ----- judging -----
  function slotOf(node) { return node && node.rack != null ? slots.get(slotKey(node.rack, node.slot)) : null; }
  function gpuStatus(g) { return g.state === "healthy" && g.hot ? "hot" : g.state; }
  function rackStatus(name) {
    // The worst of its GPUs: lost, degraded, hot, unbound (an empty slot), healthy.
    var worst = "healthy", rank = { healthy: 0, unbound: 1, hot: 2, degraded: 3, lost: 4 };
    (rackSlots.get(name) || []).forEach(function (key) {
      slots.get(key).gpus.forEach(function (g) { var st = gpuStatus(g); if (rank[st] > rank[worst]) worst = st; });
    });
    return worst;
  }
  function nodeProblems(node) {
    var out = [];
    if (node.ready === false) out.push("NotReady");
    if (node.rack == null) out.push("no slot");
    var s = slotOf(node);
    if (s) s.gpus.forEach(function (g) { if (g.state === "lost" || g.state === "degraded" || g.hot) out.push("GPU " + g.index + " " + (g.hot && g.state === "healthy" ? "hot" : g.state)); });
    return out;
  }
  function maxTemp(node) {
    var s = slotOf(node), t = null;
    if (s) s.gpus.forEach(function (g) { if (g.celsius != null && (t == null || g.celsius > t)) t = g.celsius; });
    return t;
  }
  function jobsOn(nodeName) {
    var out = [];
    jobs.forEach(function (j, key) { j.pods.forEach(function (p) { if (p.node === nodeName) out.push({ key: key, job: j, pod: p }); }); });
    return out;
  }
  function brokenNodesOf(job) {
    var out = [];
    job.pods.forEach(function (p) {
      var n = p.node && nodes.get(p.node), s = slotOf(n);
      if (s && s.gpus.some(function (g) { return g.state === "lost" || g.state === "degraded"; }) && out.indexOf(p.node) < 0) out.push(p.node);
    });
    return out;
  }

  // ----- drawing -----
  function onlyProblems() { return $("only-problems").checked; }
  function sortBy() { return $("sort").value; }
  function sortedRacks() {
    return Array.from(racks.values()).sort(function (a, b) { return a.group < b.group ? -1 : a.group > b.group ? 1 : a.index - b.index; });
  }
  function drawCounts() {
    var set = function (id, v) { $(id).textContent = v == null ? "–" : v; };
    set("count-racks", summary.racks); set("count-nodes", summary.nodes); set("count-gpus", summary.gpus);
    set("count-healthy", summary.healthy); set("count-degraded", summary.degraded); set("count-lost", summary.lost);
    set("count-hot", summary.hot); set("count-empty", summary.empty_slots); set("count-notready", summary.not_ready);
    set("count-cordoned", summary.cordoned); set("count-noslot", summary.nodes_without_slot);
    set("count-tfjobs", watched ? summary.tfjobs : "–"); set("count-problems", summary.problems);
    var p = summary.problems || 0;
    document.title = (p ? "(" + p + " problem" + (p === 1 ? "" : "s") + ") " : "") + "gpufleet " + mode;
  }
  function rackLabel(r) { return r.group + " rack " + r.index; }
  function drawHeatmap() {
    var current = location.hash.indexOf("#rack=") === 0 ? decodeURIComponent(location.hash.slice(6)) : null;
    if (heatDirty) {
      var html = [], first = true;
      sortedRacks().forEach(function (r) {
        var st = rackStatus(r.name);
        html.push('<button type="button" class="rack-cell" id="rack-' + esc(r.name) + '" data-rack="' + esc(r.name) + '" data-status="' + st +
          '" tabindex="' + (first ? 0 : -1) + '" aria-label="' + esc(rackLabel(r)) + ": " + st + '" title="' + esc(rackLabel(r)) + " (" + esc(r.name) + "): " + st + '">' + r.index + "</button>");
        first = false;
      });
      heatmap.innerHTML = html.join("");
      heatDirty = false;
    } else {
      touched.racks.forEach(function (name) {
        var cell = document.getElementById("rack-" + name), r = racks.get(name);
        if (!cell || !r) return;
        var st = rackStatus(name);
        cell.dataset.status = st;
        cell.setAttribute("aria-label", rackLabel(r) + ": " + st);
        cell.title = rackLabel(r) + " (" + name + "): " + st;
      });
    }
    Array.prototype.forEach.call(heatmap.querySelectorAll('[aria-current="true"]'), function (c) { c.removeAttribute("aria-current"); });
    if (current) { var c = document.getElementById("rack-" + current); if (c) c.setAttribute("aria-current", "true"); }
    $("overview").classList.toggle("only-problems", onlyProblems());
  }
  function buildRows() {
    var names = [];
    var problemsOnly = onlyProblems(), by = sortBy();
    nodes.forEach(function (n, name) { if (!problemsOnly || nodeProblems(n).length) names.push(name); });
    var order = new Map();
    sortedRacks().forEach(function (r, i) { order.set(r.name, i); });
    var byRack = function (a, b) {
      var na = nodes.get(a), nb = nodes.get(b);
      var ra = na.rack == null ? 1e9 : order.get(na.rack), rb = nb.rack == null ? 1e9 : order.get(nb.rack);
      if (ra !== rb) return ra - rb;
      if (na.slot !== nb.slot) return (na.slot || 0) - (nb.slot || 0);
      return a < b ? -1 : 1;
    };
    if (by === "name") names.sort();
    else if (by === "temp") names.sort(function (a, b) { return (maxTemp(nodes.get(b)) || -1e9) - (maxTemp(nodes.get(a)) || -1e9) || byRack(a, b); });
    else if (by === "problems") names.sort(function (a, b) { return nodeProblems(nodes.get(b)).length - nodeProblems(nodes.get(a)).length || byRack(a, b); });
    else names.sort(byRack);
    rows = names;
    rowsDirty = false;
    spacer.style.height = rows.length * ROW + "px";
    $("nodes-shown").textContent = problemsOnly ? "(" + rows.length + " with problems)" : "(" + rows.length + ")";
  }
  function chips(slot) {
    if (!slot) return '<span class="none">no slot</span>';
    return slot.gpus.map(function (g) {
      var st = gpuStatus(g);
      return '<a class="chip" href="' + hash("gpu", g.uuid) + '" data-uuid="' + esc(g.uuid) + '" data-status="' + st + '" data-state="' + g.state +
        '" title="GPU ' + g.index + ": " + st + (g.celsius != null ? ", " + g.celsius + " °C" : "") + ", serial " + esc(g.serial) + '">' + g.index + (st === "lost" ? "✕" : st === "degraded" ? "!" : st === "hot" ? "▲" : "") + "</a>";
    }).join("");
  }
  function conditionTags(n) {
    var out = [];
    if (n.ready === false) out.push('<span class="tag bad">NotReady</span>');
    else if (n.ready === true) out.push('<span class="tag">Ready</span>');
    if (n.cordoned) out.push('<span class="tag warn">cordoned</span>');
    (n.taints || []).forEach(function (t) { out.push('<span class="tag warn" title="' + esc(t) + '">tainted</span>'); });
    return out.join("");
  }
  function drawRows() {
    if (rowsDirty) buildRows();
    var top = list.scrollTop, height = list.clientHeight || 400;
    var from = Math.max(0, Math.floor(top / ROW) - 5), to = Math.min(rows.length, Math.ceil((top + height) / ROW) + 5);
    var html = [];
    for (var i = from; i < to; i++) {
      var n = nodes.get(rows[i]); if (!n) continue;
      var s = slotOf(n), t = maxTemp(n), problem = nodeProblems(n).length > 0;
      var r = n.rack != null ? racks.get(n.rack) : null;
      html.push('<div class="row' + (problem ? " problem" : "") + '" role="listitem" style="top:' + i * ROW + 'px" data-node="' + esc(n.name) + '">' +
        '<a href="' + hash("node", n.name) + '">' + esc(n.name) + "</a>" +
        "<span>" + (r ? '<a href="' + hash("rack", r.name) + '">' + esc(rackLabel(r)) + "</a> / " + n.slot : '<span class="tag bad">no slot</span>') + "</span>" +
        '<span class="chips">' + chips(s) + "</span>" +
        "<span>" + (t == null ? "—" : t) + "</span>" +
        "<span>" + fmtTime(n.inventoried_at) + "</span>" +
        '<span class="cond">' + conditionTags(n) + "</span></div>");
    }
    list.querySelectorAll(".row").forEach(function (el) { el.remove(); });
    list.insertAdjacentHTML("beforeend", html.join(""));
  }
  function drawJobs() {
    var box = $("jobs");
    if (!watched) { box.innerHTML = '<p class="none">not watched here (this view is served by the Mokka control plane, which reads no pods or TFJobs)</p>'; return; }
    if (!jobs.size) { box.innerHTML = '<p class="none">no TFJobs</p>'; return; }
    var html = [];
    Array.from(jobs.keys()).sort().forEach(function (key) {
      var j = jobs.get(key), broken = brokenNodesOf(j);
      html.push('<div class="job" id="job-' + esc(j.namespace) + "-" + esc(j.name) + '" data-phase="' + esc(j.phase) + '"' + (broken.length ? ' data-broken="true"' : "") + ">" +
        '<a href="' + hash("job", key) + '"><b>' + esc(key) + "</b></a> " +
        '<span class="phase ' + esc(j.phase.toLowerCase()) + '">' + esc(j.phase) + "</span>" +
        (broken.length ? ' <span class="tag bad">on a Node with a broken GPU: ' + broken.map(esc).join(", ") + "</span>" : "") +
        "<ul>" + j.pods.map(function (p) {
          return "<li>" + esc(p.name) + " → " + (p.node ? '<a href="' + hash("node", p.node) + '"><code>' + esc(p.node) + "</code></a>" : "(unscheduled)") + " <small>" + esc(p.phase) + "</small></li>";
        }).join("") + "</ul></div>");
    });
    box.innerHTML = html.join("");
  }

  // ----- detail (rack -> Node -> GPU, TFJob) -----
  function gpuCell(g, rack) {
    var st = gpuStatus(g), limit = rack && rack.hot_celsius;
    return '<td class="gpu" data-status="' + st + '" data-uuid="' + esc(g.uuid) + '" data-state="' + g.state + '"><a href="' + hash("gpu", g.uuid) + '">' + st + "</a> " +
      (g.celsius != null ? g.celsius + " °C" : "—") + (limit != null && g.celsius != null ? ' <small>(max ' + limit + ")</small>" : "") +
      "<br><small>…" + esc(g.serial.slice(-6)) + "</small></td>";
  }
  function nodeLink(name) { return name ? '<a href="' + hash("node", name) + '"><code>' + esc(name) + "</code></a>" : "—"; }
  function rackDetail(name) {
    var r = racks.get(name);
    if (!r) return "<h2>Rack " + esc(name) + "</h2><p>No such rack (it may have been deleted).</p>";
    var keys = (rackSlots.get(name) || []).slice().sort(function (a, b) { return slots.get(a).index - slots.get(b).index; });
    var head = "<tr><th>slot</th><th>Node</th>";
    var width = keys.length ? slots.get(keys[0]).gpus.length : 0;
    for (var i = 0; i < width; i++) head += "<th>GPU " + i + "</th>";
    head += "<th>inventoried (gpuid)</th><th>conditions</th></tr>";
    var body = keys.map(function (k) {
      var s = slots.get(k), n = s.node ? nodes.get(s.node) : null;
      return "<tr><td>" + s.index + "</td><td>" + nodeLink(s.node) + "</td>" + s.gpus.map(function (g) { return gpuCell(g, r); }).join("") +
        "<td>" + fmtTime(n && n.inventoried_at) + "</td><td>" + (n ? conditionTags(n) : s.node ? '<span class="tag bad">Node gone</span>' : "") + "</td></tr>";
    }).join("");
    return '<div class="crumbs"><a href="#">fleet</a> › ' + esc(rackLabel(r)) + "</div><h2>" + esc(rackLabel(r)) + " <small>" + esc(r.name) + "</small></h2>" +
      "<dl><dt>status</dt><dd>" + rackStatus(name) + "</dd><dt>chassis serial</dt><dd>" + esc(r.chassis) + "</dd><dt>profile</dt><dd>" + esc(r.profile) +
      "</dd><dt>hot above</dt><dd>" + (r.hot_celsius != null ? r.hot_celsius + " °C" : "—") + (r.shutdown_celsius != null ? " (shutdown at " + r.shutdown_celsius + " °C)" : "") + "</dd></dl>" +
      '<div class="scroll-x"><table>' + head + body + "</table></div>";
  }
  function nodeDetail(name) {
    var n = nodes.get(name);
    if (!n) return "<h2>Node " + esc(name) + "</h2><p>No such Node (it may have been deleted).</p>";
    var r = n.rack != null ? racks.get(n.rack) : null, s = slotOf(n);
    var here = jobsOn(name);
    return '<div class="crumbs"><a href="#">fleet</a> › ' + (r ? '<a href="' + hash("rack", r.name) + '">' + esc(rackLabel(r)) + "</a> › " : "") + esc(name) + "</div>" +
      "<h2>Node " + esc(name) + "</h2><dl>" +
      "<dt>slot</dt><dd>" + (r ? esc(rackLabel(r)) + ", slot " + n.slot : '<span class="tag bad">no rack slot is bound to this Node</span>') + "</dd>" +
      "<dt>conditions</dt><dd>" + (conditionTags(n) || "—") + (n.ready == null ? " Ready not reported" : "") + "</dd>" +
      "<dt>taints</dt><dd>" + ((n.taints || []).map(function (t) { return "<code>" + esc(t) + "</code>"; }).join(", ") || "none") + "</dd>" +
      "<dt>cordoned</dt><dd>" + (n.cordoned ? "yes (unschedulable)" : "no") + "</dd>" +
      "<dt>inventoried by gpuid</dt><dd>" + fmtTime(n.inventoried_at) + "</dd>" +
      "<dt>TFJob pods here</dt><dd>" + (here.length ? here.map(function (h) { return '<a href="' + hash("job", h.key) + '">' + esc(h.key) + "</a> " + esc(h.pod.name) + " (" + esc(h.pod.phase) + ")"; }).join("<br>") : watched ? "none" : "not watched here") + "</dd></dl>" +
      (s ? '<div class="scroll-x"><table><tr><th>GPU</th><th>state</th><th>°C</th><th>UUID</th><th>serial</th><th>runtime policies</th></tr>' + s.gpus.map(function (g) {
        return '<tr><td><a href="' + hash("gpu", g.uuid) + '">' + g.index + '</a></td><td data-status="' + gpuStatus(g) + '">' + gpuStatus(g) + "</td><td>" + (g.celsius != null ? g.celsius : "—") +
          "</td><td><code>" + esc(g.uuid) + "</code></td><td><code>" + esc(g.serial) + "</code></td><td>" + ((g.policies || []).map(esc).join(", ") || "profile defaults") + "</td></tr>";
      }).join("") + "</table></div>" : "");
  }
  function gpuDetail(uuid) {
    var key = gpus.get(uuid.toLowerCase()), s = key && slots.get(key);
    var g = s && s.gpus.filter(function (x) { return x.uuid.toLowerCase() === uuid.toLowerCase(); })[0];
    if (!g) return "<h2>GPU " + esc(uuid) + "</h2><p>No such GPU.</p>";
    var r = racks.get(s.rack), n = s.node ? nodes.get(s.node) : null, here = s.node ? jobsOn(s.node) : [];
    var st = gpuStatus(g);
    return '<div class="crumbs"><a href="#">fleet</a> › <a href="' + hash("rack", s.rack) + '">' + esc(r ? rackLabel(r) : s.rack) + "</a> › " + (s.node ? '<a href="' + hash("node", s.node) + '">' + esc(s.node) + "</a> › " : "") + "GPU " + g.index + "</div>" +
      '<h2 id="gpu-detail" data-uuid="' + esc(g.uuid) + '" data-state="' + g.state + '">GPU ' + g.index + ' <span class="tag" data-status="' + st + '">' + st + "</span></h2><dl>" +
      "<dt>UUID</dt><dd><code>" + esc(g.uuid) + "</code></dd><dt>serial</dt><dd><code>" + esc(g.serial) + "</code></dd>" +
      "<dt>state</dt><dd>" + esc(g.state) + "</dd>" +
      "<dt>temperature</dt><dd>" + (g.celsius != null ? g.celsius + " °C" : "—") + (r && r.hot_celsius != null ? " (hot above " + r.hot_celsius + " °C, the profile's maximum operating temperature)" : "") + "</dd>" +
      "<dt>runtime policies</dt><dd>" + ((g.policies || []).map(esc).join(", ") || "none: the profile's defaults") + "</dd>" +
      "<dt>Node</dt><dd>" + nodeLink(s.node) + (n ? " " + conditionTags(n) : "") + "</dd>" +
      "<dt>rack / slot</dt><dd>" + (r ? '<a href="' + hash("rack", r.name) + '">' + esc(rackLabel(r)) + "</a>" : esc(s.rack)) + " / " + s.index + "</dd>" +
      "<dt>inventoried by gpuid</dt><dd>" + fmtTime(n && n.inventoried_at) + "</dd>" +
      "<dt>TFJob pods on its Node</dt><dd>" + (here.length ? here.map(function (h) { return '<a href="' + hash("job", h.key) + '">' + esc(h.key) + "</a> " + esc(h.pod.name); }).join("<br>") : "none") + "</dd></dl>";
  }
  function jobDetail(key) {
    var j = jobs.get(key);
    if (!j) return "<h2>TFJob " + esc(key) + "</h2><p>No such TFJob.</p>";
    var broken = brokenNodesOf(j);
    return '<div class="crumbs"><a href="#">fleet</a> › TFJob</div><h2>TFJob ' + esc(key) + ' <span class="phase ' + esc(j.phase.toLowerCase()) + '">' + esc(j.phase) + "</span></h2>" +
      (broken.length ? '<p><span class="tag bad">runs on a Node with a lost or degraded GPU</span> ' + broken.map(nodeLink).join(", ") + "</p>" : "") +
      '<div class="scroll-x"><table><tr><th>pod</th><th>phase</th><th>Node</th><th>GPUs of the Node</th></tr>' + j.pods.map(function (p) {
        var n = p.node && nodes.get(p.node);
        return "<tr><td>" + esc(p.name) + "</td><td>" + esc(p.phase) + "</td><td>" + (p.node ? nodeLink(p.node) : "(unscheduled)") + '</td><td class="chips">' + (n ? chips(slotOf(n)) : "") + "</td></tr>";
      }).join("") + "</table></div>";
  }
  function route() {
    var h = location.hash.slice(1), eq = h.indexOf("=");
    return eq < 0 ? { kind: h, value: "" } : { kind: h.slice(0, eq), value: decodeURIComponent(h.slice(eq + 1)) };
  }
  function drawDetail() {
    var r = route(), html = null;
    if (r.kind === "rack") html = rackDetail(r.value);
    else if (r.kind === "node") html = nodeDetail(r.value);
    else if (r.kind === "gpu") html = gpuDetail(r.value);
    else if (r.kind === "job") html = jobDetail(r.value);
    detail.hidden = html == null;
    if (html != null) detail.innerHTML = html;
  }

  // ----- search -----
  function find(query) {
    var q = query.trim(), lower = q.toLowerCase(), out = [];
    if (!q) return out;
    if (gpus.has(lower)) out.push({ href: hash("gpu", slots.get(gpus.get(lower)).gpus.filter(function (g) { return g.uuid.toLowerCase() === lower; })[0].uuid), text: "GPU " + q });
    if (serials.has(q)) out.push({ href: hash("gpu", serials.get(q)), text: "GPU with serial " + q });
    if (nodes.has(q)) out.push({ href: hash("node", q), text: "Node " + q });
    jobs.forEach(function (j, key) { if (j.name === q || key === q) out.push({ href: hash("job", key), text: "TFJob " + key }); });
    racks.forEach(function (r) { if (r.name === q) out.push({ href: hash("rack", r.name), text: "rack " + rackLabel(r) }); });
    if (lower.length >= 2) {
      var more = 0;
      nodes.forEach(function (n, name) { if (more < 20 && name !== q && name.toLowerCase().indexOf(lower) >= 0) { out.push({ href: hash("node", name), text: "Node " + name }); more++; } });
      jobs.forEach(function (j, key) { if (j.name !== q && key.toLowerCase().indexOf(lower) >= 0) out.push({ href: hash("job", key), text: "TFJob " + key }); });
    }
    return out;
  }
  function drawResults() {
    var q = search.value, found = find(q);
    if (!q.trim()) { results.hidden = true; results.innerHTML = ""; return found; }
    results.hidden = false;
    results.innerHTML = found.length
      ? "<b>" + found.length + " match" + (found.length === 1 ? "" : "es") + "</b><ul>" + found.map(function (f) { return '<li><a href="' + f.href + '">' + esc(f.text) + "</a></li>"; }).join("") + "</ul>"
      : '<p class="none">Nothing matches “' + esc(q) + "” (Node name, full GPU serial or UUID, TFJob name).</p>";
    return found;
  }

  // ----- one frame draws whatever changed -----
  var frame = 0;
  function redraw() {
    if (frame) return;
    frame = requestAnimationFrame(function () {
      frame = 0;
      var started = performance.now();
      drawCounts(); drawHeatmap(); drawRows(); drawJobs(); drawDetail();
      if (!results.hidden) drawResults();
      touched.racks.clear();
      var now = performance.now();
      window.fleetWork.draw += now - started;
      // The first drawing with data: what the benchmark calls the first
      // useful render (milliseconds since navigation started).
      if (seq >= 0 && window.fleetFirstRender == null) window.fleetFirstRender = now;
    });
  }

  // ----- data -----
  var fetching = false;
  function refetch() {
    if (fetching) return;
    fetching = true;
    seq = -1;
    fetch("/api/fleet", { cache: "no-store" }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(function (model) {
      fetching = false;
      load(model);
      var queued = pending; pending = [];
      queued.forEach(receive);
      lastUpdate = new Date();
      window.fleetLoaded = true;
      redraw();
    }).catch(function () { fetching = false; setTimeout(refetch, 2000); });
  }
  function receive(delta) {
    if (seq < 0) { pending.push(delta); return; }
    if (delta.seq <= seq) return;
    if (delta.seq !== seq + 1) { refetch(); return; }
    apply(delta);
    lastUpdate = new Date();
    redraw();
  }
  function setLive(state, text) {
    live.dataset.live = state;
    live.textContent = text;
    var stale = state === "disconnected";
    document.body.classList.toggle("stale", stale);
    $("stale").hidden = !stale;
    if (stale) $("stale-at").textContent = fmtTime(lastUpdate);
  }
  var source = new EventSource("/events");
  source.addEventListener("hello", function () {
    setLive("live", "live");
    // Anything may have changed while disconnected: start from the model.
    if (wasDisconnected) refetch();
    wasDisconnected = false;
  });
  source.addEventListener("delta", function (event) {
    var started = performance.now(), delta;
    try { delta = JSON.parse(event.data); } catch (e) { refetch(); return; }
    receive(delta);
    window.fleetWork.apply += performance.now() - started;
    window.fleetWork.deltas += 1;
  });
  source.addEventListener("resync", refetch);
  source.onerror = function () { wasDisconnected = true; setLive("disconnected", "disconnected · reconnecting…"); };

  // ----- interaction -----
  list.addEventListener("scroll", function () { drawRows(); }, { passive: true });
  window.addEventListener("resize", function () { drawRows(); });
  window.addEventListener("hashchange", function () {
    var r = route();
    if (r.kind === "filter") { $("only-problems").checked = r.value === "problems"; rowsDirty = true; redraw(); return; }
    drawDetail(); drawHeatmap();
    if (!detail.hidden) detail.focus();
  });
  $("only-problems").addEventListener("change", function () { rowsDirty = true; redraw(); });
  $("sort").addEventListener("change", function () { rowsDirty = true; list.scrollTop = 0; redraw(); });
  var typing = 0;
  search.addEventListener("input", function () { clearTimeout(typing); typing = setTimeout(drawResults, 120); });
  $("search-form").addEventListener("submit", function (event) {
    event.preventDefault();
    var found = drawResults();
    if (found.length) location.hash = found[0].href;
  });
  heatmap.addEventListener("click", function (event) {
    var cell = event.target.closest(".rack-cell");
    if (cell) location.hash = hash("rack", cell.dataset.rack);
  });
  // The heatmap is one tab stop; arrow keys move inside it (roving tabindex).
  heatmap.addEventListener("keydown", function (event) {
    var cells = Array.prototype.filter.call(heatmap.querySelectorAll(".rack-cell"), function (c) { return c.offsetParent !== null; });
    var at = cells.indexOf(document.activeElement);
    if (at < 0) return;
    var perRow = Math.max(1, Math.round(heatmap.clientWidth / (cells[0].offsetWidth + 3)));
    var to = { ArrowRight: at + 1, ArrowLeft: at - 1, ArrowDown: at + perRow, ArrowUp: at - perRow, Home: 0, End: cells.length - 1 }[event.key];
    if (to == null) return;
    event.preventDefault();
    to = Math.max(0, Math.min(cells.length - 1, to));
    cells[at].tabIndex = -1; cells[to].tabIndex = 0; cells[to].focus();
  });
  // The Node list scrolls with the keyboard too.
  list.addEventListener("keydown", function (event) {
    var step = { ArrowDown: ROW, ArrowUp: -ROW, PageDown: list.clientHeight, PageUp: -list.clientHeight }[event.key];
    if (step == null || event.target !== list) return;
    event.preventDefault();
    list.scrollTop += step;
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "/" && document.activeElement !== search) { event.preventDefault(); search.focus(); }
    if (event.key === "Escape") { if (location.hash) { location.hash = ""; } search.value = ""; drawResults(); }
  });
  window.fleetView = { find: find, route: route };
  refetch();
})();
