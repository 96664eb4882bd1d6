// ui/heatmap.js: drawing pooled attention maps (core.js's poolMap) onto
// canvases, their axes of token labels, and the colour legend. Only this
// file writes pixels.
import { LUT, MASKED, scalePos, weightAt } from "./core.js";

// The cell size in canvas pixels for a map of nr x nc cells drawn within
// `room` pixels a side: whole pixels, at most `cap`, and cells kept near
// square (neither side more than `square` pixels past the other's).
export function cellSize(nr, nc, room, cap, square) {
  let cw = Math.max(1, Math.min(cap, Math.floor(room / nc)));
  let ch = Math.max(1, Math.min(cap, Math.floor(room / nr)));
  cw = Math.min(cw, Math.max(ch, square));
  ch = Math.min(ch, Math.max(cw, square));
  return { cw, ch };
}

// Draws pooled map p on `canvas`, cw x ch canvas pixels a cell, with the
// colour scale (mode, max). Resizes the canvas.
export function drawMap(canvas, p, cw, ch, mode, max) {
  const W = p.nc * cw, H = p.nr * ch;
  if (canvas.width !== W) canvas.width = W;
  if (canvas.height !== H) canvas.height = H;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const img = ctx.createImageData(W, H);
  const px = new Uint32Array(img.data.buffer);
  // one packed RGBA word per colour: the 256 steps, and masked
  const pack = ([r, g, b]) => ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
  const lut = new Uint32Array(256);
  for (let i = 0; i < 256; i++) lut[i] = pack(LUT[i]);
  const masked = pack(MASKED);
  for (let r = 0; r < p.nr; r++) {
    for (let c = 0; c < p.nc; c++) {
      const v = p.data[r * p.nc + c];
      const colour = v !== v ? masked : lut[Math.round(scalePos(v, mode, max) * 255)];
      for (let y = r * ch, y1 = y + ch; y < y1; y++) {
        const o = y * W + c * cw;
        px.fill(colour, o, o + cw);
      }
    }
  }
  ctx.putImageData(img, 0, 0);
}

// The legend: the 256 steps left to right, and tick labels under them.
export function drawLegend(canvas, ticks, mode, max) {
  const ctx = canvas.getContext("2d");
  for (let x = 0; x < 256; x++) {
    const [r, g, b] = LUT[x];
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(x, 0, 1, canvas.height);
  }
  ticks.textContent = "";
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    const s = document.createElement("span");
    const w = weightAt(t, mode, max);
    s.textContent = mode === "log" && t === 0 ? `≤ ${Number(w.toPrecision(2))}` : String(Number(w.toPrecision(2)));
    s.style.left = `${t * 100}%`;
    ticks.appendChild(s);
  }
}

// Labels along one axis: `n` cells of `size` CSS pixels, each covering
// `per` positions; labels[i] is position i's text. Labels are kept at
// least `gap` pixels apart, each at the middle of the cell it names; a
// pooled axis is labelled by the first position of each labelled cell,
// counted from `offset` (a zoomed map's first position).
export function drawAxis(el, n, size, per, labels, gap, vertical, offset = 0) {
  el.textContent = "";
  const step = niceStep(Math.ceil(gap / size), per, n);
  for (let c = 0; c < n; c += step) {
    const s = document.createElement("span");
    const i = c * per;
    s.textContent = per === 1 && labels[i] !== undefined ? labels[i] : String(i + offset);
    const at = `${(c + 0.5) * size}px`;
    if (vertical) s.style.top = at;
    else s.style.left = at;
    s.classList.add("centred");
    el.appendChild(s);
  }
}

// The smallest step of cells, at least `raw`, whose positions (step * per)
// are 1, 2 or 5 times a power of ten: labels at 0, 10, 20 ... or 0, 50, 100.
// Where no such step is shorter than the axis's n cells (per = 3, 7, 32:
// no power of ten is a multiple), a step of 1, 2 or 5 times a power of ten
// cells, so that the axis still has its labels.
function niceStep(raw, per, n) {
  if (raw <= 1) return 1;
  for (let e = 1; e < n * per; e *= 10)
    for (const m of [1, 2, 5]) {
      const s = (m * e) / per;
      if (s >= n) break;
      if ((m * e) % per === 0 && s >= raw) return s;
    }
  for (let e = 1; ; e *= 10) for (const m of [1, 2, 5]) if (m * e >= raw) return m * e;
}
