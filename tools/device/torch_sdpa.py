#!/usr/bin/env python3
"""tools/device/torch_sdpa.py: PyTorch's side of the CUDA benchmark.

The same problem as bench/cuda_bench.c times for attnd: causal
self-attention with projections, x [1, L, E], q/k/v/o weights [E, E] with
biases, H heads: F.linear for the projections (one fused [3E, E] weight,
as nn.MultiheadAttention has it), F.scaled_dot_product_attention with
is_causal=True, F.linear for the output. Inputs on the device already; the
time is the median of --reps calls between CUDA events, after three
warm-ups. fp32 runs with TF32 off (PyTorch's default for matmul; set here
so that the row says what it measured); bf16 with every tensor in bf16.

usage: torch_sdpa.py [--quick] [--reps N] [--csv FILE]
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

SHAPES = [(4096, 512, 8, True), (16384, 512, 8, True),
          (4096, 4096, 32, False), (32768, 4096, 32, False)]


def time_row(L, E, H, dtype, reps):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(1, L, E, device=dev, dtype=dtype, generator=g)
    w_in = torch.randn(3 * E, E, device=dev, dtype=dtype, generator=g) / 32
    b_in = torch.randn(3 * E, device=dev, dtype=dtype, generator=g) / 10
    w_o = torch.randn(E, E, device=dev, dtype=dtype, generator=g) / 32
    b_o = torch.randn(E, device=dev, dtype=dtype, generator=g) / 10

    def forward():
        qkv = F.linear(x, w_in, b_in).view(1, L, 3, H, E // H)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(o.transpose(1, 2).reshape(1, L, E), w_o, b_o)

    with torch.no_grad():
        for _ in range(3):
            forward()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            forward()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    del x, w_in, b_in, w_o, b_o
    torch.cuda.empty_cache()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--csv")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_sdpa.py: torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on "
          f"{torch.cuda.get_device_name()}; tf32 off")
    rows = []
    for L, E, H, quick in SHAPES:
        if a.quick and not quick:
            continue
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            reps = a.reps if L * E <= 16384 * 4096 else max(3, a.reps // 2)
            ms = time_row(L, E, H, dtype, reps)
            flops = 8.0 * L * E * E + 4.0 * L * L * E
            print(f"{L:6d} {E:5d} {H:3d}  {name:5s} {ms:10.3f} ms "
                  f"{flops / (ms * 1e-3) / 1e12:8.1f} TFLOP/s", flush=True)
            rows.append((L, E, H, name, ms))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("L,E,H,precision,torch_ms\n")
            for r in rows:
                f.write("%d,%d,%d,%s,%.4f\n" % r)


if __name__ == "__main__":
    main()
