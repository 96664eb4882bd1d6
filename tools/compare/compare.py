#!/usr/bin/python3
"""Cross-checks attnd's resident layers against PyTorch (`make compare`).

Writes layers as safetensors with tools/st_save.py (no safetensors
package), serves them with a real attnd, and compares its replies with
float64 references:

  mha      torch.nn.MultiheadAttention (E=64, H=8, biases) run by PyTorch
           itself in float64, without and with a causal mask;
  xattn    torch.nn.MultiheadAttention with kdim=48, vdim=80 (E=64, H=8),
           with biases and without, run by PyTorch itself in float64:
           through /v1 and OIP over 23 queries and 31 keys, through a
           session's step (causal), and its widths as GET /v1/layers
           lists them;
  llama    a Llama-family attention layer written here in plain torch from
           the published formulas (GQA H=8 / Hkv=2, Dh=16, RoPE rotate_half)
           in three variants: Qwen2-style q/k/v biases with partial rotary
           0.5, llama3 rope_scaling (BF16 weights), and Qwen3-style per-head
           q_norm / k_norm; each at explicit positions (gapped, from 1000,
           differing per batch item and between queries and keys: RoPE sees
           only their differences) and at the default ones, causal by the layer's default; and the layer as
           GET /v1/layers lists it.

Every reference is float64, from the very weights and inputs attnd holds
(the float32 inputs, the BF16-rounded weights), with the rotary angles in
float64 (attnd's exact math; Hugging Face's float32 angles differ by ~1e-4
at positions in the thousands). So each error measures attnd alone.

The error of a case is the largest relative error ||a - b||_2 / ||b||_2 over
the batch items (output) and over the (batch item, head) pairs (weights).
Uses the standard library and torch only; run with /usr/bin/python3, whose
Debian PyTorch (python3-torch) it needs. Exits 1 if any case fails.
"""

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

try:
    import torch
except ImportError:
    sys.exit("compare.py needs PyTorch: apt-get install -y python3-torch "
             "(and run it with /usr/bin/python3)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import st_save  # noqa: E402  (tools/st_save.py)

TOL = 1e-5
REQUEST_TIMEOUT_S = 30
START_TIMEOUT_S = 15
DT = torch.float64


# ---- safetensors, through tools/st_save.py ---------------------------------

TORCH_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16}


def stored(t, dtype):
    """The float64 values attnd reads back from t stored as dtype."""
    return t.detach().to(TORCH_DTYPES[dtype]).to(DT)


def write_safetensors(path, tensors, dtype, metadata=None):
    """tensors: {name: tensor}, all stored as dtype (torch rounds BF16 to
    nearest even), contiguous, in order."""
    st_save.save_file({n: t.detach().to(TORCH_DTYPES[dtype])
                       for n, t in tensors.items()}, path, metadata)


# ---- the server -------------------------------------------------------------

class Server:
    """build/attnd on a free loopback port, serving `layers`; always stopped
    on leaving the with block."""

    def __init__(self, attnd, layers, logdir, tag):
        self.log_path = os.path.join(logdir, tag + ".log")
        self.args = [attnd, "--host", "127.0.0.1", "--port", "0",
                     "--workers", "1", "--http-threads", "2",
                     "--layers", layers]
        self.proc, self.port = None, None

    def __enter__(self):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in self.log_text().splitlines():
                if '"event":"listening"' in line:
                    self.port = json.loads(line)["port"]
                    return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("attnd did not start (%s):\n%s"
                           % (" ".join(self.args), self.log_text()[-2000:]))

    def __exit__(self, *exc):
        self.stop()

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            "http://127.0.0.1:%d%s" % (self.port, path), data=data,
            method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                text = r.read()
                return json.loads(text) if text else None  # 204: none
        except urllib.error.HTTPError as e:
            raise RuntimeError("%s %s: HTTP %d: %s" % (
                method, path, e.code, e.read().decode(errors="replace")))

    def attention(self, body):
        reply = self.request("POST", "/v1/attention", body)
        return (torch.tensor(reply["output"], dtype=DT),
                torch.tensor(reply["weights"], dtype=DT))


