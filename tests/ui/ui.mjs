// tests/ui/ui.mjs: the page attnd serves at /, in a real browser (Debian's
// chromium, driven by puppeteer-core), against the real build/attnd on
// free loopback ports. Run by tests/ui/check.sh (make ui-test, make test):
//
//   node ui.mjs --attnd build/attnd --layer build/demo/demo.safetensors \
//     --readme README.md --out build/ui
//
// Each check prints "ok" or "FAIL" and its time; the run ends with
// "N passed, N failed" and exits 1 on any failure. Screenshots go to --out.
// Every request goes to 127.0.0.1, and the load test is bounded in count
// and time.
import fs from "node:fs";
import path from "node:path";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import puppeteer from "puppeteer-core";

const require = createRequire(import.meta.url);
const opt = {
  attnd: "build/attnd", layer: "build/demo/demo.safetensors", readme: "README.md",
  out: "build/ui", chromium: process.env.ATTND_CHROMIUM || "/usr/bin/chromium",
};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
fs.mkdirSync(opt.out, { recursive: true });

// ---- servers ---------------------------------------------------------------

const servers = [];
// however the run ends, no server outlives it
process.on("exit", () => { for (const s of servers) if (s.proc.exitCode === null) s.proc.kill("SIGKILL"); });

// Starts attnd on a free port with `extra` flags, holding `layers` (a
// --layers list); resolves when it listens.
function startServer(extra = [], layers = opt.layer) {
  const args = ["--port", "0", "--host", "127.0.0.1", "--access-log", "off", "--layers", layers, ...extra];
  const proc = spawn(opt.attnd, args, { stdio: ["ignore", "ignore", "pipe"] });
  const srv = { proc, log: "", port: 0 };
  servers.push(srv);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`attnd did not listen in 10 s:\n${srv.log}`)), 10000);
    proc.stderr.on("data", (d) => {
      srv.log += d;
      const m = /"event":"listening"[^\n]*"port":(\d+)/.exec(srv.log);
      if (m && !srv.port) {
        srv.port = Number(m[1]);
        srv.url = `http://127.0.0.1:${srv.port}`;
        clearTimeout(timer);
        resolve(srv);
      }
    });
    proc.on("exit", (code) => { clearTimeout(timer); if (!srv.port) reject(new Error(`attnd exited ${code}:\n${srv.log}`)); });
  });
}

async function stopServer(srv) {
  if (srv.proc.exitCode !== null) return;
  const gone = new Promise((r) => srv.proc.on("exit", r));
  srv.proc.kill("SIGTERM");
  const t = setTimeout(() => srv.proc.kill("SIGKILL"), 5000);
  await gone;
  clearTimeout(t);
}

// ---- a layer with a sliding window -----------------------------------------

// Writes float32 tensors {name: [shape, Float32Array]} as a safetensors
// file: an 8-byte little-endian length, that many bytes of JSON header
// (each tensor's dtype, shape and [begin, end) byte offsets into the data
// that follows; padded with spaces to 8 bytes), then the data.
function writeSafetensors(file, tensors) {
  const header = {};
  let size = 0;
  for (const [name, [shape, data]] of Object.entries(tensors)) {
    header[name] = { dtype: "F32", shape, data_offsets: [size, size + data.byteLength] };
    size += data.byteLength;
  }
  let json = JSON.stringify(header);
  while (json.length % 8) json += " ";
  const buf = Buffer.alloc(8 + json.length + size);
  buf.writeBigUInt64LE(BigInt(json.length), 0);
  buf.write(json, 8, "utf8");
  let at = 8 + json.length;
  for (const [, [, data]] of Object.entries(tensors)) {
    Buffer.from(data.buffer, data.byteOffset, data.byteLength).copy(buf, at);
    at += data.byteLength;
  }
  fs.writeFileSync(file, buf);
}

// A Mistral-style model directory under `dir` with one attention layer,
// model.layers.0.self_attn (E 32, H 4, Hkv 2, Dh 8, seeded weights), whose
// config.json sets "sliding_window": 4: each query sees 4 keys, its own
// the last, so the layer's default mask.window is {"left": 3}
// (docs/layers.md). Returns the layer's name.
const SWA = { E: 32, H: 4, Hkv: 2, Dh: 8, W: 4, name: "model.layers.0.self_attn" };
function writeWindowedLayer(dir) {
  fs.mkdirSync(dir, { recursive: true });
  let x = 12345;
  const rand = (n, s) => Float32Array.from({ length: n }, () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return ((x / 2 ** 32) * 2 - 1) * s;
  });
  const { E, H, Hkv, Dh } = SWA, s = 1 / Math.sqrt(E), p = `${SWA.name}.`;
  writeSafetensors(path.join(dir, "model.safetensors"), {
    [`${p}q_proj.weight`]: [[H * Dh, E], rand(H * Dh * E, s)],
    [`${p}k_proj.weight`]: [[Hkv * Dh, E], rand(Hkv * Dh * E, s)],
    [`${p}v_proj.weight`]: [[Hkv * Dh, E], rand(Hkv * Dh * E, s)],
    [`${p}o_proj.weight`]: [[E, H * Dh], rand(E * H * Dh, s)],
  });
  fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify({
    model_type: "mistral", hidden_size: E, num_attention_heads: H, num_key_value_heads: Hkv, sliding_window: SWA.W,
  }));
  return SWA.name;
}

// ---- checks ------------------------------------------------------------------

let passed = 0, failed = 0;
const report = []; // lines for the summary

// ATTND_UI_ONLY=<regular expression>: only the checks whose names match
const only = process.env.ATTND_UI_ONLY ? new RegExp(process.env.ATTND_UI_ONLY) : null;

async function check(name, fn) {
  if (only && !only.test(name)) return;
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)\n     ${(e.stack || String(e)).split("\n").join("\n     ")}`);
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

const close = (a, b, tol) => a.every((x, i) => Math.abs(x - b[i]) <= tol);

// ---- the browser -------------------------------------------------------------

let browser;
const profile = fs.mkdtempSync(path.join(path.resolve(opt.out), "profile-"));

async function launch() {
  browser = await puppeteer.launch({
    executablePath: opt.chromium,
    headless: true,
    pipe: true,
    userDataDir: profile,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-dev-shm-usage", "--window-size=1280,900"],
    defaultViewport: { width: 1280, height: 900 },
    protocolTimeout: 120000,
  });
}

// A new page at `url`; its uncaught errors are collected in page.errors.
async function open(url, setup) {
  const page = await browser.newPage();
  page.errors = [];
  page.on("pageerror", (e) => page.errors.push(e.message));
  if (setup) await setup(page);
  const res = await page.goto(url, { waitUntil: "load" });
  assert(res.status() === 200, `GET ${url}: ${res.status()}`);
  await page.waitForFunction(() => window.attnd !== undefined, { timeout: 10000 });
  return page;
}

// Waits until the page has finished n runs (drawn or failed).
async function runs(page, n, timeout = 30000) {
  await page.waitForFunction((k) => window.attnd.finished() >= k, { timeout, polling: 50 }, n);
}

// Neither an uncaught error nor a blocked resource, nor the page's banner.
async function clean(page) {
  const v = await page.evaluate(() => ({
    violations: window.attnd.violations.slice(),
    banner: document.getElementById("page-error").hidden ? "" : document.getElementById("page-error").textContent,
  }));
  assert(page.errors.length === 0, `uncaught errors: ${page.errors.join("; ")}`);
  assert(v.violations.length === 0, `Content-Security-Policy violations: ${v.violations.join("; ")}`);
  assert(!v.banner, `the page's error banner: ${v.banner}`);
}

