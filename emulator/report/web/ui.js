// The fabric page: one script for the live view and for report.html.
// Data: DOC = {model, samples, events, flows, flow_series, title, summary} inlined in
// <script id="doc">; live pages also stream "doc" and "sample" server-sent events.
"use strict";
const NS = "http://www.w3.org/2000/svg";
let DOC = JSON.parse(document.getElementById("doc").textContent);
const EVENTS_URL = document.body.dataset.events || "";
let cursor = null;            // index of the shown sample; null: follow the latest
let selected = null, flowSel = null, playing = null;

function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function heat(u) { return "hsl(" + Math.round(120 * (1 - Math.min(u, 1))) + ",75%,42%)"; }
function fmt(v, d) { return (v === undefined || v === null) ? "-" : Number(v).toFixed(d); }
function samples() { return DOC.samples || []; }
function current() {
  const s = samples();
  if (!s.length) return null;
  return s[cursor === null ? s.length - 1 : Math.min(cursor, s.length - 1)];
}

// ---- the fabric ------------------------------------------------------------
let POS = {};
function drawFabric() {
  const svg = document.getElementById("fabric"), m = DOC.model;
  svg.innerHTML = "";
  if (!m) { el("text", {x: 20, y: 30, class: "empty"}, svg).textContent = "waiting for the fabric"; return; }
  const ys = [...new Set(m.nodes.map(n => n.y))].sort((a, b) => b - a);
  const W = 1000, H = 70 + 100 * (ys.length - 1) + 40;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  POS = {};
  for (const n of m.nodes) POS[n.name] = [30 + n.x * (W - 60), 40 + 100 * ys.indexOf(n.y)];
  const links = el("g", {id: "links"}, svg);
  const seen = {};
  for (const lk of m.links) {
    const [x1, y1] = POS[lk.a], [x2, y2] = POS[lk.b];
    const key = [lk.a, lk.b].sort().join("|"); seen[key] = (seen[key] || 0) + 1;
    const len = Math.hypot(x2 - x1, y2 - y1) || 1, nx = -(y2 - y1) / len, ny = (x2 - x1) / len;
    const off = (seen[key] - 1) * 7;                 // parallel links side by side
    const g = el("g", {class: "link", "data-link": lk.name, "data-state": "up"}, links);
    g.appendChild(document.createElementNS(NS, "title")).textContent = lk.name;
    for (const [i, s] of [[0, 2], [1, -2]]) {
      el("line", {class: "dir", "data-dir": i ? "ba" : "ab", stroke: heat(0), "stroke-width": 1.5,
                  x1: x1 + nx * (off + s), y1: y1 + ny * (off + s),
                  x2: x2 + nx * (off + s), y2: y2 + ny * (off + s)}, g);
    }
    el("line", {class: "hit", x1: x1 + nx * off, y1: y1 + ny * off, x2: x2 + nx * off, y2: y2 + ny * off}, g);
    const cut = el("text", {class: "cut", x: (x1 + x2) / 2 + nx * off, y: (y1 + y2) / 2 + ny * off}, g);
    cut.textContent = "\u2715";
    for (const [end, port, x, y, ox, oy] of [["a", lk.a_port, x1, y1, x2, y2], ["b", lk.b_port, x2, y2, x1, y1]]) {
      const t = 16 / len;
      el("circle", {class: "paused", r: 4, "data-port": port, visibility: "hidden",
                    cx: x + (ox - x) * t + nx * off, cy: y + (oy - y) * t + ny * off}, g);
    }
    g.addEventListener("click", () => { selected = lk.name; flowSel = null; update(); });
  }
  const nodes = el("g", {id: "nodes"}, svg);
  for (const n of m.nodes) {
    const [x, y] = POS[n.name], w = Math.max(34, 7 * n.name.length + 8);
    const g = el("g", {class: "node kind-" + n.kind, "data-node": n.name, "data-kind": n.kind}, nodes);
    el("rect", {x: x - w / 2, y: y - 11, width: w, height: 22}, g);
    el("text", {x: x, y: y}, g).textContent = n.name;
  }
  svg.dataset.drawn = "1";
}

function paintFabric() {
  const s = current(), m = DOC.model;
  if (!m) return;
  const down = new Set(s ? s.down : []), paused = new Set(s ? s.paused : []);
  const path = flowSel ? flowLinks(flowSel) : new Set();
  for (const g of document.querySelectorAll("#fabric .link")) {
    const name = g.dataset.link, u = s && s.util[name] ? s.util[name] : [0, 0];
    const state = down.has(name) ? "down" : "up";
    if (g.dataset.state !== state) g.setAttribute("data-state", state);
    g.classList.toggle("selected", name === selected);
    g.classList.toggle("onpath", path.has(name));
    for (const line of g.querySelectorAll("line.dir")) {
      // in 2 % steps, and only what changed: every repaint costs the fabric's CPUs
      const v = Math.round(50 * Math.min(u[line.dataset.dir === "ab" ? 0 : 1] || 0, 1)) / 50;
      if (line.dataset.util === String(v)) continue;
      line.dataset.util = v;
      line.setAttribute("stroke", heat(v));
      line.setAttribute("stroke-width", (1.5 + 6 * v).toFixed(1));
    }
    for (const c of g.querySelectorAll("circle.paused")) {
      const vis = paused.has(c.dataset.port) ? "visible" : "hidden";
      if (c.getAttribute("visibility") !== vis) c.setAttribute("visibility", vis);
    }
  }
}

