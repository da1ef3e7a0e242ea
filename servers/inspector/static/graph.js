// The graph page: draws the neighbourhood, redraws it as of the slider's version,
// shows a clicked frame in the side panel. Every text goes in through textContent.
(function () {
  "use strict";
  var body = document.body;
  var base = body.dataset.base || "";
  var context = body.dataset.context;
  var api = base + "/api/c/" + encodeURIComponent(context);
  var pages = base + "/c/" + encodeURIComponent(context);
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var colours = { active: "#2f855a", retiring: "#d69e2e", retired: "#a0aec0", quarantined: "#c53030" };

  function elements(g) {
    var out = [];
    g.nodes.forEach(function (n) {
      out.push({ group: "nodes", data: {
        id: n.id, label: n.id, state: n.state, center: n.center ? 1 : 0,
        candidate: n.trust === "candidate" ? 1 : 0 } });
    });
    g.edges.forEach(function (e) {
      out.push({ group: "edges", data: { id: e.join("\u0000"), source: e[0], target: e[2], label: e[1] } });
    });
    return out;
  }

  // A few frames would be drawn huge when fitted: zoom in no further than 1.4.
  var LAYOUT = { name: "cose", animate: false, randomize: false, nodeRepulsion: 8000, padding: 40,
    stop: function () { if (cy && cy.zoom() > 1.4) { cy.zoom(1.4); cy.center(); } } };
  var cy = null;
  cy = cytoscape({
    container: document.getElementById("cy"),
    elements: elements(data),
    wheelSensitivity: 0.3,
    style: [
      { selector: "node", style: {
        "background-color": function (n) { return colours[n.data("state")] || "#4a5568"; },
        "label": "data(label)", "font-size": 10, "color": "#1a202c",
        "text-valign": "bottom", "text-margin-y": 3, "width": 18, "height": 18 } },
      { selector: "node[center = 1]", style: { "border-width": 3, "border-color": "#2b6cb0", "width": 24, "height": 24 } },
      { selector: "node[candidate = 1]", style: { "border-width": 3, "border-style": "dashed", "border-color": "#805ad5" } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#805ad5" } },
      { selector: "edge", style: {
        "width": 1.5, "line-color": "#a0aec0", "target-arrow-color": "#a0aec0",
        "target-arrow-shape": "triangle", "curve-style": "bezier",
        "label": "data(label)", "font-size": 8, "color": "#4a5568", "text-rotation": "autorotate" } }
    ],
    layout: LAYOUT
  });
  window.morphzGraph = cy;

  var slider = document.getElementById("version");
  var vout = document.getElementById("vout");
  var counts = document.getElementById("counts");
  var notes = document.getElementById("notes");
  var twin = document.getElementById("twin");

  function query(version) {
    var params = new URLSearchParams(window.location.search);
    if (version === null || Number(version) === data.version) params.delete("version");
    else params.set("version", String(version));
    return params.toString();
  }

  function redraw(g) {
    data = g;
    cy.elements().remove();
    cy.add(elements(g));
    cy.layout(LAYOUT).run();
    counts.textContent = g.nodes.length + " frames, " + g.edges.length + " relations";
    notes.textContent = (g.truncated ? "(bounded: more frames beyond)" : "") +
      (g.relations_exact ? "" : " (relations as they stand now)");
    body.dataset.asOf = String(g.as_of);
  }

  var pending = null;
  function load(version) {
    var q = query(version);
    twin.href = api + "/graph" + (q ? "?" + q : "");
    window.history.replaceState(null, "", window.location.pathname + (q ? "?" + q : ""));
    if (pending) pending.abort();
    pending = new AbortController();
    body.dataset.loading = "1";
    fetch(api + "/graph" + (q ? "?" + q : ""), { signal: pending.signal })
      .then(function (r) { return r.json().then(function (j) { return [r.ok, j]; }); })
      .then(function (res) {
        delete body.dataset.loading;
        if (!res[0]) { notes.textContent = res[1].error ? res[1].error.message : "failed"; return; }
        redraw(res[1]);
      })
      .catch(function () { delete body.dataset.loading; });
  }

  slider.addEventListener("input", function () { vout.textContent = slider.value; });
  slider.addEventListener("change", function () { load(slider.value); });
  body.dataset.asOf = String(data.as_of);

  var panel = document.getElementById("panel");
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function link(href, text) { var a = el("a", text); a.href = href; return a; }

  function show(id) {
    var asOf = Number(slider.value);
    var q = "?id=" + encodeURIComponent(id) + (asOf !== data.version ? "&version=" + asOf : "");
    fetch(api + "/frame" + q).then(function (r) { return r.json(); }).then(function (d) {
      panel.replaceChildren();
      if (d.error) { panel.append(el("p", d.error.message, "bad")); return; }
      var f = d.frame;
      panel.append(el("h2", f.id));
      var meta = el("p", f.lifecycle + " · trust " + f.envelope.trust + " · revision " + f.revision);
      panel.append(meta);
      var links = el("p");
      links.append(link(pages + "/frame" + q, "open"), " · ",
        link(pages + "/history?id=" + encodeURIComponent(f.id), "history"), " · ",
        link(pages + "/graph?center=" + encodeURIComponent(f.id), "centre here"));
      panel.append(links);
      panel.append(el("h3", "body"), el("pre", f.body, "body"));
      panel.append(el("h3", "sources"));
      var ul = el("ul", undefined, "sources");
      d.sources.forEach(function (s) {
        var li = el("li");
        if (s.frame) li.append(link(pages + "/frame?id=" + encodeURIComponent(s.ref), s.ref));
        else {
          li.append(link(pages + "/event?ref=" + encodeURIComponent(s.ref), s.ref), " " + (s.kind || ""));
          li.append(el("pre", s.text + (s.more ? "…" : ""), "obs"));
        }
        ul.append(li);
      });
      if (!d.sources.length) ul.append(el("li", "none"));
      panel.append(ul);
      if (f.relations_out) {
        panel.append(el("h3", "relations"));
        var rl = el("ul");
        f.relations_out.forEach(function (r) { rl.append(el("li", "→ " + r[1] + " " + r[2])); });
        f.relations_in.forEach(function (r) { rl.append(el("li", "← " + r[0] + " " + r[1])); });
        if (!f.relations_out.length && !f.relations_in.length) rl.append(el("li", "none"));
        panel.append(rl);
      }
    });
  }
  cy.on("tap", "node", function (evt) { show(evt.target.id()); });

  var find = document.getElementById("findframe");
  var hits = document.getElementById("findhits");
  find.addEventListener("submit", function (evt) {
    evt.preventDefault();
    var q = document.getElementById("findq").value;
    if (!q) return;
    fetch(api + "/search?limit=10&q=" + encodeURIComponent(q)).then(function (r) { return r.json(); })
      .then(function (d) {
        hits.replaceChildren();
        (d.hits || []).filter(function (h) { return h.type === "frame"; }).forEach(function (h) {
          var li = el("li");
          li.append(link(pages + "/graph?center=" + encodeURIComponent(h.id), h.id));
          hits.append(li);
        });
        if (!hits.children.length) hits.append(el("li", "no frame matches"));
      });
  });
})();
