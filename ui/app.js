// ui/app.js: the page. Reads the form and the fragment into one state,
// builds the request, sends it, and draws the reply: a map per head, the
// mean, one map enlarged, the timings. docs/ui.md describes it; core.js
// holds the pure parts, heatmap.js the drawing, service.js the Service tab.
import * as core from "./core.js";
import { cellSize, drawMap, drawLegend, drawAxis } from "./heatmap.js";
import * as service from "./service.js";

const $ = (id) => document.getElementById(id);
const MAX_L = 32768;    // the longest context the page draws
const DENSE_L = 4096;   // past it, the server pools the weights (issue 34)
// The most dense weights the page asks for (heads shown x Lq x Lk): L = 2048
// with 8 heads, a reply of 180 MB in base64, under max_response_bytes'
// default. More, even within DENSE_L (L = 4096 with 4 heads), and the
// server pools them too, where it would refuse the dense reply.
const DENSE_WEIGHTS = 2048 * 2048 * 8;
const TOP_K = 4;        // past DENSE_L: each query's heaviest keys, for hovering
const FINE = 512;       // cells a side of the enlarged map, at most
const THUMB = 128;      // cells a side of a thumbnail, at most

let state = { ...core.DEFAULTS };
let layers = null;      // GET /v1/layers' list, once it came
let layersNote = "";    // why there is none
let apiKey = "";        // the page's memory only: never in the fragment
let view = null;        // what is drawn: see render()
let runs = 0;           // the number of the latest run; older replies are dropped
let finished = 0;       // runs ended, drawn or failed (tests wait on it)
let cursor = null;      // the enlarged map's keyboard cell [r, c]
const violations = [];  // Content-Security-Policy violations seen

// ---- never a blank page ------------------------------------------------

function pageError(msg) {
  const p = $("page-error");
  p.textContent = `The page hit a problem: ${msg}`;
  p.hidden = false;
}
window.addEventListener("error", (e) => pageError(e.message || String(e.error)));
window.addEventListener("unhandledrejection", (e) =>
  pageError((e.reason && e.reason.message) || String(e.reason)));
document.addEventListener("securitypolicyviolation", (e) => {
  violations.push(`${e.violatedDirective} ${e.blockedURI}`);
  pageError(`the Content-Security-Policy blocked ${e.violatedDirective} (${e.blockedURI || "inline"})`);
});

// An event handler that reports what it throws, sync or async.
function on(el, ev, fn) {
  el.addEventListener(ev, (e) => {
    try {
      const r = fn(e);
      if (r && typeof r.catch === "function") r.catch((x) => pageError(x.message || String(x)));
    } catch (x) {
      pageError(x.message || String(x));
    }
  });
}

// ---- the form and the state ---------------------------------------------

const FIELDS = ["E", "H", "Hkv", "tokens", "L", "lq", "seed", "causal", "wl", "wr", "kl", "scale"];

function writeControls() {
  for (const k of FIELDS) $(k).value = state[k] === null ? "" : String(state[k]);
  const mode = state.mode || "inline";
  $(`mode-${mode}`).checked = true;
  $("perhead").checked = state.weights !== "mean";
  $("colour").value = state.colour;
  if (state.mode === "json" && state.req) $("json").value = formatJSON(state.req);
  if (layers && state.layer) $("layer").value = state.layer;
  showMode();
  tokensInfo();
}

function readControls() {
  for (const k of FIELDS) {
    const v = $(k).value.trim();
    state[k] = ["E", "H", "Hkv", "L", "seed"].includes(k) ? (v === "" ? core.DEFAULTS[k] : Number(v)) : v;
  }
  state.mode = document.querySelector("input[name=mode]:checked").value;
  state.weights = $("perhead").checked ? "per_head" : "mean";
  state.colour = $("colour").value;
  if (layers && layers.length && $("layer").value) state.layer = $("layer").value;
  apiKey = $("apikey").value.trim();
}

function showMode() {
  const mode = document.querySelector("input[name=mode]:checked").value;
  $("f-layer").hidden = mode !== "layer";
  $("f-inline").hidden = mode !== "inline";
  $("f-tokens").hidden = mode === "json";
  $("f-mask").hidden = mode === "json";
  $("f-json").hidden = mode !== "json";
  $("to-json").hidden = mode === "json";
}

function tokensInfo() {
  const text = $("tokens").value.trim();
  const n = text ? text.split(/\s+/).length : lengthOf($("L").value);
  $("tokens-info").textContent = text ? `${n} tokens: L = ${n}` : `L = ${n}, the tokens labelled by their positions`;
}

// The positions a length gives (as core.tokenLabels counts them), without
// making a label for each: a length of 1e9 typed would otherwise build
// 1e9 strings before any check.
function lengthOf(L) {
  return Math.max(0, Math.floor(Number(L) || 0));
}

// One line a member, each value compact: the worked example stays short.
function formatJSON(req) {
  return "{\n" + Object.entries(req).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(",\n") + "\n}";
}

function layerByName(name) {
  return (layers || []).find((l) => l.name === name) || null;
}

function layerCausal(l) {
  if (!l || l.causal === undefined || l.causal === false || l.causal === "none") return false;
  return l.causal === true ? "bottom_right" : l.causal;
}

// The layer's default mask.window ({"left": n}, from its sliding window),
// or null when it has none.
function layerWindow(l) {
  return l && l.window && typeof l.window === "object" ? l.window : null;
}