// ---- a drill's flows along their paths ------------------------------------
function flowLinks(name) {
  const f = (DOC.flows || []).find(x => x.name === name), out = new Set();
  if (!f || !f.path) return out;
  const hops = f.path.map(p => p.split(":")[0]);
  for (let i = 0; i + 1 < hops.length; i++) {
    const lk = DOC.model.links.find(l => (l.a === hops[i] && l.b === hops[i + 1]) ||
                                         (l.b === hops[i] && l.a === hops[i + 1]));
    if (lk) out.add(lk.name);
  }
  return out;
}
function drawFlows() {
  const ul = document.getElementById("flows");
  ul.innerHTML = "";
  for (const f of DOC.flows || []) {
    const li = document.createElement("li");
    const hops = (f.path || []).map(p => p.split(":")[0]);
    li.textContent = f.name + (hops.length ? " " + hops[0] + "\u2192" + hops[hops.length - 1] : "") +
      (f.crosses ? " (crosses the fault)" : "");
    li.dataset.flow = f.name;
    li.onclick = () => { flowSel = f.name; selected = null; update(); };
    ul.appendChild(li);
  }
  document.getElementById("flowbox").style.display = (DOC.flows || []).length ? "" : "none";
}

// ---- details of the clicked link ------------------------------------------
function drawDetails() {
  const box = document.getElementById("details"), s = current();
  for (const li of document.querySelectorAll("#flows li")) li.classList.toggle("sel", li.dataset.flow === flowSel);
  const set = html => { if (box.dataset.html !== html) { box.innerHTML = html; box.dataset.html = html; } };
  if (!selected || !DOC.model) { set("<p>Click a link to see its counters; a flow to see its path.</p>"); return; }
  const lk = DOC.model.links.find(l => l.name === selected);
  const u = (s && s.util[selected]) || [0, 0], q = (s && s.queue[selected]) || [0, 0];
  const d = (s && s.link_drops && s.link_drops[selected]) || [0, 0], rate = lk.rate_bps || 0;
  const state = s && s.down.includes(selected) ? "down" : "up";
  const rows = [["link", selected], ["state", state], ["rate", fmt(rate / 1e6, 0) + " Mbit/s"]];
  for (const [i, dir] of [[0, lk.a + " \u2192 " + lk.b], [1, lk.b + " \u2192 " + lk.a]]) {
    rows.push([dir, fmt(100 * u[i], 1) + " % (" + fmt(u[i] * rate / 1e6, 2) + " Mbit/s)"]);
    rows.push(["  queue", q[i] + " bytes; drops " + d[i]]);
  }
  set("<table class='kv' data-details='" + selected + "'>" +
    rows.map(r => "<tr><td>" + r[0] + "</td><td>" + r[1] + "</td></tr>").join("") + "</table>");
}