# ---- errors -----------------------------------------------------------------

def max_rel(got, want, dims):
    """The largest ||got - want|| / ||want|| over the leading `dims` axes."""
    if tuple(got.shape) != tuple(want.shape):
        raise RuntimeError("shape %s, expected %s"
                           % (list(got.shape), list(want.shape)))
    g = got.reshape(*want.shape[:dims], -1)
    w = want.reshape(*want.shape[:dims], -1)
    return ((g - w).norm(dim=-1) / w.norm(dim=-1)).max().item()


# ---- nn.MultiheadAttention --------------------------------------------------

def mha_cases(attnd, tmp):
    E, H, B, L = 64, 8, 2, 37
    torch.manual_seed(1201)
    mha = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True)
    with torch.no_grad():  # the default init zeroes the biases
        mha.in_proj_bias.copy_(torch.randn(3 * E) * 0.1)
        mha.out_proj.bias.copy_(torch.randn(E) * 0.1)
    sd = {"mha." + k: v for k, v in mha.state_dict().items()}
    plain = os.path.join(tmp, "mha.safetensors")
    write_safetensors(plain, sd, "F32", {"num_heads": H})
    # The same layer, causal by default (metadata "causal").
    sd_c = {"mhc." + k: v for k, v in mha.state_dict().items()}
    causal_file = os.path.join(tmp, "mhc.safetensors")
    write_safetensors(causal_file, sd_c, "F32",
                      {"num_heads": H, "causal": "bottom_right"})

    ref = mha.double()  # F32 weights: the same values in float64
    q, k, v = (torch.randn(B, L, E) for _ in range(3))  # float32, as sent
    mask = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)

    def run_torch(attn_mask):
        with torch.no_grad():
            out, w = ref(q.double(), k.double(), v.double(), need_weights=True,
                         average_attn_weights=False, attn_mask=attn_mask)
        return out, w

    base = {"query": q.tolist(), "key": k.tolist(), "value": v.tolist(),
            "return": {"weights": "per_head"}}
    cases = [
        ("mha E=64 H=8 F32 no mask", "mha", {"causal": False}, None),
        ("mha E=64 H=8 F32 causal", "mha", {"causal": "bottom_right"}, mask),
        ("mha E=64 H=8 F32 layer-default causal", "mhc", None, mask),
    ]
    rows = []
    with Server(attnd, plain + "," + causal_file, tmp, "mha") as srv:
        for name, layer, m, attn_mask in cases:
            body = dict(base, layer=layer)
            if m is not None:
                body["mask"] = m
            rows.append(compare(name, lambda: srv.attention(body),
                                lambda: run_torch(attn_mask)))
    return rows


# ---- cross-attention: nn.MultiheadAttention with kdim and vdim -------------

