// The transactions page: polls for what committed after the newest row shown and,
// under `morphz serve`, samples the context actor's counters into charts.
(function () {
  "use strict";
  var body = document.body;
  var api = (body.dataset.base || "") + "/api/c/" + encodeURIComponent(body.dataset.context);
  var state = JSON.parse(document.getElementById("tx-data").textContent);
  var newest = state.version;
  var agents = state.agents || {};
  var tbody = document.querySelector("#txs tbody");
  var agentList = document.getElementById("agents");
  var atTop = !new URLSearchParams(window.location.search).has("before");

  function cell(text) { var td = document.createElement("td"); td.textContent = text; return td; }
  function when(t) { return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : ""; }

  function drawAgents() {
    agentList.replaceChildren();
    Object.keys(agents).sort(function (a, b) { return agents[b] - agents[a]; }).forEach(function (a) {
      var li = document.createElement("li");
      var name = document.createElement("span"); name.className = "agent"; name.textContent = a;
      var n = document.createElement("b"); n.textContent = String(agents[a]);
      li.append(name, " ", n);
      agentList.append(li);
    });
  }

  function poll() {
    fetch(api + "/transactions?limit=200&after=" + newest).then(function (r) { return r.json(); })
      .then(function (d) {
        (d.transactions || []).forEach(function (t) {
          var tr = document.createElement("tr");
          tr.dataset.version = String(t.version);
          tr.className = "new";
          var code = document.createElement("code"); code.className = "clip";
          code.textContent = (t.changes || []).join(", ");
          var changes = document.createElement("td"); changes.append(code);
          tr.append(cell(t.version), cell(t.base_version), cell(t.kind), cell(t.agent), cell(when(t.time)),
            cell(t.rebased ? "rebased" : ""), cell(t.reason || ""), changes);
          tbody.prepend(tr);
          agents[t.agent] = (agents[t.agent] || 0) + 1;
          newest = Math.max(newest, t.version);
        });
        if ((d.transactions || []).length) drawAgents();
      })
      .catch(function () {})
      .finally(function () { setTimeout(poll, 1000); });
  }
  if (atTop) setTimeout(poll, 1000);

  if (!state.served) return;
  var keys = { commits: "commits", rejections: "rejections", rebases: "rebases" };
  var series = { commits: [], rejections: [], rebases: [], inbox: [], lag: [] };
  var last = null;
  function line(id, values) {
    var svg = document.getElementById("chart-" + id);
    if (!svg) return;
    var max = Math.max.apply(null, values.concat([1]));
    var pts = values.map(function (v, i) {
      return (i * 300 / Math.max(values.length - 1, 1)).toFixed(1) + "," + (76 - v * 70 / max).toFixed(1);
    }).join(" ");
    svg.replaceChildren();
    var ns = "http://www.w3.org/2000/svg";
    var pl = document.createElementNS(ns, "polyline");
    pl.setAttribute("points", pts); pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", "#2b6cb0"); pl.setAttribute("stroke-width", "2");
    var label = document.createElementNS(ns, "text");
    label.setAttribute("x", "296"); label.setAttribute("y", "12"); label.setAttribute("text-anchor", "end");
    label.setAttribute("font-size", "11");
    label.textContent = values.length ? String(Math.round(values[values.length - 1] * 10) / 10) : "";
    svg.append(pl, label);
  }
  function sample() {
    fetch(api + "/metrics").then(function (r) { return r.json(); }).then(function (d) {
      var m = d.metrics;
      if (!m) return;
      if (last) {
        var dt = Math.max(m.time - last.time, 0.001);
        Object.keys(keys).forEach(function (k) {
          series[k].push(Math.max(0, ((m[keys[k]] || 0) - (last[keys[k]] || 0)) / dt));
        });
        series.inbox.push(m.inbox_depth || 0);
        series.lag.push(m.index_lag || 0);
        Object.keys(series).forEach(function (k) { series[k] = series[k].slice(-60); line(k, series[k]); });
      }
      last = m;
      var totals = document.getElementById("totals");
      totals.textContent = "version " + m.version + " · commits " + (m.commits || 0) + " · rejections " +
        (m.rejections || 0) + " · rebases " + (m.rebases || 0) + " · duplicates " + (m.duplicates || 0);
    }).catch(function () {}).finally(function () { setTimeout(sample, 2000); });
  }
  sample();
})();