// Sets the mask controls to layer l's defaults, its causal and its window
// (blank sides where it has none): left as they were, the request would
// override both.
function layerDefaults(l) {
  const w = layerWindow(l);
  $("causal").value = layerCausal(l) || "none";
  $("wl").value = w && w.left !== undefined ? String(w.left) : "";
  $("wr").value = w && w.right !== undefined ? String(w.right) : "";
}

// ---- the request -------------------------------------------------------

class InputError extends Error {
  constructor(control, message) { super(message); this.control = control; }
}

function integer(control, v, what, min) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new InputError(control, `${what} must be an integer of at least ${min}`);
  return n;
}

// The request the state describes: {req, mode, qLabels, kLabels}. Throws
// InputError naming the control at fault, for what the page itself must
// know (a length to generate); the rest the server checks.
function buildRequest() {
  const mode = state.mode || "inline";
  const ret = { weights: state.weights, metrics: true, encoding: "base64" };
  if (mode === "json") {
    let req;
    try {
      req = JSON.parse($("json").value);
    } catch (e) {
      throw new InputError("json", `not JSON: ${e.message}`);
    }
    if (!req || typeof req !== "object" || Array.isArray(req)) throw new InputError("json", "the request must be a JSON object");
    state.req = req;
    const r = req.return && typeof req.return === "object" ? req.return : {};
    if (r.weights === "per_head" || r.weights === "mean") state.weights = r.weights;
    $("perhead").checked = state.weights !== "mean";
    const sent = { ...req, return: { ...r, weights: state.weights, metrics: true, encoding: "base64" } };
    return { req: sent, mode, labels: state.tokens ? core.tokenLabels(state.tokens, 0) : null };
  }

  if (!state.tokens && lengthOf(state.L) > MAX_L)
    throw new InputError("tokens", `the page draws at most ${MAX_L} positions; this is ${lengthOf(state.L)}`);
  const labels = core.tokenLabels(state.tokens, state.L);
  if (labels.length === 0) throw new InputError("tokens", "type some tokens, or give a length of at least 1");
  if (labels.length > MAX_L) throw new InputError("tokens", `the page draws at most ${MAX_L} positions; this is ${labels.length}`);
  const L = labels.length;
  const Lq = state.lq === "" ? L : integer("lq", state.lq, "the number of queries", 1);
  if (Lq > L) throw new InputError("lq", `there are ${L} positions; the queries can be at most all of them`);
  const qLabels = labels.slice(L - Lq);
  const seed = integer("seed", state.seed, "the seed", 0);

  const mask = { causal: state.causal === "none" ? false : state.causal };
  if (state.wl !== "" || state.wr !== "") {
    mask.window = {};
    if (state.wl !== "") mask.window.left = Number(state.wl);
    if (state.wr !== "") mask.window.right = Number(state.wr);
  }
  if (state.kl !== "") mask.key_lengths = [Number(state.kl)];

  const req = {};
  let heads = 1; // the request's heads, for the size of its dense weights
  if (mode === "layer") {
    const l = layerByName(state.layer);
    if (!l) throw new InputError("layer", layers ? `no layer is named '${state.layer}'` : `the layers are not known: ${layersNote}`);
    const E = l.embed_dim;
    heads = l.num_heads;
    req.layer = l.name;
    // blank window controls mean no window, as causal none means no causal:
    // without mask.window the layer's own would hold ({} turns it off)
    if (!mask.window && layerWindow(l)) mask.window = {};
    const x = core.hiddenStates(seed, "hidden", labels, E);
    req.query = core.base64Tensor(x.subarray((L - Lq) * E), [Lq, E]);
    if (Lq < L) req.key = core.base64Tensor(x, [L, E]);
  } else {
    const E = integer("E", state.E, "E", 1), H = integer("H", state.H, "H", 1);
    const Hkv = integer("Hkv", state.Hkv, "Hkv", 1);
    // key and value carry Hkv heads of Dh = E / H; when H does not divide
    // E they are sent E wide, and the server says what is wrong.
    const kvW = E % H === 0 ? Hkv * (E / H) : E;
    req.query = core.base64Tensor(core.hiddenStates(seed, "query", qLabels, E), [Lq, E]);
    req.key = core.base64Tensor(core.hiddenStates(seed, "key", labels, kvW), [L, kvW]);
    req.value = core.base64Tensor(core.hiddenStates(seed, "value", labels, kvW), [L, kvW]);
    req.num_heads = H;
    heads = H;
    if (Hkv !== H) req.num_kv_heads = Hkv;
  }
  req.mask = mask;
  if (state.scale !== "") req.scale = Number(state.scale);
  // Past DENSE_L, or past DENSE_WEIGHTS, the dense weights would not fit a
  // reply: the server pools them to the enlarged map's cells over the
  // zoomed block, with each query's top keys and its entropy and sink mass
  // (docs/api.md).
  let long = null;
  if (L > DENSE_L || (state.weights === "mean" ? 1 : heads) * Lq * L > DENSE_WEIGHTS) {
    long = core.parseZoom(state.zoom, Lq, L);
    const all = long.q1 - long.q0 === Lq && long.k1 - long.k0 === L;
    state.zoom = all ? "" : core.formatZoom(long);
    ret.weights = {
      heads: state.weights === "mean" ? "mean" : "per_head",
      pool: [Math.ceil((long.q1 - long.q0) / FINE), Math.ceil((long.k1 - long.k0) / FINE)],
      reduce: "max",
      top_k: TOP_K,
      stats: ["entropy", "sink"],
      query_range: [long.q0, long.q1],
      key_range: [long.k0, long.k1],
    };
  } else {
    state.zoom = "";
  }
  req.return = ret;
  return { req, mode, labels, qLabels, long };
}