// The [r, g, b] at canvas pixel (x, y) of the canvas matching `sel`.
function pixel(page, sel, x, y) {
  return page.evaluate((s, px, py) => {
    const c = document.querySelector(s);
    const d = c.getContext("2d").getImageData(px, py, 1, 1).data;
    return [d[0], d[1], d[2]];
  }, sel, x, y);
}

// The [r, g, b] at the centre of cell (r, c) of a canvas of nr x nc cells.
async function cellColour(page, sel, r, c, nr, nc) {
  const { w, h } = await page.$eval(sel, (e) => ({ w: e.width, h: e.height }));
  return pixel(page, sel, Math.floor(((c + 0.5) * w) / nc), Math.floor(((r + 0.5) * h) / nr));
}

// Moves the mouse to the centre of cell (r, c) of the enlarged map; returns
// the tooltip's text.
async function hoverCell(page, r, c, nr, nc) {
  const box = await (await page.$("#big-canvas")).boundingBox();
  await page.mouse.move(box.x + ((c + 0.5) * box.width) / nc, box.y + ((r + 0.5) * box.height) / nr);
  await page.waitForFunction(() => !document.getElementById("tooltip").hidden, { timeout: 5000 });
  return page.$eval("#tooltip", (e) => e.textContent);
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);
const shown = (page, sel) => page.$eval(sel, (e) => !e.hidden && !e.closest("[hidden]"));

// The README's first link: the worked example in the page.
function readmeLink() {
  const md = fs.readFileSync(opt.readme, "utf8");
  const m = /\]\((http[^)\s]+)\)/.exec(md);
  assert(m, "README.md has no link");
  return m[1];
}

// ---- the checks -------------------------------------------------------------

const MASKED = [208, 208, 208];

