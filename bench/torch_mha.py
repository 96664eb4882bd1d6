"""Times Debian's PyTorch nn.MultiheadAttention on one shape; prints the
median milliseconds. Called by attn-bench --torch with /usr/bin/python3.

usage: torch_mha.py B L E H causal weights threads reps
"""
import statistics
import sys
import time

import torch


def main():
    B, L, E, H, causal, weights, threads, reps = map(int, sys.argv[1:9])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    x = torch.randn(B, L, E)
    mask = None
    if causal:
        mask = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    with torch.inference_mode():
        def run():
            mha(x, x, x, attn_mask=mask, need_weights=bool(weights),
                average_attn_weights=False)
        run()  # warm up, twice: the first call also grows the heap
        run()
        times = []
        start = time.perf_counter()
        while len(times) < reps or (time.perf_counter() - start < 1.0
                                    and len(times) < 4 * reps):
            t0 = time.perf_counter()
            run()
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"{statistics.median(times):.3f}")


if __name__ == "__main__":
    main()