// The control a server error's field belongs to, in this mode.
function controlFor(field, code, mode) {
  if (mode === "json") return "json";
  if (!field) return null;
  const map = [
    ["mask.window.left", "wl"], ["mask.window.right", "wr"], ["mask.window", "wl"],
    ["mask.causal", "causal"], ["mask.key_lengths", "kl"], ["mask", "causal"],
    ["num_heads", mode === "layer" ? "layer" : "H"],
    ["num_kv_heads", mode === "layer" ? "layer" : "Hkv"],
    ["layer", "layer"], ["scale", "scale"], ["return", "perhead"],
  ];
  for (const [prefix, control] of map)
    if (field === prefix || field.startsWith(prefix + ".") || field.startsWith(prefix + "[")) return control;
  if (/^(query|key|value|positions)\b/.test(field)) {
    if (code === "limit_exceeded") return "tokens";
    if (mode === "inline") return field === "query" ? "E" : "Hkv";
    return mode === "layer" && code !== "limit_exceeded" ? "layer" : "tokens";
  }
  return null;
}

function clearErrors() {
  for (const p of document.querySelectorAll(".err")) {
    p.hidden = true;
    p.textContent = "";
  }
  for (const c of document.querySelectorAll("[aria-invalid]")) c.removeAttribute("aria-invalid");
}

// Shows `text` beside `control` ("run": beside the Run button), or beside
// Run when that control is not on show.
function showError(control, text) {
  let id = control;
  const slot = $(`err-${id}`);
  if (!slot || slot.parentElement.closest("[hidden]")) id = "run";
  const p = $(`err-${id}`);
  p.textContent = text;
  p.hidden = false;
  const input = id === "tokens" ? $("tokens") : $(id);
  if (input && id !== "run") input.setAttribute("aria-invalid", "true");
  if (id !== "run") {
    const r = $("err-run");
    r.textContent = `See the message at ${labelOf(id)}.`;
    r.hidden = false;
  }
  return id;
}

function labelOf(id) {
  const l = document.querySelector(`label[for="${id}"]`);
  return l ? `“${l.textContent.trim()}”` : id;
}

// ---- running -----------------------------------------------------------

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

function setStatus(text) {
  $("status").textContent = text;
}

// Shortens long strings (base64 tensors) for the request's preview.
function preview(req) {
  return JSON.stringify(req, (k, v) =>
    typeof v === "string" && v.length > 72 ? `${v.slice(0, 60)}…(${v.length} characters)` : v, 1);
}

function sizeInfo(req, perHead) {
  const H = perHead ? Number(req.num_heads || (layerByName(req.layer) || {}).num_heads || 1) : 1;
  const Lq = req.query && req.query.shape ? req.query.shape[0] : 0;
  const Lk = req.key && req.key.shape ? req.key.shape[0] : Lq;
  const mb = (H * Lq * Lk * 4 * 4) / 3 / 1e6;
  return mb >= 10 ? `The reply carries about ${mb.toFixed(0)} MB of weights.` : "";
}

async function run() {
  try {
    await runOnce();
  } finally {
    finished++;
  }
}

async function runOnce() {
  const seq = ++runs;
  clearErrors();
  readControls();
  // the list failed (the server was down, or wanted the key): ask again
  if (state.mode === "layer" && !layers) {
    await loadLayers();
    if (seq !== runs) return;
    readControls();
  }
  let built;
  try {
    built = buildRequest();
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    showError(e.control, e.message);
    setStatus("Not sent: see the message in the form.");
    return;
  }
  updateFragment();
  // what is drawn is of one request: the last one's goes
  view = null;
  $("maps").hidden = true;
  $("timings").hidden = true;
  $("req-preview").textContent = preview(built.req);
  $("size-info").textContent = built.mode === "json" || built.long ? "" : sizeInfo(built.req, state.weights === "per_head");
  setStatus("Running…");
  const body = JSON.stringify(built.req);
  const t0 = performance.now();
  let res, text, t1;
  try {
    res = await fetch("/v1/attention", { method: "POST", headers: headers(true), body, cache: "no-store" });
    t1 = performance.now();
    text = await res.text();
  } catch (e) {
    if (seq !== runs) return;
    showError("run", `Network error: ${e.message}. Is attnd still running?`);
    setStatus("Failed: the server could not be reached.");
    return;
  }
  const t2 = performance.now();
  if (seq !== runs) return;
  let reply;
  try {
    reply = JSON.parse(text);
  } catch (e) {
    showError("run", `HTTP ${res.status}, and the reply is not JSON: ${text.slice(0, 200)}`);
    setStatus(`Failed: HTTP ${res.status}.`);
    return;
  }
  const t3 = performance.now();
  text = null;
  if (!res.ok) {
    const e = (reply && reply.error) || {};
    const control = res.status === 401 ? "apikey" : controlFor(e.field, e.code, built.mode) || "run";
    const where = showError(control, `${e.field ? e.field + ": " : ""}${e.message || "no message"} (${res.status} ${e.code || ""})`.trim());
    setStatus(`The server answered ${res.status} ${e.code || ""}${where !== "run" ? `; see ${labelOf(where)}` : ""}.`);
    // the layer is gone or changed (a reload, a restart): the next Run
    // should see the server's list, not the one from when the page opened
    if (control === "layer") await loadLayers();
    return;
  }
  try {
    render(reply, built, { fetch_ms: t1 - t0, body_ms: t2 - t1, parse_ms: t3 - t2 });
  } catch (e) {
    // the banner still names it (a fault of the page's, or a reply unlike
    // the docs'); the status must not go on saying "Running…"
    setStatus(`Failed: HTTP ${res.status}, but the reply could not be drawn.`);
    throw e;
  }
}