def cross_cases(attnd, tmp):
    """nn.MultiheadAttention(E=64, H=8, kdim=48, vdim=80), with biases and
    without: /v1 and OIP over Lq = 23 queries and Lk = 31 keys, a session's
    step (causal over its own keys), and the listing's widths."""
    E, H, Ek, Ev, B, Lq, Lk = 64, 8, 48, 80, 2, 23, 31
    torch.manual_seed(1301)
    rows = []
    files, mods = [], {}
    for name, bias in (("xattn", True), ("xattn_nobias", False)):
        m = torch.nn.MultiheadAttention(E, H, bias=bias, kdim=Ek, vdim=Ev,
                                        batch_first=True)
        if bias:
            with torch.no_grad():  # the default init zeroes the biases
                m.in_proj_bias.copy_(torch.randn(3 * E) * 0.1)
                m.out_proj.bias.copy_(torch.randn(E) * 0.1)
        path = os.path.join(tmp, name + ".safetensors")
        write_safetensors(path, {name + "." + k: v
                                 for k, v in m.state_dict().items()},
                          "F32", {"num_heads": H})
        files.append(path)
        mods[name] = m.double()  # F32 weights: the same values in float64
    q = torch.randn(B, Lq, E)
    k = torch.randn(B, Lk, Ek)
    v = torch.randn(B, Lk, Ev)

    def run_torch(m, q, k, v, attn_mask=None):
        with torch.no_grad():
            return m(q.double(), k.double(), v.double(), need_weights=True,
                     average_attn_weights=False, attn_mask=attn_mask)

    def oip(srv, name):
        inputs = [{"name": n, "datatype": "FP32", "shape": list(t.shape),
                   "data": t.flatten().tolist()}
                  for n, t in (("query", q), ("key", k), ("value", v))]
        reply = srv.request("POST", "/v2/models/%s/infer" % name, {
            "inputs": inputs,
            "outputs": [{"name": "output"}, {"name": "weights"}]})
        out = {o["name"]: torch.tensor(o["data"], dtype=DT).reshape(
            o["shape"]) for o in reply["outputs"]}
        return out["output"], out["weights"]

    def session(srv, name, L):
        sid = srv.request("POST", "/v1/sessions", {"layer": name})["session"]
        reply = srv.request("POST", "/v1/sessions/%s/attention" % sid, {
            "query": q[0, :L].tolist(), "key": k[0, :L].tolist(),
            "value": v[0, :L].tolist(), "return": {"weights": "per_head"}})
        srv.request("DELETE", "/v1/sessions/%s" % sid)
        return (torch.tensor(reply["output"], dtype=DT).unsqueeze(0),
                torch.tensor(reply["weights"], dtype=DT).unsqueeze(0))

    L = 17
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    with Server(attnd, ",".join(files), tmp, "xattn") as srv:
        for name in mods:
            m = mods[name]
            label = "xattn E=64 H=8 kdim=48 vdim=80 %s F32" % (
                "biases" if name == "xattn" else "no biases")
            body = {"layer": name, "query": q.tolist(), "key": k.tolist(),
                    "value": v.tolist(), "return": {"weights": "per_head"}}
            rows.append(compare(label + " /v1 Lq=23 Lk=31",
                                lambda: srv.attention(body),
                                lambda: run_torch(m, q, k, v)))
            rows.append(compare(label + " OIP",
                                lambda: oip(srv, name),
                                lambda: run_torch(m, q, k, v)))
            rows.append(compare(
                label + " session step L=17 causal",
                lambda: session(srv, name, L),
                lambda: run_torch(m, q[:1, :L], k[:1, :L], v[:1, :L],
                                  causal)))
            info = srv.request("GET", "/v1/layers/" + name)
            rows.append(check_listing(label + ", GET /v1/layers/" + name,
                                      {"layers": [info]}, {
                                          "name": name,
                                          "convention": "torch_mha",
                                          "embed_dim": E, "kdim": Ek,
                                          "vdim": Ev, "num_heads": H,
                                          "head_dim": E // H,
                                          "biases.q": name == "xattn",
                                          "biases.o": name == "xattn"}))
    return rows


# ---- a Llama-family layer in plain torch ------------------------------------