async function main() {
  writeWindowedLayer(path.join(opt.out, "swa-layer"));
  const srv = await startServer();
  await launch();
  const ver = await browser.version();
  console.log(`ui: ${ver}, attnd on ${srv.url}`);
  let example; // the worked example's page, for axe

  await check("GET / and /ui/ serve the page with its headers", async () => {
    const r = await fetch(`${srv.url}/`);
    assert(r.status === 200, `/: ${r.status}`);
    assert(r.headers.get("content-type").startsWith("text/html"), r.headers.get("content-type"));
    assert(/script-src 'self'/.test(r.headers.get("content-security-policy") || ""), "no CSP");
    assert(r.headers.get("x-content-type-options") === "nosniff", "no nosniff");
    const html = await r.text();
    assert(!/<script>|<script [^>]*>[^<]|style=/.test(html), "inline script or style in index.html");
    for (const f of ["app.js", "core.js", "heatmap.js", "service.js", "style.css", "icon.svg"]) {
      const a = await fetch(`${srv.url}/ui/${f}`);
      assert(a.status === 200, `/ui/${f}: ${a.status}`);
    }
  });

  await check("core.js: decoding, pooling, masks, fragments, metrics", async () => {
    const page = await open(`${srv.url}/`);
    const bad = await page.evaluate(async () => {
      const c = await import("/ui/core.js");
      const bad = [];
      const eq = (name, got, want) => { if (JSON.stringify(got) !== JSON.stringify(want)) bad.push(`${name}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`); };
      // base64: the fast decoder against the browser's, lengths around its blocks
      for (const n of [0, 1, 2, 3, 47, 48, 49, 100, 1000, 4099]) {
        const u = new Uint8Array(n).map((_, i) => (i * 151 + n) & 255);
        const b = c.bytesToBase64(u);
        eq(`base64 ${n}`, Array.from(c.base64ToBytes(b)), Array.from(u));
      }
      // base64Rows: every row once, in order, from any first row
      const W = 7, R = 20, f = Float32Array.from({ length: W * R }, (_, i) => i * 0.5 - 3);
      const b64 = c.bytesToBase64(c.float32ToBytes(f));
      for (const r0 of [0, 1, 2, 5]) {
        const got = [];
        c.base64Rows(b64, W, r0, R, (r, w, at) => got.push(r, ...w.subarray(at, at + W)));
        const want = [];
        for (let r = r0; r < R; r++) want.push(r, ...f.subarray(r * W, r * W + W));
        eq(`base64Rows from ${r0}`, got, want);
      }
      // poolHeads (streamed and not) against poolMap of each head and of the mean
      const H = 3, Lq = 37, Lk = 45, n = Lq * Lk;
      const w = Float32Array.from({ length: H * n }, (_, i) => ((i * 2654435761) >>> 0) / 2 ** 32);
      const req = { mask: { causal: "bottom_right", window: { left: 9 }, key_lengths: [40],
        allow: { shape: [H, 1, Lk], data: Array.from({ length: H * Lk }, (_, k) => (k % 5 ? 1 : 0)) } } };
      const m = c.maskOf(req, Lq, Lk), { lo, hi } = m.rows(0), al = m.allowed(0);
      for (const cell of [[1, 1], [4, 3], [8, 8]]) {
        for (const src of [{ data: w }, { base64: c.bytesToBase64(c.float32ToBytes(w)) }]) {
          const p = c.poolHeads(src, 0, H, Lq, Lk, cell[0], cell[1], lo, hi, (h) => (i, j) => al(h, i, j));
          for (let h = 0; h < H; h++)
            eq(`head ${h} ${cell}`, Array.from(p.heads[h].data), Array.from(c.poolMap(w, h * n, Lq, Lk, cell[0], cell[1], lo, hi, (i, j) => al(h, i, j)).data));
          const mean = new Float32Array(n);
          for (let h = 0; h < H; h++) for (let k = 0; k < n; k++) if (k % Lk <= hi[(k / Lk) | 0] && k % Lk >= lo[(k / Lk) | 0]) mean[k] += w[h * n + k];
          for (let k = 0; k < n; k++) mean[k] /= H;
          const any = (i, j) => [0, 1, 2].some((h) => al(h, i, j));
          eq(`mean ${cell}`, Array.from(p.mean.data), Array.from(c.poolMap(mean, 0, Lq, Lk, cell[0], cell[1], lo, hi, any).data));
        }
      }
      // masks: the alignments with Lq < Lk, the window, key lengths
      const rows = (mask, Lq2, Lk2) => { const r = c.maskOf({ mask }, Lq2, Lk2).rows(0); return [Array.from(r.lo), Array.from(r.hi)]; };
      eq("bottom_right", rows({ causal: true }, 2, 4), [[0, 0], [2, 3]]);
      eq("top_left", rows({ causal: "top_left" }, 2, 4), [[0, 0], [0, 1]]);
      eq("window", rows({ window: { left: 1, right: 0 } }, 3, 3), [[0, 0, 1], [0, 1, 2]]);
      eq("key_lengths", rows({ key_lengths: [2] }, 1, 4), [[0], [1]]);
      eq("layer default", Array.from(c.maskOf({ layer: "x" }, 2, 2, "bottom_right").rows(0).hi), [0, 1]);
      eq("layer window", Array.from(c.maskOf({ layer: "x" }, 3, 3, false, { left: 1 }).rows(0).lo), [0, 0, 1]);
      eq("layer window off", Array.from(c.maskOf({ layer: "x", mask: { window: {} } }, 3, 3, false, { left: 1 }).rows(0).lo), [0, 0, 0]);
      eq("layer window replaced", Array.from(c.maskOf({ layer: "x", mask: { window: { right: 0 } } }, 3, 3, false, { left: 1 }).rows(0).lo), [0, 0, 0]);
      // the fragment round trip, and the seeded rows
      const st = { ...c.DEFAULTS, mode: "json", req: { query: [[1, 2]], num_heads: 1 }, head: "mean", lock: true, tokens: "a b" };
      const back = c.parseFragment("#" + c.formatFragment(st));
      eq("fragment", back, st);
      eq("fragment text", c.formatFragment({ ...c.DEFAULTS, mode: "inline", L: 8 }), "mode=inline&L=8");
      eq("rows repeat per token", Array.from(c.hiddenStates(1, "key", ["a", "b", "a"], 2)).slice(4), Array.from(c.hiddenStates(1, "key", ["a"], 2)));
      const x = c.hiddenStates(1, "query", c.tokenLabels("", 64), 64);
      let s = 0, s2 = 0;
      for (const v of x) { s += v; s2 += v * v; }
      if (Math.abs(s / x.length) > 0.05 || Math.abs(s2 / x.length - 1) > 0.05) bad.push(`normals: mean ${s / x.length}, variance ${s2 / x.length}`);
      // metrics: parsing and the quantile of Prometheus' histogram_quantile
      const ms = c.parseMetrics('# HELP x\na_total{s="200",p="v1"} 3\na_total{s="200",p="v2"} 4\na_total{s="422",p="v1"} 1\ng 2\n');
      eq("sumBy", c.sumBy(ms, "a_total", "s", null), { 200: 7, 422: 1 });
      eq("quantile", c.histogramQuantile(0.5, [[0.1, 0], [0.2, 10], [Infinity, 10]]), 0.15000000000000002);
      eq("quantile in +Inf", c.histogramQuantile(0.99, [[0.1, 5], [Infinity, 10]]), 0.1);
      eq("quantile empty", c.histogramQuantile(0.5, [[0.1, 0], [Infinity, 0]]), null);
      return bad;
    });
    assert(bad.length === 0, bad.join("\n"));
    await page.close();
  });

  await check("axes are labelled whatever a cell covers (3, 7, 32 positions ...)", async () => {
    // a pooled axis is labelled where positions are round; per = 3 or 32
    // has no round multiple within the axis, and once drew "0" alone
    const page = await open(`${srv.url}/#mode=inline&E=32&H=2&Hkv=2&L=1200`);
    const bad = await page.evaluate(async () => {
      const { drawAxis } = await import("/ui/heatmap.js");
      const bad = [];
      for (let per = 1; per <= 64; per++) {
        const el = document.createElement("div"), n = Math.ceil(32768 / per) > 512 ? 512 : Math.ceil(32768 / per);
        drawAxis(el, n, 1, per, [], 14, true, 100);
        const got = [...el.children].map((s) => Number(s.textContent));
        if (got.length < 2 || got.length > n / 14 + 1) bad.push(`per ${per}: ${got.length} labels over ${n} cells`);
        if (got.some((x, k) => k && (x - 100) % per !== 0)) bad.push(`per ${per}: ${got.slice(0, 4)}`);
      }
      return bad;
    });
    assert(bad.length === 0, bad.join("; "));
    await runs(page, 1);
    await clean(page);
    const axis = await page.$$eval("#query-axis span", (s) => s.map((x) => x.textContent));
    assert(axis.length >= 10 && axis[0] === "0" && axis[1] === "60", `L=1200 (3 positions a cell): the query axis reads ${axis.slice(0, 5)}`);
    await page.close();
  });

  await check("the README's first link runs the worked example on load", async () => {
    const link = readmeLink();
    assert(link.startsWith("http://localhost:8080/#"), `the README's first link is ${link}`);
    const page = await open(link.replace("http://localhost:8080", srv.url));
    await runs(page, 1);
    await clean(page);
    const pageLink = await page.$eval("#ex-worked", (a) => a.getAttribute("href"));
    assert(pageLink === link.slice(link.indexOf("#")), "the page's worked example differs from the README's");
    const expect = { 0: [0.8, 0.2], 1: [0.25, 0.75] };
    for (const h of [0, 1]) {
      const sel = `canvas[aria-label="head ${h}"]`;
      for (const c of [0, 1]) {
        const got = await cellColour(page, sel, 0, c, 1, 2);
        const want = await page.evaluate((w) => window.attnd.colourOf(w), expect[h][c]);
        assert(close(got, want, 2), `head ${h} key ${c}: ${got}, the colour of ${expect[h][c]} is ${want}`);
        // the legend shows the same colour where the weight sits on it
        const x = await page.evaluate((w) => {
          const v = window.attnd.view();
          return Math.round(window.attnd.core.scalePos(w, window.attnd.state().colour, v.max) * 255);
        }, expect[h][c]);
        const leg = await pixel(page, "#legend-canvas", Math.min(255, x), 7);
        assert(close(leg, want, 3), `legend at ${x}: ${leg}, want ${want}`);
      }
    }
    const a = await cellColour(page, 'canvas[aria-label="head 0"]', 0, 0, 1, 2);
    const b = await cellColour(page, 'canvas[aria-label="head 0"]', 0, 1, 1, 2);
    assert(!close(a, b, 20), "0.8 and 0.2 look alike");
    const out = await text(page, "#output-info");
    assert(/output \[1, 1\]: 4\.6\b/.test(out), `output: ${out}`);
    const desc = await text(page, "#desc-1");
    assert(/0\.2500/.test(desc) && /0\.7500/.test(desc), `head 1's text alternative: ${desc}`);

    // hover head 0, then the enlarged map's cells
    await page.hover('canvas[aria-label="head 0"]');
    assert(/^head 0/.test(await text(page, "#big-title")), "hovering head 0 does not enlarge it");
    let tip = await hoverCell(page, 0, 0, 1, 2);
    assert(/q0/.test(tip) && /k0/.test(tip) && /0\.8000/.test(tip), `tooltip: ${tip}`);
    tip = await hoverCell(page, 0, 1, 1, 2);
    assert(/k1/.test(tip) && /0\.2000/.test(tip), `tooltip: ${tip}`);
    // click head 1 to lock it: hovering head 0 then leaves it
    await page.click('canvas[aria-label="head 1"]');
    await page.hover('canvas[aria-label="head 0"]');
    assert(/^head 1 \(locked/.test(await text(page, "#big-title")), "head 1 is not locked");
    tip = await hoverCell(page, 0, 0, 1, 2);
    assert(/0\.2500/.test(tip), `tooltip: ${tip}`);
    tip = await hoverCell(page, 0, 1, 1, 2);
    assert(/0\.7500/.test(tip), `tooltip: ${tip}`);
    await page.screenshot({ path: path.join(opt.out, "example.png") });
    // the keyboard: the enlarged map's cells by the arrow keys
    await page.focus("#big-canvas");
    await page.keyboard.press("ArrowRight");
    await page.keyboard.press("ArrowRight");
    const read = await text(page, "#readout");
    assert(/head 1: query 0 “q0” → key 1 “k1”: 0\.7500/.test(read), `readout: ${read}`);

    // the link holds the view: opened afresh, head 1 is locked again
    const hash = await page.evaluate(() => location.hash);
    assert(/head=1/.test(hash) && /lock=1/.test(hash), `fragment: ${hash}`);
    const again = await open(`${srv.url}/${hash}`);
    await runs(again, 1);
    assert(/^head 1 \(locked/.test(await text(again, "#big-title")), "the copied link lost the locked head");
    await clean(again);
    await again.close();
    example = page;
  });

  await check("replies in float16 and bfloat16 (return.dtype) draw the weights they carry", async () => {
    // the README's worked example, its reply's tensors two bytes an element:
    // once read as float32, 0.8 and 0.2 drew as 1e-8 and 5e-4, and the
    // output's 4 bytes stopped the page ("2 bytes are not float32s")
    const link = readmeLink();
    const req = JSON.parse(Buffer.from(link.slice(link.indexOf("req=") + 4), "base64url").toString());
    for (const dtype of ["float16", "bfloat16"]) {
      req.return.dtype = dtype;
      const page = await open(`${srv.url}/#mode=json&req=${Buffer.from(JSON.stringify(req)).toString("base64url")}`);
      await runs(page, 1);
      await clean(page);
      const w = await page.evaluate(() => window.attnd.view().maps.map((m) => Array.from(m.fine.data)));
      const want = [[0.8, 0.2], [0.25, 0.75], [0.525, 0.475]];
      assert(w.length === 3 && w.every((m, k) => close(m, want[k], 0.005)), `${dtype}: the maps hold ${JSON.stringify(w)}`);
      const out = await text(page, "#output-info");
      const m = /^output \[1, 1\]: ([0-9.]+)/.exec(out);
      assert(m && Math.abs(Number(m[1]) - 4.6) < 0.02, `${dtype}: ${out}`);
      await page.close();
    }
  });

  await check("a 422 shows its field beside the control that caused it", async () => {
    const page = await open(`${srv.url}/#mode=inline&E=64&H=3&Hkv=3&L=4`);
    await runs(page, 1);
    assert(await shown(page, "#err-E"), "no error beside E");
    const e = await text(page, "#err-E");
    assert(/^query: .*num_heads 3.*422 heads_mismatch/.test(e), `beside E: ${e}`);
    assert((await page.$eval("#E", (x) => x.getAttribute("aria-invalid"))) === "true", "E is not marked invalid");
    assert((await page.$eval("#E", (x) => x.getAttribute("aria-describedby"))).includes("err-E"), "E does not point at its error");

    await page.evaluate(() => { location.hash = "mode=inline&L=4&wl=-1"; });
    await runs(page, 2);
    assert(!(await shown(page, "#err-E")), "the old error stays");
    const w = await text(page, "#err-wl");
    assert(/^mask\.window\.left: .*-1.*422 invalid_value/.test(w), `beside window left: ${w}`);
    assert((await page.$eval("#wl", (x) => x.getAttribute("aria-invalid"))) === "true", "wl is not marked invalid");
    assert(/see “window left”/.test(await text(page, "#status")), await text(page, "#status"));
    await page.screenshot({ path: path.join(opt.out, "error.png") });
    await clean(page);
    await page.close();
  });

  await check("a length past 32768 is refused before any label is made (L = 1e9)", async () => {
    // the page built a label for each of the 1e9 positions before it
    // compared the count with its limit: the tab hung, then ran out of memory
    const page = await open(`${srv.url}/#mode=inline&L=1000000000`);
    await runs(page, 1, 10000);
    assert(/at most 32768 positions; this is 1000000000/.test(await text(page, "#err-tokens")), await text(page, "#err-tokens"));
    assert(/L = 1000000000/.test(await text(page, "#tokens-info")), await text(page, "#tokens-info"));
    await clean(page);
    await page.close();
  });

  await check("network errors and replies that are not JSON are shown, never a blank page", async () => {
    let mode = "abort";
    const page = await open(`${srv.url}/`, async (p) => {
      await p.setRequestInterception(true);
      p.on("request", (r) => {
        if (!r.url().endsWith("/v1/attention")) return r.continue();
        if (mode === "abort") return r.abort("connectionrefused");
        if (mode === "noweights") return r.respond({ status: 200, contentType: "application/json", body: '{"output":[[0]]}' });
        return r.respond({ status: 502, contentType: "text/html", body: "<h1>Bad Gateway</h1>" });
      });
    });
    await page.click("#run");
    await runs(page, 1);
    assert(/^Network error/.test(await text(page, "#err-run")), await text(page, "#err-run"));
    mode = "html";
    await page.click("#run");
    await runs(page, 2);
    assert(/HTTP 502, and the reply is not JSON/.test(await text(page, "#err-run")), await text(page, "#err-run"));
    await clean(page);
    // a 200 the page cannot draw: named in the banner, and the status says so
    mode = "noweights";
    await page.click("#run");
    await runs(page, 3);
    assert(/could not be drawn/.test(await text(page, "#status")), await text(page, "#status"));
    assert(/the reply has no weights/.test(await text(page, "#page-error")), await text(page, "#page-error"));
    await page.close();
  });

  await check("a causal L=512 request draws the masked triangle", async () => {
    const page = await open(`${srv.url}/#mode=inline&E=64&H=4&Hkv=4&L=512&causal=bottom_right`);
    await runs(page, 1);
    await clean(page);
    const { w, h } = await page.$eval("#big-canvas", (e) => ({ w: e.width, h: e.height }));
    assert(w === 512 && h === 512, `enlarged map ${w} x ${h}`);
    const pts = await page.evaluate(() => {
      const c = document.getElementById("big-canvas").getContext("2d").getImageData(0, 0, 512, 512).data;
      const at = (x, y) => [c[(y * 512 + x) * 4], c[(y * 512 + x) * 4 + 1], c[(y * 512 + x) * 4 + 2]];
      const above = [], below = [];
      for (let k = 0; k < 400; k++) {
        const r = (k * 37) % 512, col = (k * 101) % 512;
        if (col > r + 2) above.push(at(col, r));
        else if (col < r - 2) below.push(at(col, r));
      }
      return { above, below };
    });
    assert(pts.above.length > 100 && pts.below.length > 100, "too few samples");
    for (const p of pts.above) assert(close(p, MASKED, 0), `a cell above the diagonal is ${p}`);
    for (const p of pts.below) assert(!close(p, MASKED, 12), `a cell below the diagonal is masked grey ${p}`);
    // the thumbnails too (4 x 4 positions a pixel)
    const t = await pixel(page, 'canvas[aria-label="head 3"]', 120, 4);
    assert(close(t, MASKED, 0), `head 3's thumbnail above the diagonal: ${t}`);
    await page.close();
  });

  await check("L=2048 with 8 heads renders (timed in the page)", async () => {
    const page = await open(`${srv.url}/#mode=inline&E=64&H=8&Hkv=8&L=2048`);
    await runs(page, 1, 90000);
    await clean(page);
    const v = await page.evaluate(() => {
      const x = window.attnd.view();
      return { t: x.timings, heads: x.maps.length, rb: x.rb, cb: x.cb };
    });
    assert(v.heads === 9, `${v.heads} maps`);
    assert(v.rb === 4 && v.cb === 4, `cells of ${v.rb} x ${v.cb}`);
    assert(/covers 4 × 4/.test(await text(page, "#status")), "the page does not say it downsamples");
    const t = v.t;
    const line = `L=2048 x 8 heads: rendered in ${t.render_ms.toFixed(0)} ms (base64 decoding and pooling ${t.pool_ms.toFixed(0)} ms, ` +
      `drawing ${t.draw_ms.toFixed(0)} ms); before it, the 180 MB reply: headers ${t.fetch_ms.toFixed(0)} ms, ` +
      `body ${t.body_ms.toFixed(0)} ms, JSON.parse ${t.parse_ms.toFixed(0)} ms`;
    console.log(`     ${line}`);
    report.push(line);
    assert(t.render_ms < 10000, `render took ${t.render_ms} ms`);
    await page.screenshot({ path: path.join(opt.out, "long.png") });
    await page.close();
  });

  await check("a named layer: the demo layer on tokens, causal by its default", async () => {
    const page = await open(`${srv.url}/`);
    await page.click("#mode-layer");
    assert(/E 64, H 4, Hkv 4, Dh 16, rope, causal bottom_right/.test(await text(page, "#layer-info")), await text(page, "#layer-info"));
    await page.click("#ex-demo");
    await runs(page, 1);
    await clean(page);
    assert((await page.$$("#grid canvas")).length === 5, "not 4 heads and the mean");
    const sent = await page.evaluate(() => JSON.parse(document.getElementById("req-preview").textContent));
    assert(sent.layer === "demo" && sent.mask.causal === "bottom_right" && !sent.num_heads, `sent: ${JSON.stringify(sent).slice(0, 200)}`);
    assert(/^the\s*cat\s*sat/.test(await text(page, "#query-axis")), await text(page, "#query-axis"));
    const tip = await hoverCell(page, 1, 0, 11, 11);
    assert(/query 1 “cat” → key 0 “the”: 0\.\d{4}/.test(tip), `tooltip: ${tip}`);
    const up = await hoverCell(page, 1, 2, 11, 11);
    assert(/: masked$/.test(up), `tooltip: ${up}`);
    await page.close();
  });

  await check("a named layer chosen by hand: its causal default is sent", async () => {
    // the causal control stayed at none when the source was switched to a
    // layer, and the request's causal: false overrode the demo's default
    const page = await open(`${srv.url}/`);
    await page.click("#mode-layer");
    await page.type("#tokens", "the cat sat on the mat");
    await page.click("#run");
    await runs(page, 1);
    await clean(page);
    const sent = await page.evaluate(() => JSON.parse(document.getElementById("req-preview").textContent));
    assert(sent.layer === "demo" && sent.mask.causal === "bottom_right", `sent: ${JSON.stringify(sent.mask)}`);
    const up = await hoverCell(page, 1, 2, 6, 6);
    assert(/: masked$/.test(up), `tooltip above the diagonal: ${up}`);
    await page.close();
  });

  await check("a layer with a sliding window: the page shows it, sets the window controls from it, and sends it, the user's or none", async () => {
    // the page set its causal control from a layer's default, but not its
    // window controls, and its info line did not mention the window: left
    // blank, they sent no mask.window, so the layer's window held where the
    // page's "blank: none" promised none, and could not be turned off
    const swa = await startServer([], `${opt.layer},${path.join(opt.out, "swa-layer")}`);
    try {
      const page = await open(`${swa.url}/`);
      await page.click("#mode-layer");
      await page.waitForFunction(() => document.getElementById("layer").options.length === 2, { timeout: 5000 });
      assert(/causal bottom_right by default, no window/.test(await text(page, "#layer-info")), `demo: ${await text(page, "#layer-info")}`);
      await page.select("#layer", SWA.name);
      const info = await text(page, "#layer-info");
      assert(/E 32, H 4, Hkv 2, Dh 8, .*causal bottom_right by default, window left 3 by default \(4 keys a query\)/.test(info), `the layer's info: ${info}`);
      const controls = () => page.evaluate(() => ["causal", "wl", "wr"].map((id) => document.getElementById(id).value));
      let c = await controls();
      assert(c.join() === "bottom_right,3,", `the mask controls for the windowed layer: ${JSON.stringify(c)}`);
      await page.$eval("#L", (e) => { e.value = "8"; });
      // each run: the window sent, and the weights query 7 gives keys 0-7
      // in head 0 (NaN where the page draws the cell masked)
      const runWith = async (n) => {
        await page.click("#run");
        await runs(page, n);
        await clean(page);
        const sent = await page.evaluate(() => JSON.parse(document.getElementById("req-preview").textContent));
        const row = await page.evaluate(() => Array.from(window.attnd.view().maps[0].fine.data.slice(56, 64)));
        return { window: JSON.stringify(sent.mask.window), row: row.map((w) => (w === null || w !== w ? "masked" : w > 0 ? "w" : "0")).join(" ") };
      };
      // as set: the layer's window, keys 4-7 weighted, 0-3 masked
      let r = await runWith(1);
      assert(r.window === '{"left":3}' && r.row === "masked masked masked masked w w w w", `as set: sent ${r.window}, query 7: ${r.row}`);
      // the user's: left 1
      await page.$eval("#wl", (e) => { e.value = "1"; });
      r = await runWith(2);
      assert(r.window === '{"left":1}' && r.row === "masked masked masked masked masked masked w w", `left 1: sent ${r.window}, query 7: ${r.row}`);
      // both blank: the window off ({}), every key weighted by the server
      await page.$eval("#wl", (e) => { e.value = ""; });
      r = await runWith(3);
      assert(r.window === "{}" && r.row === "w w w w w w w w", `blank: sent ${r.window}, query 7: ${r.row}`);
      assert(/wl=/.test(await page.evaluate(() => location.hash)) === false, "a blank window in the link");
      // the link keeps the window: opened afresh, it sends left 3 again
      await page.$eval("#wl", (e) => { e.value = "3"; });
      await runWith(4);
      const again = await open(`${swa.url}/${await page.evaluate(() => location.hash)}`);
      await runs(again, 1);
      const sent = await again.evaluate(() => JSON.parse(document.getElementById("req-preview").textContent));
      assert(JSON.stringify(sent.mask.window) === '{"left":3}', `the link sent ${JSON.stringify(sent.mask.window)}`);
      await again.close();
      // back to demo, which has none: the window controls are cleared, and
      // nothing but the causal is sent
      await page.select("#layer", "demo");
      c = await controls();
      assert(c.join() === "bottom_right,,", `the mask controls for demo: ${JSON.stringify(c)}`);
      await page.click("#run");
      await runs(page, 5);
      const demo = await page.evaluate(() => JSON.parse(document.getElementById("req-preview").textContent));
      assert(JSON.stringify(demo.mask) === '{"causal":"bottom_right"}', `sent for demo: ${JSON.stringify(demo.mask)}`);
      await page.close();
    } finally {
      await stopServer(swa);
    }
  });

  await check("a JSON request naming a windowed layer draws the layer's window masked", async () => {
    // a request that sets no mask.window takes the layer's: the page drew
    // the keys outside it as weights of 0, not as masked cells
    const swa = await startServer([], `${path.join(opt.out, "swa-layer")}`);
    try {
      const L = 8, query = Array.from({ length: L }, (_, i) => Array.from({ length: SWA.E }, (_, k) => Math.sin(i * 7 + k)));
      const req = { layer: SWA.name, query, return: { weights: "per_head" } };
      const page = await open(`${swa.url}/#mode=json&req=${Buffer.from(JSON.stringify(req)).toString("base64url")}`);
      await runs(page, 1);
      await clean(page);
      const row = await page.evaluate(() => Array.from(window.attnd.view().maps[0].fine.data.slice(56, 64), (w) => (w !== w ? "masked" : w > 0 ? "w" : "0")).join(" "));
      assert(row === "masked masked masked masked w w w w", `query 7: ${row}`);
      await page.$eval("#big-canvas", (e) => e.scrollIntoView({ block: "center" }));
      const tip = await hoverCell(page, 7, 0, 8, 8);
      assert(/: masked$/.test(tip), `tooltip at query 7, key 0: ${tip}`);
      await page.close();
    } finally {
      await stopServer(swa);
    }
  });

  await check("layers: the list is asked for again after it failed, and after the server refused a layer", async () => {
    // GET /v1/layers fails once, as while the server restarts: Run asks
    // again (the page kept "the layers are not known" until reloaded)
    let fail = 1, stale = 0;
    const page = await open(`${srv.url}/#mode=layer&layer=demo&tokens=a+b+c`, async (p) => {
      await p.setRequestInterception(true);
      p.on("request", async (r) => {
        if (!r.url().endsWith("/v1/layers")) return r.continue();
        if (fail > 0) { fail--; return r.abort("connectionrefused"); }
        if (stale > 0) { // the list from before a reload: demo was 32 wide
          stale--;
          const real = await (await fetch(`${srv.url}/v1/layers`)).json();
          for (const l of real.layers) l.embed_dim = 32;
          return r.respond({ status: 200, contentType: "application/json", body: JSON.stringify(real) });
        }
        return r.continue();
      });
    });
    await runs(page, 1);
    assert(!(await shown(page, "#err-layer")), `beside the layer: ${await text(page, "#err-layer")}`);
    assert((await page.$$("#grid canvas")).length === 5, "the demo layer is not drawn");
    // a list from before the layer changed: the server refuses the width,
    // the page asks for the list again, and the next Run is drawn
    stale = 1;
    await page.evaluate(() => document.getElementById("apikey").dispatchEvent(new Event("change")));
    await page.waitForFunction(() => /E 32/.test(document.getElementById("layer-info").textContent), { timeout: 5000 });
    await page.click("#run");
    await runs(page, 2);
    assert(/422 shape_mismatch/.test(await text(page, "#err-layer")), `beside the layer: ${await text(page, "#err-layer")}`);
    assert(/E 64/.test(await text(page, "#layer-info")), `the layer's info after the 422: ${await text(page, "#layer-info")}`);
    await page.click("#run");
    await runs(page, 3);
    assert(!(await shown(page, "#err-layer")), `beside the layer: ${await text(page, "#err-layer")}`);
    assert((await page.$$("#grid canvas")).length === 5, "the demo layer is not drawn again");
    await clean(page);
    await page.close();
  });

  await check("L=4096, the mean only: downsampled 8 × 8", async () => {
    const page = await open(`${srv.url}/#mode=inline&E=32&H=4&Hkv=4&L=4096&causal=top_left&weights=mean`);
    await runs(page, 1, 90000);
    await clean(page);
    assert((await page.$$("#grid canvas")).length === 1, "not just the mean");
    assert(/the mean over heads, 4096 queries × 4096 keys\. Each cell of the maps covers 8 × 8/.test(await text(page, "#status")), await text(page, "#status"));
    const p = await pixel(page, "#big-canvas", 500, 10);
    assert(close(p, MASKED, 0), `top right: ${p}`);
    const t = await page.evaluate(() => window.attnd.view().timings);
    const line = `L=4096, mean only: rendered in ${t.render_ms.toFixed(0)} ms`;
    console.log(`     ${line}`);
    report.push(line);
    await page.close();
  });

  await check("L=4096 with 4 heads, per head: pooled by the server, where the dense reply would be refused", async () => {
    // the page's defaults at L = 4096 asked for 4 x 4096 x 4096 dense
    // weights, 359 MB of reply over max_response_bytes' 256 MB: a 422 at
    // per-head weights instead of maps
    const page = await open(`${srv.url}/#mode=inline&E=32&H=4&Hkv=4&L=4096&causal=bottom_right`);
    await runs(page, 1, 90000);
    await clean(page);
    const err = await text(page, "#err-perhead");
    assert(!(await shown(page, "#err-perhead")), `beside per-head weights: ${err}`);
    const sent = await page.evaluate(() => JSON.parse(document.getElementById("req-preview").textContent));
    const w = sent.return.weights;
    assert(w && w.pool && w.pool[0] === 8 && w.pool[1] === 8, `sent: ${JSON.stringify(w)}`);
    assert((await page.$$("#grid canvas")).length === 4, "not 4 heads");
    assert(/pooled by the server: each cell covers 8 × 8/.test(await text(page, "#status")), await text(page, "#status"));
    const above = await cellColour(page, "#big-canvas", 0, 511, 512, 512);
    assert(close(above, MASKED, 0), `top right: ${above}`);
    await page.close();
  });

  await check("L=16384, causal, 8 heads: maps pooled by the server, zoomed twice, top keys on hover, statistics", async () => {
    const page = await open(`${srv.url}/#mode=inline&E=32&H=8&Hkv=8&L=16384&causal=bottom_right`);
    await runs(page, 1, 120000);
    await clean(page);
    const sent = await page.evaluate(() => JSON.parse(document.getElementById("req-preview").textContent));
    const w = sent.return.weights;
    assert(w && w.pool && w.pool[0] === 32 && w.pool[1] === 32 && w.top_k === 4, `sent: ${JSON.stringify(w)}`);
    assert((await page.$$("#grid canvas")).length === 8, "not 8 heads");
    assert(/pooled by the server: each cell covers 32 × 32/.test(await text(page, "#status")), await text(page, "#status"));
    // the causal triangle: masked above the diagonal, weights below it
    const above = await cellColour(page, "#big-canvas", 0, 511, 512, 512);
    assert(close(above, MASKED, 0), `top right: ${above}`);
    const below = await cellColour(page, "#big-canvas", 511, 0, 512, 512);
    assert(!close(below, MASKED, 12), `bottom left is masked grey: ${below}`);
    assert(await shown(page, "#stats"), "no statistics panel");
    const t0 = await page.evaluate(() => window.attnd.view().timings);
    await page.screenshot({ path: path.join(opt.out, "long-16k.png"), fullPage: true });
    // zoom twice, 4x each time, around a cell near the bottom left
    const bigBox = async () => {
      await page.$eval("#big-canvas", (e) => e.scrollIntoView({ block: "center" }));
      return (await page.$("#big-canvas")).boundingBox();
    };
    const clickCell = async (r, c) => {
      const box = await bigBox();
      await page.mouse.click(box.x + (box.width * (c + 0.5)) / 512, box.y + (box.height * (r + 0.5)) / 512);
    };
    const zoomOf = () => page.evaluate(() => window.attnd.state().zoom);
    await clickCell(500, 5);
    await runs(page, 2, 120000);
    await clean(page);
    let st = await zoomOf();
    assert(st === "12288-16384,0-4096", `first zoom: ${st}`);
    assert(/zoom=12288-16384%2C0-4096/.test(await page.evaluate(() => location.hash)), await page.evaluate(() => location.hash));
    assert(await shown(page, "#zoom-out"), "no zoom-out button");
    let v = await page.evaluate(() => ({ rb: window.attnd.view().rb, cb: window.attnd.view().cb }));
    assert(v.rb === 8 && v.cb === 8, `first zoom: cells of ${v.rb} x ${v.cb}`);
    await clickCell(300, 100);
    await runs(page, 3, 120000);
    await clean(page);
    st = await zoomOf();
    const m = /^(\d+)-(\d+),(\d+)-(\d+)$/.exec(st);
    assert(m && m[2] - m[1] === 1024 && m[4] - m[3] === 1024 && Math.abs(m[1] - 14180) <= 16 && Math.abs(m[3] - 292) <= 16, `second zoom: ${st}`);
    v = await page.evaluate(() => ({ rb: window.attnd.view().rb, cb: window.attnd.view().cb }));
    assert(v.rb === 2 && v.cb === 2, `second zoom: cells of ${v.rb} x ${v.cb}`);
    const axis = await text(page, "#query-axis");
    assert(axis.trim().startsWith(m[1]), `the query axis starts at ${axis.slice(0, 20)}, not ${m[1]}`);
    // still causal where it should be: above the diagonal masked
    const q0 = Number(m[1]), k0 = Number(m[3]);
    const masked = await cellColour(page, "#big-canvas", 0, 511, 512, 512);
    if (k0 + 1023 > q0 + 1) assert(close(masked, MASKED, 0), `zoomed top right: ${masked}`);
    await bigBox();
    const tip = await hoverCell(page, 400, 10, 512, 512);
    assert(/^head \d: queries \d+–\d+ → keys \d+–\d+: largest \d[^;]*; top keys of query \d+: \d+ “\d+” \d/.test(tip), `tooltip: ${tip}`);
    assert(/entropy \(blue\) up to \d/.test(await text(page, "#stats-desc")), await text(page, "#stats-desc"));
    await page.screenshot({ path: path.join(opt.out, "long-16k-zoom.png"), fullPage: true });
    // the fragment alone gives the same view
    const again = await open(`${srv.url}/${await page.evaluate(() => location.hash)}`);
    await runs(again, 1, 120000);
    await clean(again);
    assert((await again.evaluate(() => window.attnd.view().long.z.q0)) === q0, "the fragment lost the zoom");
    await again.close();
    await page.click("#zoom-out");
    await runs(page, 4, 120000);
    st = await zoomOf();
    assert(st === "", `zoom after zooming out: ${st}`);
    const line = `L=16384 x 8 heads, pooled by the server: rendered in ${t0.render_ms.toFixed(0)} ms; the reply: headers ${t0.fetch_ms.toFixed(0)} ms, ` +
      `body ${t0.body_ms.toFixed(0)} ms, JSON.parse ${t0.parse_ms.toFixed(0)} ms`;
    console.log(`     ${line}`);
    report.push(line);
    await page.close();
  });

  await check("a zoomed long map's text alternative names absolute positions, as its tooltip does", async () => {
    // L = 4104 zoomed to queries 2048-3072 and keys 1024-2048 (the server
    // pools 2 x 2): the largest block was named from 0, not from 2048
    const page = await open(`${srv.url}/#mode=inline&E=32&H=2&Hkv=2&L=4104&causal=bottom_right&zoom=2048-3072,1024-2048`);
    await runs(page, 1, 60000);
    await clean(page);
    const desc = await text(page, "#big-desc");
    const m = /largest weight ([0-9.e-]+), in queries (\d+)–(\d+) and keys (\d+)–(\d+)/.exec(desc);
    assert(m, `the enlarged map's text: ${desc}`);
    const [q0, q1, k0, k1] = m.slice(2).map(Number);
    assert(q0 >= 2048 && q1 < 3072 && k0 >= 1024 && k1 < 2048 && q1 - q0 === 1 && k1 - k0 === 1, `named: queries ${q0}–${q1}, keys ${k0}–${k1}`);
    // the tooltip of that cell names the same block and weight
    const tip = await hoverCell(page, (q0 - 2048) / 2, (k0 - 1024) / 2, 512, 512);
    assert(tip.includes(`queries ${q0}–${q1} → keys ${k0}–${k1}: largest ${m[1]}`), `tooltip: ${tip}; text: ${desc}`);
    await page.close();
  });

  await check("the causal L=256 example with eight heads", async () => {
    const page = await open(`${srv.url}/`);
    await page.click("#ex-causal");
    await runs(page, 1);
    await clean(page);
    assert((await page.$$("#grid canvas")).length === 9, "not 9 maps");
    const p = await cellColour(page, 'canvas[aria-label="head 5"]', 0, 255, 256, 256);
    assert(close(p, MASKED, 0), `head 5's top-right cell: ${p}`);
    await page.hover('canvas[aria-label="head 2"]');
    await page.click('canvas[aria-label="head 2"]');
    await page.mouse.move(0, 0);
    await page.screenshot({ path: path.join(opt.out, "causal.png"), fullPage: true });
    await page.close();
  });

  await check("the service panel shows rates, queue and latency during a load", async () => {
    const page = await open(`${srv.url}/#tab=service`);
    assert(await shown(page, "#panel-service"), "the service tab is not open");
    // a bounded load: 4 clients, at most 2000 requests or 8 s
    const body = JSON.stringify({ query: [[1, 0, 0, 1], [0, 1, 1, 0]], num_heads: 2 });
    const bad = JSON.stringify({ query: [[1, 0, 0, 1]], num_heads: 3 });
    let sent = 0, stopAt = Date.now() + 8000, ok = 0;
    const client = async () => {
      while (sent < 2000 && Date.now() < stopAt) {
        const k = sent++;
        const r = await fetch(`${srv.url}/v1/attention`, {
          method: "POST", headers: { "Content-Type": "application/json" }, body: k % 10 === 9 ? bad : body,
        });
        await r.arrayBuffer();
        if (r.status === 200) ok++;
        await new Promise((res) => setTimeout(res, 10));
      }
    };
    const load = Promise.all([client(), client(), client(), client()]);
    await page.waitForFunction(() => {
      const l = window.attnd.service.latest();
      return l && l.rate["200"] > 0 && l.rate["422"] > 0 && l.p50["128"] > 0;
    }, { timeout: 8000, polling: 100 });
    await page.waitForFunction(() => document.querySelectorAll("#chart-rate polyline").length > 0, { timeout: 5000 });
    // three more samples under load, for the picture
    const have = await page.evaluate(() => window.attnd.service.count());
    await page.waitForFunction((k) => window.attnd.service.count() >= k + 3, { timeout: 6000 }, have);
    const rate = await text(page, "#txt-rate"), p50 = await text(page, "#txt-p50"), q = await text(page, "#txt-queue");
    console.log(`     rates: ${rate}; p50: ${p50}; ${q}`);
    assert(/200: [1-9][0-9.]*\/s/.test(rate), `rates: ${rate}`);
    assert(/422: [1-9]/.test(rate) || /422: 0\.[1-9]/.test(rate), `rates: ${rate}`);
    assert(/≤ 128: [0-9.]+ ms/.test(p50), `p50: ${p50}`);
    assert(/queue depth: \d+ · busy workers: \d+/.test(q), `queue: ${q}`);
    await page.screenshot({ path: path.join(opt.out, "service.png") });
    stopAt = 0;
    await load;
    assert(ok > 0, "the load got no 200");
    await clean(page);
    await page.close();
  });

  await check("the service panel breaks its lines where the server could not be reached", async () => {
    // samples on either side of an outage were joined by one line, as if
    // the rates had been measured through it
    let down = false;
    const page = await open(`${srv.url}/#tab=service`, async (p) => {
      await p.setRequestInterception(true);
      p.on("request", (r) => (down && r.url().endsWith("/metrics") ? r.abort("connectionrefused") : r.continue()));
    });
    const count = () => page.evaluate(() => window.attnd.service.count());
    await page.waitForFunction(() => window.attnd.service.count() >= 3, { timeout: 8000 });
    down = true;
    await page.waitForFunction(() => /Cannot reach the server/.test(document.getElementById("svc-status").textContent), { timeout: 5000 });
    down = false;
    const k = await count();
    await page.waitForFunction((n) => window.attnd.service.count() >= n + 3, { timeout: 8000 }, k);
    const runs200 = await page.$$eval("#chart-rate svg .s0", (e) => e.length);
    assert(runs200 === 2, `the 200 series is drawn in ${runs200} piece(s), not 2`);
    await clean(page);
    await page.close();
  });

  await check("the service panel notes a draining server (/readyz 503)", async () => {
    const page = await open(`${srv.url}/#tab=service`, async (p) => {
      await p.setRequestInterception(true);
      p.on("request", (r) => (r.url().endsWith("/readyz")
        ? r.respond({ status: 503, contentType: "application/json", body: '{"status":"draining"}' }) : r.continue()));
    });
    await page.waitForFunction(() => !document.getElementById("svc-draining").hidden, { timeout: 8000 });
    assert(/draining \(\/readyz answers 503\)/.test(await text(page, "#svc-draining")), await text(page, "#svc-draining"));
    await page.close();
  });

  await check("axe-core: no serious or critical violation", async () => {
    const axe = fs.readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
    const pages = [["the worked example", example]];
    const svc = await open(`${srv.url}/#tab=service`);
    await svc.waitForFunction(() => document.querySelectorAll("#chart-rate svg").length > 0, { timeout: 8000 });
    pages.push(["the service tab", svc]);
    const err = await open(`${srv.url}/#mode=inline&L=4&wl=-1`);
    await runs(err, 1);
    pages.push(["an error", err]);
    const bad = [];
    for (const [name, page] of pages) {
      assert(page, `no page for ${name}`);
      await page.evaluate(axe); // evaluated by the DevTools protocol: the page's CSP does not apply
      const r = await page.evaluate(async () => {
        const res = await window.axe.run(document, { resultTypes: ["violations"] });
        return { v: res.violations.map((x) => ({ id: x.id, impact: x.impact, n: x.nodes.length, t: x.nodes[0] && x.nodes[0].target.join(" ") })), passes: res.passes.length };
      });
      const by = {};
      for (const x of r.v) by[x.impact] = (by[x.impact] || 0) + 1;
      const line = `axe on ${name}: ${r.passes} rules passed, violations ${JSON.stringify(by)}${r.v.length ? ": " + r.v.map((x) => `${x.id} (${x.impact}, ${x.n}: ${x.t})`).join(", ") : ""}`;
      console.log(`     ${line}`);
      report.push(line);
      for (const x of r.v) if (x.impact === "serious" || x.impact === "critical") bad.push(`${name}: ${x.id} at ${x.t}`);
    }
    await svc.close();
    await err.close();
    assert(bad.length === 0, `violations: ${bad.join("; ")}`);
  });

  await check("every control has a label; every heatmap a text alternative", async () => {
    const page = example;
    const r = await page.evaluate(() => {
      const missing = [];
      for (const c of document.querySelectorAll("input, select, textarea")) {
        const labelled = c.labels && c.labels.length > 0 || c.getAttribute("aria-label") || c.getAttribute("aria-labelledby");
        if (!labelled) missing.push(c.id || c.name);
      }
      const alt = [];
      for (const c of document.querySelectorAll("canvas")) {
        const d = c.getAttribute("aria-describedby");
        const t = d && document.getElementById(d.split(" ")[0]);
        if (!c.getAttribute("aria-label") || (c.closest("#maps") && !(t && t.textContent.trim()))) alt.push(c.getAttribute("aria-label") || "?");
      }
      return { missing, alt };
    });
    assert(r.missing.length === 0, `controls without labels: ${r.missing}`);
    assert(r.alt.length === 0, `canvases without text: ${r.alt}`);
  });
  if (example) await example.close();

  await check("--ui off: / and /ui/ give 404, the API stays", async () => {
    const off = await startServer(["--ui", "off"]);
    try {
      for (const p of ["/", "/ui/app.js", "/ui/style.css"]) {
        const r = await fetch(`${off.url}${p}`);
        assert(r.status === 404, `${p}: ${r.status}`);
      }
      assert((await fetch(`${off.url}/healthz`)).status === 200, "/healthz");
    } finally {
      await stopServer(off);
    }
  });

  await check("API keys: the page loads without one, shows the 401, and works once given the key", async () => {
    const key = "ui-Test-key.42";
    const k = await startServer(["--api-keys", key]);
    try {
      const page = await open(`${k.url}/${readmeLink().slice(readmeLink().indexOf("#"))}`);
      await runs(page, 1);
      assert(await shown(page, "#err-apikey"), "no error beside the API key");
      assert(/401 unauthorized/.test(await text(page, "#err-apikey")), await text(page, "#err-apikey"));
      assert(/GET \/v1\/layers needs the API key/.test(await text(page, "#layer-info")), await text(page, "#layer-info"));
      await page.type("#apikey", key);
      await page.$eval("#apikey", (e) => e.dispatchEvent(new Event("change")));
      await page.click("#run");
      await runs(page, 2);
      assert(!(await shown(page, "#err-apikey")), "the 401 stays");
      const got = await cellColour(page, 'canvas[aria-label="head 0"]', 0, 0, 1, 2);
      const want = await page.evaluate(() => window.attnd.colourOf(0.8));
      assert(close(got, want, 2), `head 0: ${got}, want ${want}`);
      assert(!(await page.evaluate(() => location.href)).includes(key), "the key is in the URL");
      await page.screenshot({ path: path.join(opt.out, "api-key.png") });
      await clean(page);
      await page.close();
    } finally {
      await stopServer(k);
    }
  });
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL the run: ${e.stack || e}`);
} finally {
  if (browser) await browser.close().catch(() => {});
  for (const s of servers) await stopServer(s).catch(() => {});
  fs.rmSync(profile, { recursive: true, force: true });
}
fs.writeFileSync(path.join(opt.out, "report.txt"), report.join("\n") + "\n");
console.log(`ui: screenshots in ${opt.out}/`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
