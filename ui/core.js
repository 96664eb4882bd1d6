// ui/core.js: the page's pure functions, no DOM: the seeded hidden states,
// tensors in the API's three forms, base64, the fragment's state, the mask a
// request sets, the colour scale, and Prometheus text and histograms. The
// browser test imports this module too (tests/ui/ui.mjs).

// ---- seeded random hidden states -------------------------------------

// FNV-1a over the UTF-16 code units of `s`: a uint32.
export function hash32(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

// mulberry32: a function returning uniform floats in [0, 1), 2^32 states.
export function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The row of `width` standard normal values that tensor `which` ("query",
// "key", "value" or "hidden") gives token `label` under `seed`: mulberry32
// seeded with hash32(`${seed}/${which}/${label}`), two draws u1, u2 per
// value, sqrt(-2 ln(1 - u1)) cos(2 pi u2). A token repeated in the text
// gets the same row each time.
export function tokenRow(seed, which, label, width, out, at) {
  const next = mulberry32(hash32(`${seed}/${which}/${label}`));
  for (let k = 0; k < width; k++) {
    const u1 = next(), u2 = next();
    out[at + k] = Math.sqrt(-2 * Math.log(1 - u1)) * Math.cos(2 * Math.PI * u2);
  }
}

// [labels.length, width] float32, row-major: each label's tokenRow.
export function hiddenStates(seed, which, labels, width) {
  const out = new Float32Array(labels.length * width);
  labels.forEach((label, i) => tokenRow(seed, which, label, width, out, i * width));
  return out;
}

// The labels a tokens text gives (whitespace-separated), or when it is
// blank, the positions "0" ... "length - 1".
export function tokenLabels(text, length) {
  const t = (text || "").trim();
  if (t) return t.split(/\s+/);
  const n = Math.max(0, Math.floor(Number(length) || 0));
  return Array.from({ length: n }, (_, i) => String(i));
}

// ---- base64 and tensors ------------------------------------------------

const littleEndian = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
let pairs = null; // two base64 characters (their codes, 8 bits each) -> 12 bits

// The bytes of base64 text `s`. Long replies are decoded here 16
// characters (12 bytes, three little-endian words) at a time through a
// table of character pairs: in Chromium 156 that is twice as fast as
// Uint8Array.fromBase64 and 3.3 to 3.5 times as fast as atob and its copy
// into bytes (docs/ui.md). The text is taken to be valid
// base64: the page decodes only what a 200 reply carries.
export function base64ToBytes(s) {
  const m = s.length;
  if (m < 64 || m % 4 || !littleEndian) return slowBase64(s);
  const pad = s[m - 1] === "=" ? (s[m - 2] === "=" ? 2 : 1) : 0;
  const nbytes = (m / 4) * 3 - pad;
  const buf = new ArrayBuffer((nbytes + 3) & ~3);
  const blocks = Math.floor((m - 4) / 16); // the last quad, maybe padded, is left to the tail
  decodeBlocks(s, 0, blocks, new Uint32Array(buf, 0, blocks * 3));
  new Uint8Array(buf).set(slowBase64(s.slice(blocks * 16)), blocks * 12);
  return new Uint8Array(buf, 0, nbytes);
}

// Decodes `blocks` blocks of 16 characters of s from character `at` into
// o (3 words a block; little-endian machines only). No padding inside.
function decodeBlocks(s, at, blocks, o) {
  if (!pairs) {
    pairs = new Uint16Array(1 << 16);
    for (let i = 0; i < 64; i++)
      for (let j = 0; j < 64; j++) pairs[(B64.charCodeAt(i) << 8) | B64.charCodeAt(j)] = (i << 6) | j;
  }
  const T = pairs;
  for (let i = at, k = 0, n = blocks * 3; k < n; i += 16, k += 3) {
    const x1 = (T[(s.charCodeAt(i) << 8) | s.charCodeAt(i + 1)] << 12) | T[(s.charCodeAt(i + 2) << 8) | s.charCodeAt(i + 3)];
    const x2 = (T[(s.charCodeAt(i + 4) << 8) | s.charCodeAt(i + 5)] << 12) | T[(s.charCodeAt(i + 6) << 8) | s.charCodeAt(i + 7)];
    const x3 = (T[(s.charCodeAt(i + 8) << 8) | s.charCodeAt(i + 9)] << 12) | T[(s.charCodeAt(i + 10) << 8) | s.charCodeAt(i + 11)];
    const x4 = (T[(s.charCodeAt(i + 12) << 8) | s.charCodeAt(i + 13)] << 12) | T[(s.charCodeAt(i + 14) << 8) | s.charCodeAt(i + 15)];
    // each x holds three bytes, first byte highest; the words are little-endian
    o[k] = (x1 >>> 16) | (((x1 >>> 8) & 255) << 8) | ((x1 & 255) << 16) | ((x2 >>> 16) << 24);
    o[k + 1] = ((x2 >>> 8) & 255) | ((x2 & 255) << 8) | ((x3 >>> 16) << 16) | (((x3 >>> 8) & 255) << 24);
    o[k + 2] = (x3 & 255) | ((x4 >>> 16) << 8) | (((x4 >>> 8) & 255) << 16) | ((x4 & 255) << 24);
  }
}

// Rows r0 ... r1 - 1 of a base64 float32 tensor of rows `width` floats
// wide, decoded a few rows at a time into one small buffer: fn(r, f, at)
// gets row r as f[at ... at + width - 1], valid only during the call. The
// whole tensor never exists decoded: a 134 MB reply is read once, from
// cache-sized pieces, and no memory is touched for the first time.
export function base64Rows(s, width, r0, r1, fn) {
  if (!littleEndian) {
    const f = bytesToFloat32(base64ToBytes(s));
    for (let r = r0; r < r1; r++) fn(r, f, r * width);
    return;
  }
  // R rows, a multiple of 3: R * width * 4 bytes is a multiple of 12 and
  // each piece starts on a block of 16 characters
  const R = 3 * Math.max(1, Math.floor(4096 / width));
  const words = new Uint32Array(R * width), f = new Float32Array(words.buffer);
  for (let s0 = r0 - (r0 % 3); s0 < r1; s0 += R) {
    const rows = Math.min(R, r1 - s0), at = (s0 * width * 16) / 3;
    const bytes = rows * width * 4, chars = Math.ceil(bytes / 3) * 4;
    if (bytes % 12 === 0 && at + chars < s.length) {
      decodeBlocks(s, at, bytes / 12, words);
    } else {
      new Uint8Array(words.buffer).set(slowBase64(s.slice(at, at + chars)).subarray(0, bytes));
    }
    for (let k = Math.max(0, r0 - s0); k < rows; k++) fn(s0 + k, f, k * width);
  }
}

// The browser's decoder where it has one, else atob.
function slowBase64(s) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(s);
  const bin = atob(s);
  const n = bin.length, u = new Uint8Array(n);
  for (let i = 0; i < n; i++) u[i] = bin.charCodeAt(i);
  return u;
}

export function bytesToBase64(u) {
  if (typeof u.toBase64 === "function") return u.toBase64();
  let s = "";
  for (let i = 0; i < u.length; i += 0x8000)
    s += String.fromCharCode.apply(null, u.subarray(i, i + 0x8000));
  return btoa(s);
}

// Little-endian float32 bytes as a Float32Array (a view where the machine
// is little-endian, as every browser's is; a copy otherwise).
export function bytesToFloat32(u) {
  if (u.byteLength % 4) throw new Error(`${u.byteLength} bytes are not float32s`);
  if (littleEndian && u.byteOffset % 4 === 0)
    return new Float32Array(u.buffer, u.byteOffset, u.byteLength / 4);
  const dv = new DataView(u.buffer, u.byteOffset, u.byteLength);
  const f = new Float32Array(u.byteLength / 4);
  for (let i = 0; i < f.length; i++) f[i] = dv.getFloat32(4 * i, true);
  return f;
}

// Little-endian float16 or bfloat16 bytes (`return.dtype`: two bytes an
// element) as a Float32Array.
export function halfToFloat32(u, dtype) {
  if (u.byteLength % 2) throw new Error(`${u.byteLength} bytes are not ${dtype}s`);
  const n = u.byteLength / 2, f = new Float32Array(n);
  if (dtype === "bfloat16") {
    const w = new Uint32Array(f.buffer); // the top half of a float32
    for (let i = 0; i < n; i++) w[i] = ((u[2 * i + 1] << 8) | u[2 * i]) << 16;
    return f;
  }
  for (let i = 0; i < n; i++) {
    const h = (u[2 * i + 1] << 8) | u[2 * i], e = (h >> 10) & 31, m = h & 1023;
    const v = e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (1024 + m) * 2 ** (e - 25);
    f[i] = h & 0x8000 ? -v : v;
  }
  return f;
}

export function float32ToBytes(f) {
  if (littleEndian) return new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
  const u = new Uint8Array(f.length * 4), dv = new DataView(u.buffer);
  f.forEach((v, i) => dv.setFloat32(4 * i, v, true));
  return u;
}

// The API's base64 form of a float32 tensor.
export function base64Tensor(f, shape) {
  return { shape, dtype: "float32", base64: bytesToBase64(float32ToBytes(f)) };
}

// A tensor in any of the API's forms (nested arrays, {shape, data},
// {shape, dtype, base64}) as {shape, data}: data a Float32Array, or for a
// bool base64 tensor a Uint8Array; booleans in arrays read as 0/1.
export function readTensor(t) {
  if (t == null) throw new Error("no tensor");
  if (typeof t === "number" || typeof t === "boolean") return { shape: [], data: Float32Array.of(+t) };
  if (Array.isArray(t)) {
    const shape = [];
    for (let a = t; Array.isArray(a); a = a[0]) shape.push(a.length);
    const n = shape.reduce((p, d) => p * d, 1);
    const data = new Float32Array(n);
    let k = 0;
    (function walk(a, d) {
      if (d === shape.length) { data[k++] = +a; return; }
      if (!Array.isArray(a) || a.length !== shape[d]) throw new Error("a ragged tensor");
      for (const x of a) walk(x, d + 1);
    })(t, 0);
    return { shape, data };
  }
  const shape = t.shape;
  if (!Array.isArray(shape)) throw new Error("a tensor without a shape");
  if (typeof t.base64 === "string") {
    const bytes = base64ToBytes(t.base64);
    if (t.dtype === "int32") {
      const c = new Uint8Array(bytes); // aligned, little-endian as the host
      return { shape, data: new Int32Array(c.buffer, 0, c.length >> 2) };
    }
    if (t.dtype === "float16" || t.dtype === "bfloat16") return { shape, data: halfToFloat32(bytes, t.dtype) };
    return { shape, data: t.dtype === "bool" ? bytes : bytesToFloat32(bytes) };
  }
  if (Array.isArray(t.data)) return { shape, data: Float32Array.from(t.data, Number) };
  throw new Error("a tensor in no form the API has");
}

// ---- base64url text (the fragment's req) ------------------------------

export function toBase64url(text) {
  return bytesToBase64(new TextEncoder().encode(text))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function fromBase64url(s) {
  let b = s.replace(/-/g, "+").replace(/_/g, "/");
  while (b.length % 4) b += "=";
  return new TextDecoder().decode(base64ToBytes(b));
}

// ---- the fragment ------------------------------------------------------

// The page's whole state, and its defaults. A key at its default is left
// out of the fragment. See docs/ui.md for each key.
export const DEFAULTS = Object.freeze({
  tab: "attention",    // attention | service
  mode: "",            // layer | inline | json; none: nothing to run
  layer: "",           // layer mode: its name
  E: 64, H: 4, Hkv: 4, // inline mode: widths and head counts
  tokens: "",          // whitespace-separated labels (wins over L)
  L: 16,               // length, when tokens is blank
  lq: "",              // queries: the last lq positions; blank: all
  seed: 1,
  causal: "none",      // none | bottom_right | top_left
  wl: "", wr: "",      // mask.window.left / right; blank: none
  kl: "",              // mask.key_lengths [kl]; blank: none
  scale: "",           // the request's scale; blank: 1/sqrt(Dh)
  weights: "per_head", // per_head | mean
  zoom: "",            // past DENSE_L: "q0-q1,k0-k1", the block shown; blank: all
  req: null,           // json mode: the request object
  head: "0",           // the enlarged map: a head index, or "mean"
  lock: false,         // the enlarged map stays on hover elsewhere
  colour: "max",       // max | one | sqrt | log
  batch: 0,            // json mode: which batch row is drawn
});

const NUMERIC = new Set(["E", "H", "Hkv", "L", "seed", "batch"]);

// The fragment ("#a=b&...", or "") as a full state.
export function parseFragment(hash) {
  const s = { ...DEFAULTS };
  const p = new URLSearchParams((hash || "").replace(/^#/, ""));
  for (const [k, v] of p) {
    if (!(k in DEFAULTS)) continue;
    if (k === "req") s.req = JSON.parse(fromBase64url(v));
    else if (k === "lock") s.lock = v === "1" || v === "true";
    else if (NUMERIC.has(k)) s[k] = Number(v);
    else s[k] = v;
  }
  if (s.req && !p.has("mode")) s.mode = "json";
  return s;
}

// The fragment of a state, without the "#": only keys off their default,
// in DEFAULTS' order; req only in json mode.
export function formatFragment(state) {
  const p = new URLSearchParams();
  for (const k of Object.keys(DEFAULTS)) {
    const v = state[k];
    if (k === "req") {
      if (state.mode === "json" && v) p.set("req", toBase64url(JSON.stringify(v)));
      continue;
    }
    if (v === undefined || v === null || String(v) === String(DEFAULTS[k])) continue;
    p.set(k, k === "lock" ? (v ? "1" : "0") : String(v));
  }
  return p.toString();
}

// ---- the mask a request sets -----------------------------------------

// Which (query, key) cells of batch row b and head h are masked, as the
// server decides it (docs/api.md): causal, window and key_lengths leave
// each query row one interval of keys [lo[i], hi[i]], and mask.allow,
// broadcast to [B, H, Lq, Lk], masks more where it is false. bias, ALiBi
// and softcap change scores but mask nothing. `layerCausal` and
// `layerWindow` are the layer's defaults when the request names a layer
// and sets no causal, no window ({} sets none).
export function maskOf(req, Lq, Lk, layerCausal, layerWindow) {
  const m = (req && req.mask) || {};
  let causal = m.causal;
  if (causal === undefined && req && req.layer) causal = layerCausal;
  if (causal === true) causal = "bottom_right";
  if (causal === "none") causal = false;
  const win = m.window || (req && req.layer && layerWindow) || null;
  const num = (x) => (x === undefined || x === null ? null : Number(x));
  const left = win ? num(win.left) : null, right = win ? num(win.right) : null;
  const lengths = m.key_lengths ? readTensor(m.key_lengths).data : null;
  const allow = m.allow !== undefined ? readTensor(m.allow) : null;
  const off = Lk - Lq;
  return {
    causal: causal || false, left, right, lengths, allow: !!allow,
    // the interval of keys query i of batch b may see, before allow
    rows(b) {
      const lo = new Int32Array(Lq), hi = new Int32Array(Lq);
      for (let i = 0; i < Lq; i++) {
        let a = 0, z = Lk - 1;
        if (causal === "bottom_right") z = Math.min(z, i + off);
        else if (causal === "top_left") z = Math.min(z, i);
        if (left !== null) a = Math.max(a, i + off - Math.min(left, 1e9));
        if (right !== null) z = Math.min(z, i + off + Math.min(right, 1e9));
        if (lengths) z = Math.min(z, lengths[Math.min(b, lengths.length - 1)] - 1);
        lo[i] = a; hi[i] = z;
      }
      return { lo, hi };
    },
    // null without allow; else (h, i, j) -> true when allowed, in batch b
    allowed(b) {
      if (!allow) return null;
      const sh = allow.shape.slice(-4);
      while (sh.length < 4) sh.unshift(1);
      const st = [sh[1] * sh[2] * sh[3], sh[2] * sh[3], sh[3], 1];
      const d = allow.data;
      const bo = sh[0] === 1 ? 0 : b * st[0];
      return (h, i, j) =>
        d[bo + (sh[1] === 1 ? 0 : h * st[1]) + (sh[2] === 1 ? 0 : i * st[2]) +
          (sh[3] === 1 ? 0 : j * st[3])] !== 0;
    },
  };
}

// ---- downsampling --------------------------------------------------------

// Max-pools the [Lq, Lk] map at w[base ...] into cells of rb queries by cb
// keys: each cell holds the largest weight of its unmasked (query, key)
// pairs, or NaN when all of them are masked. lo/hi: each query's interval
// of keys (maskOf().rows); allowed: null, or (i, j) -> false where masked.
// Returns {data: Float32Array [nr * nc], nr, nc, rb, cb}.
export function poolMap(w, base, Lq, Lk, rb, cb, lo, hi, allowed) {
  const nr = Math.ceil(Lq / rb), nc = Math.ceil(Lk / cb);
  const out = new Float32Array(nr * nc).fill(NaN);
  for (let i = 0; i < Lq; i++) {
    const o = ((i / rb) | 0) * nc, row = base + i * Lk;
    const z = Math.min(Lk - 1, hi[i]);
    let j = Math.max(0, lo[i]);
    while (j <= z) {
      const c = (j / cb) | 0, end = Math.min(z, (c + 1) * cb - 1);
      let mx = -Infinity;
      if (allowed) {
        for (; j <= end; j++) if (allowed(i, j) && w[row + j] > mx) mx = w[row + j];
      } else {
        for (; j <= end; j++) if (w[row + j] > mx) mx = w[row + j];
      }
      const cur = out[o + c];
      if (mx > -Infinity && !(cur >= mx)) out[o + c] = mx;
    }
  }
  return { data: out, nr, nc, rb, cb };
}

// poolMap for the H maps of one batch row ([H, Lq, Lk], from row `row0`
// of the weights seen as rows of Lk) and for their mean, in one pass: src
// is {data: Float32Array} or {base64: text} (read by base64Rows, never
// decoded whole). allowedOf: null, or h -> (i, j) -> false where masked;
// the mean's cell is masked where every head's is. A masked weight is 0
// in the reply, so leaving it out of the mean's sum changes nothing.
// Returns {heads: [pooled ...], mean: pooled}.
export function poolHeads(src, row0, H, Lq, Lk, rb, cb, lo, hi, allowedOf) {
  const nr = Math.ceil(Lq / rb), nc = Math.ceil(Lk / cb);
  const heads = Array.from({ length: H }, () => new Float32Array(nr * nc).fill(NaN));
  const sum = new Float32Array(Lq * Lk);
  const allowed = allowedOf ? Array.from({ length: H }, (_, h) => allowedOf(h)) : null;
  const row = (r, w, at) => {
    const k = r - row0, h = (k / Lq) | 0, i = k % Lq;
    const a = Math.max(0, lo[i]), z = Math.min(Lk - 1, hi[i]);
    const out = heads[h], f = allowed && allowed[h], o = ((i / rb) | 0) * nc, s = i * Lk;
    let j = a;
    while (j <= z) {
      const c = (j / cb) | 0, end = Math.min(z, (c + 1) * cb - 1);
      let mx = -Infinity;
      if (f) {
        for (; j <= end; j++) {
          const v = w[at + j];
          sum[s + j] += v;
          if (v > mx && f(i, j)) mx = v;
        }
      } else {
        for (; j <= end; j++) {
          const v = w[at + j];
          sum[s + j] += v;
          if (v > mx) mx = v;
        }
      }
      const cur = out[o + c];
      if (mx > -Infinity && !(cur >= mx)) out[o + c] = mx;
    }
  };
  if (src.data) for (let r = row0; r < row0 + H * Lq; r++) row(r, src.data, r * Lk);
  else base64Rows(src.base64, Lk, row0, row0 + H * Lq, row);
  for (let k = 0; k < sum.length; k++) sum[k] /= H;
  const any = allowed && ((i, j) => allowed.some((f) => f(i, j)));
  const pooled = (data) => ({ data, nr, nc, rb, cb });
  return { heads: heads.map(pooled), mean: poolMap(sum, 0, Lq, Lk, rb, cb, lo, hi, any) };
}

// A pooled map pooled again by fr rows and fc columns of its cells.
export function repool(p, fr, fc) {
  if (fr === 1 && fc === 1) return p;
  const nr = Math.ceil(p.nr / fr), nc = Math.ceil(p.nc / fc);
  const out = new Float32Array(nr * nc).fill(NaN);
  for (let r = 0; r < p.nr; r++)
    for (let c = 0; c < p.nc; c++) {
      const v = p.data[r * p.nc + c], k = ((r / fr) | 0) * nc + ((c / fc) | 0);
      if (v === v && !(out[k] >= v)) out[k] = v;
    }
  return { data: out, nr, nc, rb: p.rb * fr, cb: p.cb * fc };
}

// The largest value of a pooled map, NaN cells left out; 0 when none.
export function poolMax(p) {
  let m = 0;
  for (const v of p.data) if (v > m) m = v;
  return m;
}

// ---- the colour scale ---------------------------------------------------

// viridis (matplotlib's), at 0, 0.1, ... 1, interpolated into 256 steps.
const VIRIDIS = ["440154", "482475", "414487", "355f8d", "2a788e", "21918c",
  "22a884", "44bf70", "7ad151", "bddf26", "fde725"].map((h) =>
  [0, 2, 4].map((k) => parseInt(h.slice(k, k + 2), 16)));
export const LUT = Array.from({ length: 256 }, (_, i) => {
  const x = (i / 255) * 10, k = Math.min(9, Math.floor(x)), f = x - k;
  return VIRIDIS[k].map((a, c) => Math.round(a + (VIRIDIS[k + 1][c] - a) * f));
});
// Masked cells: a grey that viridis never takes.
export const MASKED = [208, 208, 208];

// Where weight w sits on the scale [0, 1]: "one" is w itself, "max" is
// w / max (max: the largest weight in the maps shown), "sqrt" its square
// root, "log" log10(w / max) over the LOG_DECADES below max (less is 0).
export const LOG_DECADES = 3;
export function scalePos(w, mode, max) {
  const top = mode === "one" || !(max > 0) ? 1 : max;
  const t = Math.min(1, Math.max(0, w / top));
  if (mode === "sqrt") return Math.sqrt(t);
  if (mode === "log") return t > 0 ? Math.max(0, 1 + Math.log10(t) / LOG_DECADES) : 0;
  return t;
}

// The [r, g, b] of weight w (NaN: masked) under the scale.
export function colourOf(w, mode, max) {
  if (w !== w) return MASKED;
  return LUT[Math.round(scalePos(w, mode, max) * 255)];
}

// The weight at scale position t (the legend's ticks).
export function weightAt(t, mode, max) {
  const top = mode === "one" || !(max > 0) ? 1 : max;
  if (mode === "log") return top * Math.pow(10, (t - 1) * LOG_DECADES);
  return (mode === "sqrt" ? t * t : t) * top;
}

// A weight as the page prints it.
export function formatWeight(w) {
  if (w !== w) return "masked";
  if (w === 0) return "0";
  return Math.abs(w) >= 0.001 ? w.toFixed(4) : w.toExponential(2);
}

// ---- Prometheus text -----------------------------------------------------

// Samples of the text format: [{name, labels: {k: v}, value}], comments
// and malformed lines skipped.
export function parseMetrics(text) {
  const out = [];
  const re = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/;
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = re.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const kv of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[kv[1]] = kv[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    const value = m[4] === "+Inf" ? Infinity : m[4] === "-Inf" ? -Infinity : Number(m[4]);
    out.push({ name: m[1], labels, value });
  }
  return out;
}

// The sum of the samples named `name` whose labels pass `keep`, grouped
// by the label `by` (or under "" without one): {value of by: sum}.
export function sumBy(samples, name, by, keep) {
  const g = {};
  for (const s of samples) {
    if (s.name !== name || (keep && !keep(s.labels))) continue;
    const k = by ? s.labels[by] : "";
    g[k] = (g[k] || 0) + s.value;
  }
  return g;
}

// The q-quantile of a histogram's buckets [[le, cumulative count], ...]
// (le ascending, +Inf last), as Prometheus' histogram_quantile: linear
// within the bucket it falls in, the last finite bound when it falls in
// +Inf. null when the histogram is empty.
export function histogramQuantile(q, buckets) {
  if (!buckets.length) return null;
  const total = buckets[buckets.length - 1][1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      if (le === Infinity) return prevLe;
      if (count === prevCount) return le;
      return prevLe + ((le - prevLe) * (rank - prevCount)) / (count - prevCount);
    }
    prevLe = le; prevCount = count;
  }
  return prevLe;
}

// ---- weights at any length (return.weights as an object) ---------------

// The block a zoom names ("q0-q1,k0-k1", half-open) inside Lq queries and
// Lk keys, or the whole map for "" or anything else.
export function parseZoom(z, Lq, Lk) {
  const m = /^(\d+)-(\d+),(\d+)-(\d+)$/.exec(z || "");
  const all = { q0: 0, q1: Lq, k0: 0, k1: Lk };
  if (!m) return all;
  const [q0, q1, k0, k1] = m.slice(1).map(Number);
  if (!(q0 < q1 && q1 <= Lq && k0 < k1 && k1 <= Lk)) return all;
  return { q0, q1, k0, k1 };
}

export function formatZoom(z) {
  return `${z.q0}-${z.q1},${z.k0}-${z.k1}`;
}

// The pooled map of one head (data: nq x nk, from weights_pooled) as the
// page's pooled maps are: a block is NaN where the mask leaves it no key
// (lo/hi: each query's interval of keys, as maskOf().rows, hi inclusive),
// else the server's value (the largest weight in the block). The blocks
// start at the zoom's first query q0 and key k0.
export function maskPooled(data, nq, nk, rb, cb, z, lo, hi) {
  const out = Float32Array.from(data);
  for (let r = 0; r < nq; r++) {
    const a = z.q0 + r * rb, b = Math.min(z.q1, a + rb);
    let mn = Infinity, mx = -Infinity;
    for (let i = a; i < b; i++) {
      if (hi[i] < lo[i]) continue; // a row that sees nothing
      mn = Math.min(mn, lo[i]);
      mx = Math.max(mx, hi[i]);
    }
    for (let c = 0; c < nk; c++) {
      const ka = z.k0 + c * cb, kb = Math.min(z.k1, ka + cb) - 1;
      if (mx < ka || mn > kb) out[r * nk + c] = NaN;
    }
  }
  return { data: out, nr: nq, nc: nk, rb, cb };
}

// The zoom 4x into z around query i and key j: each side a quarter as
// long (at least ZOOM_MIN positions), inside z; null when both sides are
// that short already.
export const ZOOM_MIN = 16;
export function zoomAround(z, i, j) {
  const side = (a, b, x) => {
    const n = Math.max(Math.min(ZOOM_MIN, b - a), Math.ceil((b - a) / 4));
    const lo = Math.min(Math.max(a, x - (n >> 1)), b - n);
    return [lo, lo + n];
  };
  if (z.q1 - z.q0 <= ZOOM_MIN && z.k1 - z.k0 <= ZOOM_MIN) return null;
  const [q0, q1] = side(z.q0, z.q1, i), [k0, k1] = side(z.k0, z.k1, j);
  return { q0, q1, k0, k1 };
}
