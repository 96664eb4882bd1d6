// ui/service.js: the Service tab. While it is open, GET /metrics and
// GET /readyz once a second; each sample's deltas against the one before
// give requests per second by status and p50 / p99 latency by context
// length; the last WINDOW seconds are drawn as small SVG line charts.
import { parseMetrics, sumBy, histogramQuantile } from "./core.js";

const WINDOW = 60;  // seconds drawn
const PERIOD = 1000;
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

let timer = null;
let running = false;
let generation = 0; // a tick of an older start, still in flight, stops
let keyOf = () => "";
let prev = null;    // the last raw sample
let points = [];    // {t, rate: {status: r}, queue, busy, p50: {ctx: ms}, p99: {ctx: ms}}
let last = null;    // the newest point, for tests
let samples = 0;

export function start(getKey) {
  keyOf = getKey;
  if (running) return;
  running = true;
  prev = null;
  gap();
  tick(++generation);
}

// A point of no values: the lines break there rather than join the
// samples on either side of a time nothing was sampled (the tab closed,
// the server unreachable).
function gap() {
  if (points.length && points[points.length - 1].gap) return;
  points.push({ t: performance.now(), gap: true, rate: {}, queue: null, busy: null, p50: {}, p99: {} });
}

export function stop() {
  running = false;
  clearTimeout(timer);
  timer = null;
}

export function latest() {
  return last;
}

// Samples taken since the tab opened (tests wait on it).
export function count() {
  return samples;
}

// One raw sample of the text: request counts by status (v1 and v2 only:
// the probes, /metrics and the page's files are left out), the gauges,
// and attnd_request_seconds' cumulative buckets by ctx.
function sample(text, t) {
  const s = parseMetrics(text);
  const api = (l) => l.protocol === "v1" || l.protocol === "v2";
  const g = (name) => {
    const v = sumBy(s, name, null, null)[""];
    return v === undefined ? null : v;
  };
  const hist = {};
  for (const x of s) {
    if (x.name !== "attnd_request_seconds_bucket" || !api(x.labels)) continue;
    const h = (hist[x.labels.ctx] = hist[x.labels.ctx] || {});
    const le = x.labels.le === "+Inf" ? Infinity : Number(x.labels.le);
    h[le] = (h[le] || 0) + x.value;
  }
  return {
    t,
    requests: sumBy(s, "attnd_requests_total", "status", api),
    queue: g("attnd_queue_depth"), busy: g("attnd_busy_workers"),
    workers: g("attnd_workers"), draining: g("attnd_draining"),
    hist,
  };
}

// The point between samples a and b: rates and quantiles of what happened
// in between (a counter that went down was reset: no rate).
function delta(a, b) {
  const dt = (b.t - a.t) / 1000;
  const rate = {};
  for (const [st, n] of Object.entries(b.requests)) {
    const d = n - (a.requests[st] || 0);
    rate[st] = d >= 0 && dt > 0 ? d / dt : null;
  }
  const p50 = {}, p99 = {};
  for (const [ctx, h] of Object.entries(b.hist)) {
    const before = a.hist[ctx] || {};
    const buckets = Object.keys(h).map(Number).sort((x, y) => x - y)
      .map((le) => [le, h[le] - (before[le] || 0)]);
    if (buckets.some(([, c]) => c < 0)) continue;
    const q50 = histogramQuantile(0.5, buckets), q99 = histogramQuantile(0.99, buckets);
    p50[ctx] = q50 === null ? null : q50 * 1000;
    p99[ctx] = q99 === null ? null : q99 * 1000;
  }
  return { t: b.t, rate, queue: b.queue, busy: b.busy, workers: b.workers, p50, p99 };
}

async function tick(gen) {
  const t0 = performance.now();
  const live = () => running && gen === generation;
  try {
    const key = keyOf();
    const h = key ? { Authorization: `Bearer ${key}` } : {};
    const [m, r] = await Promise.allSettled([
      fetch("/metrics", { headers: h, cache: "no-store" }),
      fetch("/readyz", { headers: h, cache: "no-store" }),
    ]);
    if (!live()) return;
    const status = $("svc-status");
    if (m.status === "rejected") {
      status.textContent = `Cannot reach the server: ${m.reason && m.reason.message}. Trying again every second.`;
      prev = null;
      gap();
    } else if (m.value.status === 401) {
      status.textContent = "GET /metrics needs the API key: enter it on the Attention tab.";
    } else if (!m.value.ok) {
      status.textContent = `GET /metrics answered ${m.value.status}.`;
    } else {
      const s = sample(await m.value.text(), performance.now());
      if (!live()) return;
      samples++;
      if (prev) {
        last = delta(prev, s);
        points.push(last);
        const cut = s.t - WINDOW * 1000;
        points = points.filter((p) => p.t >= cut);
        draw(s.t);
        status.textContent = `Updated every second; ${s.workers === null ? "" : `${s.workers} workers, `}` +
          `last sample at ${new Date().toLocaleTimeString()}.`;
      } else {
        status.textContent = "First sample taken; rates start with the next.";
      }
      prev = s;
      drain(r, s);
    }
  } catch (e) {
    $("svc-status").textContent = `The service panel hit a problem: ${e.message}`;
  } finally {
    if (live()) timer = setTimeout(() => tick(gen), Math.max(0, PERIOD - (performance.now() - t0)));
  }
}

