"""PyTorch on the CPU on the shapes of tools/device/cores.sh: causal
self-attention with projections, as attn-bench's --shape rows compute it
(F.linear for Q, K, V and the output, scaled_dot_product_attention with
is_causal between them), float32, batch 1, at each thread count.

Prints one CSV line per shape and thread count:
    L,E,H,threads,median_ms,gflops
with GFLOP/s dense-equivalent as attn-bench counts them (8·L·E² + 4·L²·E:
projections and attention as if nothing were masked). Each row runs once
to warm up, then `reps` times or for at least a second (at most 4·reps),
and the median is taken.

usage: torch_cores.py SHAPES THREADS REPS
    SHAPES   L,E,H[;L,E,H...]      e.g. "4096,512,8;4096,4096,32"
    THREADS  N[,N...]              e.g. 1,2,4,8,16
Exit status 3 when torch cannot be imported (cores.sh then skips it)."""
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the caller says so in its table
    print(f"torch_cores: no torch ({e})", file=sys.stderr)
    sys.exit(3)


def time_row(L, E, H, threads, reps):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, L, E, generator=g)
    s = E ** -0.5
    wq, wk, wv, wo = (torch.randn(E, E, generator=g) * s for _ in range(4))
    D = E // H

    def run():
        def heads(t):
            return t.view(1, L, H, D).transpose(1, 2)

        q, k, v = heads(F.linear(x, wq)), heads(F.linear(x, wk)), \
            heads(F.linear(x, wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(o.transpose(1, 2).reshape(1, L, E), wo)

    with torch.inference_mode():
        run()  # warm up: the first call also grows the heap
        times = []
        start = time.perf_counter()
        while len(times) < reps or (time.perf_counter() - start < 1.0
                                    and len(times) < 4 * reps):
            t0 = time.perf_counter()
            run()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    shapes = [tuple(map(int, s.split(","))) for s in sys.argv[1].split(";")
              if s]
    threads = [int(t) for t in sys.argv[2].split(",")]
    reps = int(sys.argv[3])
    print(f"torch_cores: torch {torch.__version__}, "
          f"{torch.get_num_interop_threads()} interop threads, "
          f"{torch.backends.cpu.get_cpu_capability()}", file=sys.stderr)
    for L, E, H in shapes:
        for t in threads:
            ms = time_row(L, E, H, t, reps)
            flops = 8.0 * L * E * E + 4.0 * L * L * E
            print(f"{L},{E},{H},{t},{ms:.3f},{flops / ms / 1e6:.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