// ---- drawing the reply ---------------------------------------------------

// Decodes the weights, pools every map once at the enlarged map's size
// (FINE cells a side), and draws the thumbnails, the enlarged map, the
// legend, the timings and the output. `view` keeps what hovering needs.
function render(reply, built, client) {
  const r0 = performance.now();
  const req = built.req;
  if (reply.weights_pooled) return renderLong(reply, built, client, r0);
  const perHead = req.return.weights === "per_head";
  if (!reply.weights) throw new Error("the reply has no weights");
  // per-head base64 weights are read row by row as they are pooled, never
  // decoded whole (core.poolHeads); the rest is decoded first
  const w = reply.weights;
  const stream = perHead && typeof w.base64 === "string" && w.dtype === "float32";
  const W = stream ? { shape: w.shape, base64: w.base64 } : core.readTensor(w);
  const sh = W.shape;
  let B = 1, H = 1, Lq, Lk;
  if (perHead) [B, H, Lq, Lk] = sh.length === 4 ? sh : [1, ...sh];
  else [B, Lq, Lk] = sh.length === 3 ? sh : [1, ...sh];
  const b = Math.min(Math.max(0, state.batch | 0), B - 1);
  const layer = req.layer ? layerByName(req.layer) : null;
  const mask = core.maskOf(req, Lq, Lk, layerCausal(layer), layerWindow(layer));
  const { lo, hi } = mask.rows(b);
  const allowed = mask.allowed(b);
  const rb = Math.ceil(Lq / FINE), cb = Math.ceil(Lk / FINE);
  const n = Lq * Lk;

  const maps = [];
  if (perHead) {
    const allowedOf = allowed && ((h) => (i, j) => allowed(h, i, j));
    const p = core.poolHeads(W, b * H * Lq, H, Lq, Lk, rb, cb, lo, hi, allowedOf);
    p.heads.forEach((fine, h) => maps.push({ key: String(h), name: `head ${h}`, fine }));
    maps.push({ key: "mean", name: "mean over heads", fine: p.mean });
  } else {
    const heads = Number(req.num_heads || (layer && layer.num_heads) || 1);
    maps.push({ key: "mean", name: "mean over heads", fine: core.poolMap(W.data, b * n, Lq, Lk, rb, cb, lo, hi, anyHead(allowed, heads)) });
  }
  const r1 = performance.now();
  let max = 0;
  for (const m of maps) max = Math.max(max, core.poolMax(m.fine));

  // labels: the tokens the page generated, else q0... and k0...
  let kLabels = built.labels && built.labels.length === Lk ? built.labels : null;
  if (!kLabels) kLabels = Array.from({ length: Lk }, (_, j) => `k${j}`);
  let qLabels = built.qLabels || (built.labels && built.labels.length === Lk && Lq <= Lk ? built.labels.slice(Lk - Lq) : null);
  if (!qLabels || qLabels.length !== Lq) qLabels = Array.from({ length: Lq }, (_, i) => `q${i}`);

  view = { maps, Lq, Lk, B, b, H, perHead, max, qLabels, kLabels, rb, cb, reply, mask, timings: null, long: null };
  show(client, r0, r1);
  const pooled = rb > 1 || cb > 1;
  setStatus(`${perHead ? `${H} heads` : "the mean over heads"}, ${Lq} ${Lq === 1 ? "query" : "queries"} × ${Lk} keys` +
    (B > 1 ? `, batch row ${b} of ${B}` : "") +
    (pooled ? `. Each cell of the maps covers ${rb} × ${cb} (query × key) positions and shows their largest weight.` : "."));
  drawTimings(reply.metrics, view.timings);
  drawOutput(reply);
  updateFragment();
}

// The reply of a request past DENSE_L or DENSE_WEIGHTS: maps pooled by the server
// (weights_pooled, the largest weight of each block), each query's top keys
// (weights_top_k) for the tooltip, its entropy and sink mass
// (weights_stats) for the statistics panel. Blocks the mask leaves no key
// are drawn masked, as in the dense maps.
function renderLong(reply, built, client, r0) {
  const req = built.req, z = built.long, w = req.return.weights;
  const perHead = w.heads !== "mean";
  const P = core.readTensor(reply.weights_pooled);
  const [nq, nk] = P.shape.slice(-2);
  const H = perHead ? P.shape[P.shape.length - 3] : 1;
  const Lq = built.qLabels.length, Lk = built.labels.length;
  const layer = req.layer ? layerByName(req.layer) : null;
  const mask = core.maskOf(req, Lq, Lk, layerCausal(layer), layerWindow(layer));
  const { lo, hi } = mask.rows(0);
  const [rb, cb] = w.pool;
  const maps = [];
  for (let h = 0; h < H; h++) {
    const fine = core.maskPooled(P.data.subarray(h * nq * nk, (h + 1) * nq * nk), nq, nk, rb, cb, z, lo, hi);
    maps.push(perHead ? { key: String(h), name: `head ${h}`, fine } : { key: "mean", name: "mean over heads", fine });
  }
  const top = {
    index: core.readTensor(reply.weights_top_k.index).data,
    value: core.readTensor(reply.weights_top_k.value).data,
  };
  const stats = {
    entropy: core.readTensor(reply.weights_stats.entropy).data,
    sink: core.readTensor(reply.weights_stats.sink).data,
  };
  const r1 = performance.now();
  let max = 0;
  for (const m of maps) max = Math.max(max, core.poolMax(m.fine));
  view = {
    maps, Lq: z.q1 - z.q0, Lk: z.k1 - z.k0, B: 1, b: 0, H, perHead, max,
    qLabels: built.qLabels.slice(z.q0, z.q1), kLabels: built.labels.slice(z.k0, z.k1),
    rb, cb, reply, mask, timings: null, long: { z, Lq, Lk, top, stats },
  };
  show(client, r0, r1);
  setStatus(`${perHead ? `${H} heads` : "the mean over heads"}, queries ${z.q0}–${z.q1 - 1} × keys ${z.k0}–${z.k1 - 1} of ${Lq} × ${Lk}, ` +
    `pooled by the server: each cell covers ${rb} × ${cb} (query × key) positions and shows their largest weight. ` +
    "Click a cell to zoom in 4× around it.");
  drawTimings(reply.metrics, view.timings);
  drawOutput(reply);
  updateFragment();
}

