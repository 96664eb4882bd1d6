#!/usr/bin/env python3
"""tools/device/table.py ATTND_CSV TORCH_CSV: one table of the two
benchmarks (bench/cuda_bench.c, tools/device/torch_sdpa.py), joined on
shape and precision, as Markdown for docs/performance.md. ratio is torch's
time over attnd's compute time: 1 is parity, and issue 31's goal is 0.7 or
more on every row."""
import csv
import sys


def load(path):
    with open(path) as f:
        return {(r["L"], r["E"], r["H"], r["precision"]): r
                for r in csv.DictReader(f)}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ours, theirs = load(sys.argv[1]), load(sys.argv[2])
    print("| L, E, H | precision | kernel | attnd compute ms | attnd total ms "
          "| torch SDPA ms | ratio | TFLOP/s (attnd) | proj / attn / out ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = None
    for key, r in ours.items():
        L, E, H, prec = key
        c = float(r["compute_ms"])
        flops = 8.0 * int(L) * int(E) ** 2 + 4.0 * int(L) ** 2 * int(E)
        t = theirs.get(key)
        ratio = float(t["torch_ms"]) / c if t else None
        if ratio is not None:
            worst = ratio if worst is None else min(worst, ratio)
        head = f"| {L}, {E}, {H} | {prec} | v{r['kernel']} | {c:.3f} | "
        print(head + f"{float(r['total_ms']):.3f} "
              f"| {float(t['torch_ms']):.3f} | {ratio:.2f} "
              if t else head + f"{float(r['total_ms']):.3f} | — | — ", end="")
        stages = " / ".join(f"{float(r[k]):.3f}" for k in (
            "projection_ms", "attention_ms", "output_ms")) \
            if "attention_ms" in r else "—"
        print(f"| {flops / (c * 1e-3) / 1e12:.1f} | {stages} |")
    if worst is not None:
        print(f"\nworst ratio {worst:.2f} (goal: 0.7 or more on every row)")


if __name__ == "__main__":
    main()
