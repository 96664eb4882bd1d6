#!/usr/bin/python3
"""The coverage report of `make coverage`: gcov's counts, summed.

Usage: coverage.py BUILD (build/cov, built with COV=1 and the suites run)

Runs gcov (its JSON, on stdout) on every object of the core (core/, not
core/cuda, nor the tile kernels of core/kernel.c, which COV=1 builds
without counters: the Makefile says why), the codec library, the server
and attnd-load, sums the counts of a line over the objects that hold it
(a header's inline functions are in every file that includes it), and
writes into BUILD/coverage/:

  summary.txt   lines run per directory and per file; the functions never
                called; the longest runs of lines never run inside
                functions that were called
  src/FILE      each source file with its count before every line
                ('-' where no code is, '#####' where code never ran)

Counts are written when a process exits normally, so what runs in one
that does not reads as never run: a server a test kills, attnd ending by
_exit after drain_timeout_s (serve.c), and what a process did before it
re-executed itself (attnd_blas_select, server/blas.c: each suite and each
attnd does, where the environment names another OpenBLAS kernel).
"""

import json
import os
import subprocess
import sys

DIRS = ("core/", "codec/", "server/", "tools/load/", "include/")
RUNS_SHOWN = 60


def wanted(path):
    return path.startswith(DIRS) and not path.startswith("core/cuda/")


def objects(build):
    for d in ("core", "codec", "server", "tools/load"):
        for root, _, names in os.walk(os.path.join(build, d)):
            for n in sorted(names):
                if n.endswith(".gcno") and "/cuda" not in root:
                    yield os.path.join(root, n)


def gcov_json(gcno):
    """gcov's report of one object, from the tree's root."""
    out = subprocess.run(
        ["gcov", "--json-format", "--stdout", "-o", os.path.dirname(gcno), gcno],
        check=True,
        capture_output=True,
    ).stdout
    # one JSON document per object named; here one
    return json.loads(out)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    lines = {}  # file -> {line: count}
    funcs = {}  # (file, start, name) -> [count, end]
    fn_of = {}  # (file, line) -> function name
    for gcno in objects(build):
        for f in gcov_json(gcno)["files"]:
            path = os.path.normpath(f["file"])
            if not wanted(path):
                continue
            per = lines.setdefault(path, {})
            for ln in f["lines"]:
                n = ln["line_number"]
                per[n] = per.get(n, 0) + ln["count"]
            for fn in f["functions"]:
                key = (path, fn["start_line"], fn["demangled_name"])
                cur = funcs.setdefault(key, [0, fn["end_line"]])
                cur[0] += fn["execution_count"]
                for n in range(fn["start_line"], fn["end_line"] + 1):
                    fn_of[(path, n)] = fn["demangled_name"]

    out = os.path.join(build, "coverage")
    os.makedirs(os.path.join(out, "src"), exist_ok=True)
    rows = []
    by_dir = {}
    for path in sorted(lines):
        per = lines[path]
        run = sum(1 for c in per.values() if c > 0)
        rows.append((path, len(per), run))
        d = path.split("/")[0] + "/"
        if path.startswith("tools/load/"):
            d = "tools/load/"
        t = by_dir.setdefault(d, [0, 0])
        t[0] += len(per)
        t[1] += run
        write_annotated(os.path.join(out, "src", path), path, per)

    never = sorted(
        (k, v) for k, v in funcs.items() if v[0] == 0 and k[0] in lines
    )
    # Runs of code lines never run, in functions that were called: lines
    # with no code between them do not end a run.
    called = {
        (k[0], k[2]) for k, v in funcs.items() if v[0] > 0
    }
    runs = []
    for path, per in lines.items():
        start = prev = None
        size = 0
        for n in sorted(per):
            fn = fn_of.get((path, n))
            if per[n] == 0 and (path, fn) in called:
                if start is not None and fn_of.get((path, start)) == fn:
                    prev, size = n, size + 1
                    continue
                if start is not None:
                    runs.append((size, path, start, prev, fn_of[(path, start)]))
                start, prev, size = n, n, 1
            elif start is not None:
                runs.append((size, path, start, prev, fn_of[(path, start)]))
                start = None
        if start is not None:
            runs.append((size, path, start, prev, fn_of[(path, start)]))
    runs.sort(key=lambda r: (-r[0], r[1], r[2]))

    with open(os.path.join(out, "summary.txt"), "w") as s:
        s.write("lines run, per directory\n")
        tl = tr = 0
        for d in sorted(by_dir):
            n, r = by_dir[d]
            tl, tr = tl + n, tr + r
            s.write(f"  {d:<14} {r:6}/{n:<6} {pct(r, n)}\n")
        s.write(f"  {'all':<14} {tr:6}/{tl:<6} {pct(tr, tl)}\n\n")
        s.write("lines run, per file (functions never called)\n")
        for path, n, r in rows:
            k = sum(1 for (p, _, _), _v in never if p == path)
            s.write(f"  {path:<40} {r:6}/{n:<6} {pct(r, n)}  ({k})\n")
        s.write(f"\nfunctions never called ({len(never)})\n")
        for (path, start, name), (_, end) in never:
            s.write(f"  {path}:{start} {name} ({end - start + 1} lines)\n")
        s.write(
            f"\nthe {RUNS_SHOWN} longest runs of code never run in functions "
            "that were\n"
        )
        for size, path, a, b, fn in runs[:RUNS_SHOWN]:
            s.write(f"  {size:4}  {path}:{a}-{b} in {fn}\n")
    with open(os.path.join(out, "summary.txt")) as s:
        print("".join(s.readlines()[: len(by_dir) + 2]), end="")
    print(f"coverage: {out}/summary.txt, {out}/src/")


def pct(r, n):
    return f"{100.0 * r / n:5.1f}%" if n else "  -  "


def write_annotated(dest, path, per):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        with open(path, errors="replace") as f:
            text = f.read().split("\n")
    except OSError:
        return
    with open(dest, "w") as o:
        for i, t in enumerate(text, 1):
            c = per.get(i)
            mark = "-" if c is None else ("#####" if c == 0 else str(c))
            o.write(f"{mark:>9}:{i:5}:{t}\n")


if __name__ == "__main__":
    main()