// The statistics panel: the enlarged head's entropy (nats, scaled to its
// largest) and sink mass (0 to 1) per query of the zoomed range, as lines.
function drawStats() {
  const v = view, box = $("stats");
  if (!v || !v.long) {
    box.hidden = true;
    $("stats-desc").textContent = `Entropy and sink mass per query are drawn where the server pools the weights: past ${DENSE_L} positions, ` +
      "or where the dense weights would not fit a reply.";
    return;
  }
  box.hidden = false;
  const h = v.perHead ? Number(current().key) : 0, n = v.Lq;
  const ent = v.long.stats.entropy.subarray(h * n, (h + 1) * n);
  const sink = v.long.stats.sink.subarray(h * n, (h + 1) * n);
  const canvas = $("stats-canvas"), W = canvas.width, Hc = canvas.height;
  const g = canvas.getContext("2d");
  g.fillStyle = "#ffffff";
  g.fillRect(0, 0, W, Hc);
  let emax = 0;
  for (const e of ent) emax = Math.max(emax, e);
  const line = (ys, top, colour) => {
    g.strokeStyle = colour;
    g.lineWidth = 1.5;
    g.beginPath();
    for (let x = 0; x < W; x++) {
      const i = Math.min(n - 1, Math.floor((x * n) / W));
      const y = Hc - 2 - (top > 0 ? ys[i] / top : 0) * (Hc - 4);
      if (x) g.lineTo(x + 0.5, y);
      else g.moveTo(x + 0.5, y);
    }
    g.stroke();
  };
  line(ent, emax, "#31688e");
  line(sink, 1, "#e8590c");
  let smean = 0;
  for (const x of sink) smean += x;
  $("stats-desc").textContent = `${current().name}, queries ${v.long.z.q0}–${v.long.z.q1 - 1}: entropy (blue) up to ` +
    `${emax.toFixed(3)} nats; sink mass on the first 4 keys (orange, 0 to 1), ${(smean / n).toFixed(3)} on average.`;
}

// Draws `view`: the thumbnails, the enlarged map, the legend; and times
// it (r0: the render's start, r1: the maps ready).
function show(client, r0, r1) {
  if (!view.maps.some((m) => m.key === state.head)) state.head = view.maps[0].key;
  drawGrid();
  drawBig();
  drawLegendNow();
  const r2 = performance.now();
  view.timings = { ...client, pool_ms: r1 - r0, draw_ms: r2 - r1, render_ms: r2 - r0 };
  $("maps").hidden = false;
  $("zoom-out").hidden = !(view.long && state.zoom);
}

// mask.allow over the mean: a cell is masked when every head masks it.
function anyHead(allowed, H) {
  if (!allowed) return null;
  return (i, j) => {
    for (let h = 0; h < H; h++) if (allowed(h, i, j)) return true;
    return false;
  };
}

// A text alternative of one map: its shape, its largest weight and where,
// and for small maps every weight.
function describe(m) {
  const p = m.fine, v = view;
  let best = -1, at = 0, masked = 0;
  for (let k = 0; k < p.data.length; k++) {
    const x = p.data[k];
    if (x !== x) masked++;
    else if (x > best) { best = x; at = k; }
  }
  const r = Math.floor(at / p.nc), c = at % p.nc;
  const z = v.long ? v.long.z : { q0: 0, k0: 0 }; // absolute positions, as the axes and the tooltip
  const parts = [`${m.name}: ${v.Lq} × ${v.Lk}`];
  if (best < 0) parts.push("every cell is masked");
  else if (p.rb === 1 && p.cb === 1) parts.push(`largest weight ${core.formatWeight(best)}, query ${z.q0 + r} (${v.qLabels[r]}) to key ${z.k0 + c} (${v.kLabels[c]})`);
  else parts.push(`largest weight ${core.formatWeight(best)}, in queries ${z.q0 + r * p.rb}–${z.q0 + Math.min(v.Lq, (r + 1) * p.rb) - 1} and keys ${z.k0 + c * p.cb}–${z.k0 + Math.min(v.Lk, (c + 1) * p.cb) - 1}`);
  if (masked) parts.push(`${Math.round((100 * masked) / p.data.length)}% of the cells masked`);
  let text = parts.join("; ") + ".";
  if (p.rb === 1 && p.cb === 1 && p.data.length <= 32) {
    const rows = [];
    for (let i = 0; i < p.nr; i++) {
      const cells = [];
      for (let j = 0; j < p.nc; j++) cells.push(`${v.kLabels[j]} ${core.formatWeight(p.data[i * p.nc + j])}`);
      rows.push(`${v.qLabels[i]}: ${cells.join(", ")}`);
    }
    text += ` Weights: ${rows.join("; ")}.`;
  }
  return text;
}