def rope_inv_freq(rot, theta, scaling):
    """f_i = theta^(-2i/rot), i < rot/2, then rope_scaling (float64)."""
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=DT) / rot))
    if scaling is None:
        return inv
    if scaling["rope_type"] == "linear":
        return inv / scaling["factor"]
    assert scaling["rope_type"] == "llama3"
    # Llama 3.1 (transformers' _compute_llama3_parameters).
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, pos, inv_freq):
    """x [B, h, L, Dh]; pos [B, L]: rotates the first 2·len(inv_freq)
    features of each head (rotate_half pairs), passes the rest."""
    rot = 2 * inv_freq.numel()
    ang = pos.to(DT)[..., None] * inv_freq  # [B, L, rot/2], float64
    emb = torch.cat((ang, ang), dim=-1)[:, None]  # [B, 1, L, rot]
    xr, xp = x[..., :rot], x[..., rot:]
    xr = xr * emb.cos() + rotate_half(xr) * emb.sin()
    return torch.cat((xr, xp), dim=-1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def llama_attention(x, W, cfg, pos_q, pos_k):
    """The layer's forward in float64: x [B, L, E], positions [B, L] of the
    queries and keys; causal. Returns (output [B, L, E], weights [B, H, L,
    L])."""
    B, L, _ = x.shape
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    Dh = cfg["head_dim"]

    def proj(n, heads):
        y = x @ W[n + "_proj.weight"].T
        if n + "_proj.bias" in W:
            y = y + W[n + "_proj.bias"]
        return y.view(B, L, heads, Dh).transpose(1, 2)

    q, k, v = proj("q", H), proj("k", Hkv), proj("v", Hkv)
    if "q_norm.weight" in W:  # Qwen3: per-head RMSNorm before RoPE
        q = rms_norm(q, W["q_norm.weight"], cfg["rms_norm_eps"])
        k = rms_norm(k, W["k_norm.weight"], cfg["rms_norm_eps"])
    rot = int(Dh * cfg.get("partial_rotary_factor", 1.0))
    inv = rope_inv_freq(rot, cfg["rope_theta"], cfg.get("rope_scaling"))
    q, k = apply_rope(q, pos_q, inv), apply_rope(k, pos_k, inv)
    k = k.repeat_interleave(H // Hkv, dim=1)  # GQA: repeat_kv
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(Dh)
    s = s.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1),
                      float("-inf"))
    w = torch.softmax(s, dim=-1)
    o = (w @ v).transpose(1, 2).reshape(B, L, H * Dh)
    o = o @ W["o_proj.weight"].T
    if "o_proj.bias" in W:
        o = o + W["o_proj.bias"]
    return o, w