function drain(r, s) {
  const note = $("svc-draining");
  const ready503 = r.status === "fulfilled" && r.value.status === 503;
  if (ready503 || s.draining === 1) {
    note.textContent = `The server is draining${ready503 ? " (/readyz answers 503)" : ""}${s.draining === 1 ? " (attnd_draining is 1)" : ""}: ` +
      "it answers the work it accepted, refuses new requests with 503, and then exits.";
    note.hidden = false;
  } else {
    note.hidden = true;
  }
}

// ---- charts ---------------------------------------------------------------------

const CTX_ORDER = ["128", "512", "2048", "8192", "32768", "+Inf"];
const ctxName = (c) => (c === "+Inf" ? "> 32768" : `≤ ${c}`);

function draw(now) {
  // statuses: 200 always, and any other seen with requests in the window
  const statuses = new Set(["200"]);
  for (const p of points) for (const [st, r] of Object.entries(p.rate)) if (r) statuses.add(st);
  const rateSeries = [...statuses].sort().map((st) => ({ name: st, values: points.map((p) => [p.t, p.rate[st] ?? null]) }));
  chart($("chart-rate"), rateSeries, now, "cap-rate");
  text($("txt-rate"), rateSeries, (v) => `${v.toFixed(1)}/s`);

  const qSeries = [
    { name: "queue depth", values: points.map((p) => [p.t, p.queue]) },
    { name: "busy workers", values: points.map((p) => [p.t, p.busy]) },
  ];
  chart($("chart-queue"), qSeries, now, "cap-queue");
  text($("txt-queue"), qSeries, (v) => String(v));

  for (const q of ["p50", "p99"]) {
    const seen = CTX_ORDER.filter((c) => points.some((p) => p[q][c] != null));
    const series = seen.map((c) => ({ name: ctxName(c), values: points.map((p) => [p.t, p[q][c] ?? null]) }));
    chart($(`chart-${q}`), series, now, `cap-${q}`);
    text($(`txt-${q}`), series, (v) => `${v < 10 ? v.toFixed(2) : v.toFixed(0)} ms`);
    if (!series.length) $(`txt-${q}`).textContent = "No computed request in the last minute.";
  }
}

// The chart's text alternative: each series' newest value.
function text(el, series, fmt) {
  el.textContent = series.map((s) => {
    const v = s.values.length ? s.values[s.values.length - 1][1] : null;
    return `${s.name}: ${v === null || v === undefined ? "–" : fmt(v)}`;
  }).join(" · ");
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * e >= v) return m * e;
  return 10 * e;
}

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

// A line chart of series [{name, values: [[t, v or null]]}] over the last
// WINDOW seconds, redrawn whole; a null breaks the line.
function chart(box, series, now, labelledby) {
  const W = 480, H = 150, L = 40, R = 8, T = 10, B = 20;
  let top = 0;
  for (const s of series) for (const [, v] of s.values) if (v > top) top = v;
  top = niceMax(top);
  box.textContent = "";
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": labelledby }, box);
  const x = (t) => L + ((t - (now - WINDOW * 1000)) / (WINDOW * 1000)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  el("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }, svg);
  el("line", { x1: L, y1: y(top), x2: W - R, y2: y(top), class: "grid" }, svg);
  const label = (tx, ax, ay, anchor) => {
    const t = el("text", { x: ax, y: ay, "text-anchor": anchor, class: "tick" }, svg);
    t.textContent = tx;
  };
  label(String(top), L - 4, y(top) + 4, "end");
  label("0", L - 4, y(0) + 4, "end");
  label(`−${WINDOW} s`, L, H - 4, "start");
  label("now", W - R, H - 4, "end");
  series.forEach((s, k) => {
    let run = [];
    const flush = () => {
      if (run.length === 1) el("circle", { cx: run[0][0], cy: run[0][1], r: 2, class: `s${k % 6} dot` }, svg);
      else if (run.length > 1) el("polyline", { points: run.map((p) => p.join(",")).join(" "), class: `s${k % 6} line` }, svg);
      run = [];
    };
    for (const [t, v] of s.values) {
      if (v === null || v === undefined) flush();
      else run.push([x(t).toFixed(1), y(v).toFixed(1)]);
    }
    flush();
  });
  const legend = document.createElement("ul");
  legend.className = "chart-legend";
  legend.setAttribute("aria-hidden", "true");
  series.forEach((s, k) => {
    const li = document.createElement("li");
    const sw = document.createElement("span");
    sw.className = `swatch s${k % 6}`;
    li.append(sw, s.name);
    legend.appendChild(li);
  });
  box.appendChild(legend);
}