function drawGrid() {
  const grid = $("grid");
  grid.textContent = "";
  view.maps.forEach((m, k) => {
    const li = document.createElement("li");
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "thumb";
    btn.dataset.key = m.key;
    const canvas = document.createElement("canvas");
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", m.name);
    canvas.setAttribute("aria-describedby", `desc-${k}`);
    // smaller thumbnails for many heads, so that the enlarged map shows too
    const room = view.maps.length > 5 ? 72 : THUMB;
    const thumb = core.repool(m.fine, Math.ceil(m.fine.nr / room), Math.ceil(m.fine.nc / room));
    const { cw, ch } = cellSize(thumb.nr, thumb.nc, room, 48, 8);
    drawMap(canvas, thumb, cw, ch, state.colour, view.max);
    m.canvas = canvas;
    btn.appendChild(canvas);
    const cap = document.createElement("span");
    cap.className = "caption";
    cap.setAttribute("aria-hidden", "true");
    cap.textContent = m.name;
    btn.appendChild(cap);
    const desc = document.createElement("p");
    desc.className = "sr-only";
    desc.id = `desc-${k}`;
    desc.textContent = describe(m);
    li.append(btn, desc);
    grid.appendChild(li);
    on(btn, "pointerenter", () => { if (!state.lock) select(m.key); });
    on(btn, "focus", () => { if (!state.lock) select(m.key); });
    on(btn, "click", () => {
      if (state.lock && state.head === m.key) state.lock = false;
      else { state.lock = true; state.head = m.key; }
      select(state.head);
      updateFragment();
    });
  });
  markSelected();
}

function markSelected() {
  for (const b of document.querySelectorAll("#grid .thumb")) {
    const sel = b.dataset.key === state.head;
    b.classList.toggle("selected", sel);
    b.setAttribute("aria-pressed", String(sel && state.lock));
  }
}

function select(key) {
  if (!view) return;
  const changed = key !== state.head;
  state.head = key;
  markSelected();
  if (changed || !$("big-canvas").width) drawBig();
  else bigTitle();
}

function current() {
  return view.maps.find((m) => m.key === state.head) || view.maps[0];
}

function bigTitle() {
  const m = current();
  $("big-title").textContent = `${m.name} ${state.lock ? "(locked: click it again to unlock)" : "(click a map to lock it here)"}`;
}

function drawBig() {
  const m = current(), p = m.fine;
  const canvas = $("big-canvas");
  const { cw, ch } = cellSize(p.nr, p.nc, FINE, 96, 16);
  drawMap(canvas, p, cw, ch, state.colour, view.max);
  canvas.setAttribute("aria-label", `${m.name}, enlarged`);
  $("big-desc").textContent = describe(m) + (p.rb > 1 || p.cb > 1
    ? ` Downsampled: each cell covers ${p.rb} queries × ${p.cb} keys and shows the largest weight among them.` : "");
  bigTitle();
  const z = view.long ? view.long.z : { q0: 0, k0: 0 }; // absolute positions
  drawAxis($("key-axis"), p.nc, cw, p.cb, view.kLabels, cw >= 40 ? 40 : 14, false, z.k0);
  $("key-axis").classList.toggle("vertical", cw < 40);
  drawAxis($("query-axis"), p.nr, ch, p.rb, view.qLabels, 14, true, z.q0);
  $("tooltip").hidden = true;
  cursor = null;
  drawStats();
}

function drawLegendNow() {
  drawLegend($("legend-canvas"), $("legend-ticks"), state.colour, view.max);
}

// The text of cell [r, c] of the enlarged map.
function cellText(r, c) {
  const m = current(), p = m.fine, v = view;
  const w = p.data[r * p.nc + c];
  const val = w !== w ? "masked" : core.formatWeight(w);
  if (v.long) { // absolute positions, and the block's first query's top keys
    const z = v.long.z, qa = z.q0 + r * p.rb, ka = z.k0 + c * p.cb;
    const qb = Math.min(z.q1, qa + p.rb) - 1, kb = Math.min(z.k1, ka + p.cb) - 1;
    const h = v.perHead ? Number(m.key) : 0, at = (h * v.Lq + (qa - z.q0)) * TOP_K;
    const tops = [];
    for (let t = 0; t < TOP_K; t++) {
      const j = v.long.top.index[at + t];
      if (j >= 0) tops.push(`${j} “${v.kLabels[j - z.k0]}” ${core.formatWeight(v.long.top.value[at + t])}`);
    }
    return `${m.name}: queries ${qa}–${qb} → keys ${ka}–${kb}: ${w !== w ? "all masked" : `largest ${val}`}` +
      `; top keys of query ${qa}: ${tops.length ? tops.join(", ") : "none"}`;
  }
  if (p.rb === 1 && p.cb === 1)
    return `${m.name}: query ${r} “${v.qLabels[r]}” → key ${c} “${v.kLabels[c]}”: ${val}`;
  const q1 = Math.min(v.Lq, (r + 1) * p.rb) - 1, k1 = Math.min(v.Lk, (c + 1) * p.cb) - 1;
  return `${m.name}: queries ${r * p.rb}–${q1} → keys ${c * p.cb}–${k1}: ${w !== w ? "all masked" : `largest ${val}`}`;
}