// ---- time series -----------------------------------------------------------
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
function seriesOf(kind) {
  const s = samples(), out = {};
  const add = (name, t, v) => (out[name] = out[name] || []).push([t, v]);
  if (kind === "throughput" && DOC.flow_series) {
    const fs = DOC.flow_series;
    for (const name in fs.lines) fs.lines[name].forEach((v, i) => add(name, fs.t[i], v));
  } else if (kind === "throughput") {
    for (const x of s) for (const h in x.rx_mbps) add(h, x.t, x.rx_mbps[h]);
  } else if (kind === "queues") {
    const m = DOC.model;
    for (const x of s) for (const lk of (m ? m.links : [])) {
      const q = x.queue[lk.name] || [0, 0];
      add(lk.a + ">" + lk.b, x.t, q[0] / 1024); add(lk.b + ">" + lk.a, x.t, q[1] / 1024);
    }
    const top = Object.entries(out).map(([k, v]) => [k, Math.max(...v.map(p => p[1]))])
      .sort((a, b) => b[1] - a[1]).slice(0, 6).map(e => e[0]);
    for (const k in out) if (!top.includes(k)) delete out[k];
  } else if (kind === "drops") {
    for (const x of s) for (const c in x.drops) add(c, x.t, x.drops[c]);
  }
  return out;
}
function timeRange() {
  let lo = Infinity, hi = -Infinity;
  for (const x of samples()) { lo = Math.min(lo, x.t); hi = Math.max(hi, x.t); }
  if (DOC.flow_series && DOC.flow_series.t.length) {
    lo = Math.min(lo, DOC.flow_series.t[0]); hi = Math.max(hi, DOC.flow_series.t[DOC.flow_series.t.length - 1]);
  }
  return lo < hi ? [lo, hi] : [0, 1];
}
function drawChart(id, kind, unit) {
  const svg = document.getElementById(id), W = 400, H = 190, L = 40, B = 22, T = 8;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.innerHTML = "";
  const ser = seriesOf(kind), names = Object.keys(ser).sort();
  svg.dataset.series = names.length;
  const [t0, t1] = timeRange();
  let ymax = 0;
  for (const n of names) for (const p of ser[n]) ymax = Math.max(ymax, p[1]);
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  const X = t => L + (t - t0) / (t1 - t0) * (W - L - 8), Y = v => H - B - v / ymax * (H - B - T);
  el("line", {class: "axis", x1: L, y1: H - B, x2: W - 8, y2: H - B}, svg);
  el("line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B}, svg);
  el("text", {x: 2, y: T + 8}, svg).textContent = fmt(ymax, ymax < 10 ? 1 : 0);
  el("text", {x: 2, y: H - B}, svg).textContent = "0";
  el("text", {x: L, y: H - 6}, svg).textContent = fmt(t0, 1) + " s";
  el("text", {x: W - 50, y: H - 6}, svg).textContent = fmt(t1, 1) + " s";
  el("text", {x: L + 4, y: T + 8}, svg).textContent = unit;
  if (!names.length) {
    el("text", {class: "empty", x: L + 20, y: H / 2}, svg).textContent =
      DOC.model ? "no series recorded (run with --ui to record one)" : "waiting for samples";
  }
  names.forEach((n, i) => {
    const pts = ser[n].map(p => X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join(" ");
    el("polyline", {points: pts, fill: "none", stroke: PALETTE[i % 10], "stroke-width": 1.2,
                    "data-series": n}, svg).appendChild(document.createElementNS(NS, "title")).textContent = n;
    if (i < 8) el("text", {class: "legend", x: W - 110, y: T + 10 + 11 * i, style: "fill:" + PALETTE[i % 10]}, svg).textContent = n;
  });
  for (const e of DOC.events || []) {
    if (e.t < t0 || e.t > t1) continue;
    const up = /up|restore|recover|restart/.test(e.kind);
    el("line", {class: up ? "ev-up" : "ev-down", "data-event": e.kind, x1: X(e.t), x2: X(e.t), y1: T, y2: H - B}, svg)
      .appendChild(document.createElementNS(NS, "title")).textContent = e.kind + " " + (e.target || "") + " at " + fmt(e.t, 3) + " s";
  }
  const s = current();
  if (s) el("line", {class: "cursor", x1: X(s.t), x2: X(s.t), y1: T, y2: H - B}, svg);
  svg.dataset.drawn = "1";
}

// ---- the scrubber, and everything in step ----------------------------------
let chartsAt = 0;
function update(cheap) {
  paintFabric();
  drawDetails();
  // live: the picture every sample, the scrubber and the charts once a second (a
  // browser on the emulator's machine shares its CPUs with the fabric: each repaint
  // of a range input or a chart costs milliseconds there)
  if (cheap && performance.now() - chartsAt < 1000) return;
  chartsAt = performance.now();
  const s = samples(), sc = document.getElementById("scrubber");
  sc.max = Math.max(s.length - 1, 0);
  sc.value = cursor === null ? sc.max : cursor;
  const c = current();
  document.getElementById("when").textContent = c ? "t = " + fmt(c.t, 2) + " s (" + (Number(sc.value) + 1) + "/" + s.length + ")" : "no samples";
  document.getElementById("follow").checked = cursor === null;
  drawChart("throughput", "throughput", DOC.flow_series ? "Mbit/s per flow" : "Mbit/s received per host");
  drawChart("queues", "queues", "KiB queued (top 6)");
  drawChart("drops", "drops", "drops since start");
}
function redraw() {
  document.getElementById("title").textContent = DOC.title || (DOC.model ? DOC.model.fabric + " (run " + DOC.model.run + ")" : "fabric");
  document.getElementById("summary").textContent = (DOC.summary || []).join("\n");
  drawFabric(); drawFlows(); update();
}
document.getElementById("scrubber").addEventListener("input", e => { cursor = Number(e.target.value); update(); });
document.getElementById("follow").addEventListener("change", e => { cursor = e.target.checked ? null : samples().length - 1; update(); });
document.getElementById("play").addEventListener("click", () => {
  if (playing) { clearInterval(playing); playing = null; return; }
  cursor = 0;
  playing = setInterval(() => {
    if (cursor >= samples().length - 1) { clearInterval(playing); playing = null; return; }
    cursor += 1; update();
  }, 250);
});
redraw();
if (EVENTS_URL && window.EventSource) {
  const status = document.getElementById("status");
  const es = new EventSource(EVENTS_URL);
  let pending = false;
  const later = () => { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; update(true); }); } };
  es.addEventListener("doc", e => { DOC = JSON.parse(e.data); redraw(); status.textContent = "live"; status.className = "live"; });
  es.addEventListener("sample", e => {
    const d = JSON.parse(e.data);
    if (d.sample) DOC.samples.push(d.sample);
    DOC.events.push(...d.events);
    later();
  });
  es.onerror = () => { status.textContent = "the run ended: scrub the timeline"; status.className = "ended"; es.close(); };
}