LLAMA_VARIANTS = [
    # (label, layer index, dtype, config extras, q/k/v biases, q/k norms)
    ("qwen2 bias, partial rotary 0.5", 0, "F32",
     {"partial_rotary_factor": 0.5}, True, False),
    ("llama3 rope_scaling", 1, "BF16",
     {"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 32}},
     True, False),
    ("qwen3 q_norm/k_norm", 2, "F32", {"rms_norm_eps": 1e-6}, False, True),
]


def llama_cases(attnd, tmp):
    E, H, Hkv, Dh, B, L = 128, 8, 2, 16, 2, 50
    rows = []
    for label, idx, dtype, extra, biases, norms in LLAMA_VARIANTS:
        torch.manual_seed(1202 + idx)
        cfg = {"model_type": "llama", "hidden_size": E,
               "num_attention_heads": H, "num_key_value_heads": Hkv,
               "head_dim": Dh, "rope_theta": 10000.0,
               "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
               "attention_bias": biases}
        cfg.update(extra)
        raw = {"q_proj.weight": torch.randn(H * Dh, E) / math.sqrt(E),
               "k_proj.weight": torch.randn(Hkv * Dh, E) / math.sqrt(E),
               "v_proj.weight": torch.randn(Hkv * Dh, E) / math.sqrt(E),
               "o_proj.weight": torch.randn(E, H * Dh) / math.sqrt(H * Dh)}
        if biases:
            raw["q_proj.bias"] = torch.randn(H * Dh) * 0.1
            raw["k_proj.bias"] = torch.randn(Hkv * Dh) * 0.1
            raw["v_proj.bias"] = torch.randn(Hkv * Dh) * 0.1
        if norms:
            raw["q_norm.weight"] = 1 + 0.2 * torch.randn(Dh)
            raw["k_norm.weight"] = 1 + 0.2 * torch.randn(Dh)
        prefix = "model.layers.%d.self_attn" % idx
        d = os.path.join(tmp, "llama%d" % idx)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        write_safetensors(os.path.join(d, "model.safetensors"),
                          {prefix + "." + n: t for n, t in raw.items()}, dtype)
        W = {n: stored(t, dtype) for n, t in raw.items()}

        x = torch.randn(B, L, E)  # float32, as sent
        # RoPE sees only q and k's position differences, so a common offset
        # is invisible: gaps that differ per batch item, and queries ahead
        # of their keys in item 1, make the positions matter.
        i = torch.arange(L)
        key_pos = torch.stack((1000 + i + i * i // 7, 2500 + 3 * i))
        query_pos = key_pos + torch.tensor([[0], [4]])
        default = i.expand(B, L)
        base = {"layer": prefix, "query": x.tolist(),
                "return": {"weights": "per_head"}}
        with Server(attnd, d, tmp, "llama%d" % idx) as srv:
            info = srv.request("GET", "/v1/layers")
            for what, pq, pk, body in (
                    ("pos 1000+i+i*i//7 / 2500+3i (+4)", query_pos, key_pos,
                     dict(base, positions={"query": query_pos.tolist(),
                                           "key": key_pos.tolist()})),
                    ("default pos", default, default, base)):
                name = "llama %s %s, %s" % (dtype, label, what)
                rows.append(compare(
                    name, lambda: srv.attention(body),
                    lambda: llama_attention(x.to(DT), W, cfg, pq, pk)))
        rows.append(check_listing(
            "llama %s %s, GET /v1/layers" % (dtype, label), info, {
                "name": prefix, "convention": "llama", "embed_dim": E,
                "num_heads": H, "num_kv_heads": Hkv, "head_dim": Dh,
                "dtype": dtype, "qk_norm": norms, "causal": "bottom_right",
                "positions.style": "half",
                "positions.dims": int(Dh * extra.get("partial_rotary_factor",
                                                     1.0)),
                "positions.scaling.type":
                    extra.get("rope_scaling", {}).get("rope_type")}))
    return rows


def check_listing(name, info, want):
    """A row: GET /v1/layers lists one layer with the `want` members (a dot
    walks into an object; None: absent or null)."""
    layers = info.get("layers", [])
    if len(layers) != 1:
        return (name, float("nan"), float("nan"), "FAIL",
                "expected one layer: " + json.dumps(info))
    bad = []
    for key, value in want.items():
        got = layers[0]
        for part in key.split("."):
            got = got.get(part) if isinstance(got, dict) else None
        if got != value:
            bad.append("%s is %r, expected %r" % (key, got, value))
    return (name, None, None, "FAIL" if bad else "PASS",
            "; ".join(bad) + (": " + json.dumps(layers[0]) if bad else ""))


# ---- the table --------------------------------------------------------------

def compare(name, attnd_run, torch_run):
    try:
        got_o, got_w = attnd_run()
        want_o, want_w = torch_run()
        eo = max_rel(got_o, want_o, 1)
        ew = max_rel(got_w, want_w, 2)
        ok = eo <= TOL and ew <= TOL
        return (name, eo, ew, "PASS" if ok else "FAIL", "")
    except Exception as e:  # one failing case does not hide the others
        return (name, float("nan"), float("nan"), "FAIL", str(e)[:2000])


def print_table(rows):
    width = max(len(r[0]) for r in rows)
    print("%-*s  %12s  %12s  %s" % (width, "case", "output rel", "weights rel",
                                    "result"))
    def num(x):
        return "%12s" % "-" if x is None else "%12.3e" % x
    for name, eo, ew, result, why in rows:
        print("%-*s  %s  %s  %s" % (width, name, num(eo), num(ew), result))
        if why:
            print("    " + why.replace("\n", "\n    "))
    failed = sum(r[3] != "PASS" for r in rows)
    print("%d passed, %d failed (tolerance %.0e relative, float64 references)"
          % (len(rows) - failed, failed, TOL))
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attnd", default="build/attnd", help="the server binary")
    ap.add_argument("--dir", default="build/compare",
                    help="where the layers and server logs go (emptied)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    t0 = time.monotonic()
    rows = []
    for group in (mha_cases, cross_cases, llama_cases):
        try:
            rows += group(args.attnd, args.dir)
        except Exception as e:
            rows.append((group.__name__, float("nan"), float("nan"), "FAIL",
                         str(e)[:2000]))
    failed = print_table(rows)
    print("torch %s, %.1f s; layers and logs in %s"
          % (torch.__version__, time.monotonic() - t0, args.dir))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