function showTip(r, c, x, y) {
  const tip = $("tooltip");
  tip.textContent = cellText(r, c);
  tip.hidden = false;
  const wrap = $("big-canvas").parentElement.getBoundingClientRect();
  const left = Math.min(x + 14, Math.max(0, wrap.width - 220));
  tip.style.left = `${left}px`;
  tip.style.top = `${y + 14}px`;
}

function cellAt(e) {
  const canvas = $("big-canvas"), rect = canvas.getBoundingClientRect(), p = current().fine;
  const x = e.clientX - rect.left, y = e.clientY - rect.top;
  const c = Math.floor((x / rect.width) * p.nc), r = Math.floor((y / rect.height) * p.nr);
  if (r < 0 || c < 0 || r >= p.nr || c >= p.nc) return null;
  return { r, c, x, y };
}

function drawTimings(metrics, client) {
  const box = $("timings"), bar = $("timing-bar"), legend = $("timing-legend");
  box.hidden = false;
  bar.textContent = "";
  legend.textContent = "";
  if (!metrics) {
    $("timing-text").textContent = "The reply carries no metrics.";
    return;
  }
  const st = metrics.stages_ms || {};
  const stages = [
    ["decode", st.decode], ["queue", metrics.queue_ms], ["projection", st.projection],
    ["attention", st.attention], ["output projection", st.output_projection], ["encode", st.encode],
  ].filter(([, v]) => typeof v === "number");
  const sum = stages.reduce((a, [, v]) => a + v, 0) || 1;
  for (const [name, v] of stages) {
    const seg = document.createElement("span");
    seg.className = `seg seg-${name.replace(" ", "-")}`;
    seg.style.width = `${(100 * v) / sum}%`;
    seg.title = `${name}: ${v.toFixed(3)} ms`;
    bar.appendChild(seg);
    const li = document.createElement("li");
    const sw = document.createElement("span");
    sw.className = `swatch seg-${name.replace(" ", "-")}`;
    sw.setAttribute("aria-hidden", "true");
    li.append(sw, `${name} ${v.toFixed(3)} ms`);
    legend.appendChild(li);
  }
  const f = (x) => `${x.toFixed(0)} ms`;
  $("timing-text").textContent =
    `On the server: ${stages.map(([n, v]) => `${n} ${v.toFixed(3)} ms`).join(", ")}; total ${Number(metrics.total_ms).toFixed(3)} ms` +
    ` (arrival to reply), worker ${metrics.worker}, ${metrics.threads} thread${metrics.threads === 1 ? "" : "s"}. ` +
    `In the page: reply headers after ${f(client.fetch_ms)}, body ${f(client.body_ms)}, JSON ${f(client.parse_ms)}, ` +
    `decoding and pooling ${f(client.pool_ms)}, drawing ${f(client.draw_ms)}.`;
}

function drawOutput(reply) {
  const fmt = (x) => String(Number(x.toPrecision(6)));
  const show = (name, t) => {
    const x = core.readTensor(t), n = x.data.length;
    const vals = Array.from(x.data.subarray(0, 8), fmt).join(", ");
    return `${name} [${x.shape.join(", ")}]: ${vals}${n > 8 ? `, … (${n} values)` : ""}`;
  };
  const parts = [];
  if (reply.output) parts.push(show("output", reply.output));
  if (reply.head_outputs) parts.push(show("head outputs", reply.head_outputs));
  $("output-info").textContent = parts.join(" · ");
}

// ---- the fragment --------------------------------------------------------

function updateFragment() {
  const frag = core.formatFragment(state);
  $("share").href = `#${frag}`;
  try {
    history.replaceState(null, "", `#${frag}`);
  } catch (e) {
    $("size-info").textContent = `This view is too large for a link (${e.message}).`;
  }
}

function loadFragment() {
  try {
    state = core.parseFragment(location.hash);
  } catch (e) {
    state = { ...core.DEFAULTS };
    pageError(`the link's fragment could not be read: ${e.message}`);
  }
  if (state.mode === "json" && state.req) {
    const r = state.req.return || {};
    if (r.weights === "per_head" || r.weights === "mean") state.weights = r.weights;
  }
  writeControls();
  showTab(state.tab, false);
}

// ---- tabs --------------------------------------------------------------------

function showTab(name, focus) {
  state.tab = name === "service" ? "service" : "attention";
  for (const t of ["attention", "service"]) {
    const tab = $(`tab-${t}`), sel = t === state.tab;
    tab.setAttribute("aria-selected", String(sel));
    tab.tabIndex = sel ? 0 : -1;
    $(`panel-${t}`).hidden = !sel;
    if (sel && focus) tab.focus();
  }
  if (state.tab === "service") service.start(() => apiKey);
  else service.stop();
}

// ---- layers ----------------------------------------------------------------

async function loadLayers() {
  const sel = $("layer");
  try {
    const res = await fetch("/v1/layers", { headers: headers(false), cache: "no-store" });
    if (res.status === 401) {
      layers = null;
      layersNote = "GET /v1/layers needs the API key";
    } else if (!res.ok) {
      layers = null;
      layersNote = `GET /v1/layers answered ${res.status}`;
    } else {
      layers = (await res.json()).layers || [];
      layersNote = layers.length ? "" : "this server holds no layer (start it with --layers)";
    }
  } catch (e) {
    layers = null;
    layersNote = `GET /v1/layers failed: ${e.message}`;
  }
  sel.textContent = "";
  for (const l of layers || []) {
    const o = document.createElement("option");
    o.value = l.name;
    o.textContent = l.name;
    sel.appendChild(o);
  }
  if (layers && layers.length) {
    if (!state.layer) state.layer = layers[0].name;
    sel.value = state.layer; // a name no layer has selects none: Run says so
  }
  layerInfo();
}

function layerInfo() {
  const l = layerByName($("layer").value), w = layerWindow(l);
  const sides = w ? ["left", "right"].filter((k) => w[k] !== undefined) : [];
  const keys = w && w.right === undefined && w.left !== undefined ? ` (${w.left + 1} keys a query)` : "";
  $("layer-info").textContent = l
    ? `${l.convention}: E ${l.embed_dim}, H ${l.num_heads}, Hkv ${l.num_kv_heads}, Dh ${l.head_dim}, ` +
      `${l.positions ? l.positions.type : "no positions"}, causal ${layerCausal(l) || "none"} by default, ` +
      (w ? `window ${sides.map((k) => `${k} ${w[k]}`).join(", ")} by default${keys}; blank window controls turn it off` : "no window")
    : layersNote;
}

// ---- wiring --------------------------------------------------------------------

function init() {
  on($("req-form"), "submit", (e) => { e.preventDefault(); return run(); });
  // choosing a layer, as choosing it in the list, sets the causal and
  // window controls to the layer's defaults: left as they were, the
  // request overrode them
  for (const r of document.querySelectorAll("input[name=mode]")) on(r, "change", () => {
    showMode();
    const l = r.value === "layer" && r.checked ? layerByName($("layer").value) : null;
    if (l) layerDefaults(l);
  });
  on($("tokens"), "input", tokensInfo);
  on($("L"), "input", tokensInfo);
  on($("reseed"), "click", () => { $("seed").value = String((Math.random() * 1e6) | 0); });
  on($("layer"), "change", () => {
    const l = layerByName($("layer").value);
    if (l) layerDefaults(l);
    layerInfo();
  });
  on($("apikey"), "change", () => { apiKey = $("apikey").value.trim(); return loadLayers(); });
  on($("perhead"), "change", () => {
    if (document.querySelector("input[name=mode]:checked").value !== "json") return;
    try {
      const req = JSON.parse($("json").value);
      req.return = { ...(req.return || {}), weights: $("perhead").checked ? "per_head" : "mean" };
      $("json").value = formatJSON(req);
    } catch { /* the JSON's own error shows on Run */ }
  });
  on($("to-json"), "click", () => {
    clearErrors();
    readControls();
    try {
      const built = buildRequest();
      delete built.req.return.metrics;
      delete built.req.return.encoding;
      $("json").value = formatJSON(built.req);
      $("mode-json").checked = true;
      showMode();
    } catch (e) {
      if (!(e instanceof InputError)) throw e;
      showError(e.control, e.message);
    }
  });
  on($("colour"), "change", () => {
    state.colour = $("colour").value;
    if (view) { drawGrid(); drawBig(); drawLegendNow(); }
    updateFragment();
  });
  for (const t of ["attention", "service"]) on($(`tab-${t}`), "click", () => { showTab(t, false); updateFragment(); });
  on($("tabs"), "keydown", (e) => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    showTab(state.tab === "attention" ? "service" : "attention", true);
    updateFragment();
  });

  const big = $("big-canvas");
  on(big, "pointermove", (e) => {
    if (!view) return;
    const at = cellAt(e);
    if (!at) { $("tooltip").hidden = true; return; }
    showTip(at.r, at.c, at.x, at.y);
  });
  on(big, "pointerleave", () => { $("tooltip").hidden = true; });
  // on maps the server pools, a click zooms 4x into the block around the
  // cell (the server pools it afresh); the fragment keeps the zoom
  on(big, "click", (e) => {
    if (!view || !view.long) return;
    const at = cellAt(e), p = current().fine, z = view.long.z;
    if (!at) return;
    const next = core.zoomAround(z, z.q0 + at.r * p.rb + (p.rb >> 1), z.k0 + at.c * p.cb + (p.cb >> 1));
    if (!next) return;
    state.zoom = core.formatZoom(next);
    updateFragment();
    run().catch((x) => pageError(x.message));
  });
  on($("zoom-out"), "click", () => {
    state.zoom = "";
    updateFragment();
    run().catch((x) => pageError(x.message));
  });
  on(big, "keydown", (e) => {
    if (!view) return;
    const p = current().fine;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (e.key === "Escape") { $("tooltip").hidden = true; return; }
    if (!moves[e.key]) return;
    e.preventDefault();
    const [dr, dc] = moves[e.key];
    cursor = cursor ? [Math.min(p.nr - 1, Math.max(0, cursor[0] + dr)), Math.min(p.nc - 1, Math.max(0, cursor[1] + dc))] : [0, 0];
    const rect = big.getBoundingClientRect();
    showTip(cursor[0], cursor[1], ((cursor[1] + 0.5) * rect.width) / p.nc, ((cursor[0] + 0.5) * rect.height) / p.nr);
    $("readout").textContent = cellText(cursor[0], cursor[1]);
  });

  window.addEventListener("hashchange", () => {
    const before = state;
    loadFragment();
    if (state.mode && core.formatFragment(state) !== core.formatFragment(before)) run().catch((x) => pageError(x.message));
  });

  // for tests and the curious: the state, what is drawn, and the scale
  window.attnd = {
    core, violations,
    state: () => state,
    view: () => view,
    colourOf: (w) => core.colourOf(w, state.colour, view ? view.max : 1),
    run,
    finished: () => finished,
    service,
  };
}

async function main() {
  init();
  loadFragment();
  await loadLayers();
  if (layers && state.layer) $("layer").value = state.layer;
  if (state.mode) await run();
}

main().catch((e) => pageError(e.message || String(e)));
