#!/usr/bin/python3
"""tools/perf-table.py: writes the generated section of docs/performance.md
from the CSVs of one `make bench` run.

usage: /usr/bin/python3 tools/perf-table.py [BENCH_DIR [DOC]]
       (defaults: build/bench, docs/performance.md)

Reads attn.csv (attn-bench), codec.csv (codec-bench), e2e.csv and
e2e-load.csv (e2e-bench), decode.csv and decode-batch.csv (decode-bench)
and small.csv (bench/wrk/small.sh), and replaces what lies between the
BEGIN and END lines of DOC with their tables, the date of the run (the
CSVs' time) and the host's single-thread sgemm rate over the run. Every
figure the docs quote lives there; the prose around it explains the
columns and quotes none. A missing or malformed CSV stops it (exit 1)
with the file named, and DOC is left as it was. Standard library only
(Debian's /usr/bin/python3)."""

import csv
import datetime
import os
import statistics
import sys

BEGIN = ("<!-- perf-table: begin. tools/perf-table.py writes this section "
         "from build/bench/*.csv (make bench); edit the script, not the "
         "text -->")
END = "<!-- perf-table: end -->"
CSVS = ["attn.csv", "codec.csv", "e2e.csv", "e2e-load.csv", "decode.csv",
        "decode-batch.csv", "small.csv"]
CODEC_MAIN = {"base64 encode", "base64 decode", "JSON print", "JSON parse",
              "f16 pack", "f16 round", "f16 base64", "bf16 pack",
              "bf16 round", "bf16 base64"}
WORST_FLOOR = 100  # MB/s, codec-bench's WORST_MIN_MB_S


class Bad(Exception):
    pass


def read(bench, name, need):
    path = os.path.join(bench, name)
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise Bad(f"{path}: {e.strerror}: run make bench") from e
    if not rows:
        raise Bad(f"{path}: no rows")
    missing = [c for c in need if c not in rows[0]]
    if missing:
        raise Bad(f"{path}: no column {', '.join(missing)}")
    return rows


def num(row, key, path):
    try:
        return float(row[key])
    except (TypeError, ValueError) as e:
        raise Bad(f"{path}: {key} is {row[key]!r}, not a number") from e


def table(head, rows, align=None):
    """A Markdown table; align is a string of 'l'/'r', one per column."""
    align = align or "l" + "r" * (len(head) - 1)
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def cell(text):
    """text as a table cell reads it: backslashes and bars escaped."""
    return text.replace("\\", "\\\\").replace("|", "\\|")


def f(x, digits):
    return f"{x:,.{digits}f}"


def cells(row, path, spec):
    """row's cells by spec: (column, digits) formats a number, (column,
    None) keeps the text."""
    return [row[k] if d is None else f(num(row, k, path), d) for k, d in spec]


def host():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpu:
            for line in cpu:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return model, os.cpu_count() or 0


def attn_section(rows, path):
    sgemm = [num(r, "sgemm_gflops", path) for r in rows]
    body = []
    by = {}
    for r in rows:
        th = int(num(r, "threads", path))
        by[(r["name"], th)] = r
        x1 = num(r, "x_one_thread", path)
        body.append([r["name"], r["B"], r["Lq"], r["Lk"], r["E"],
                     f'{r["H"]}/{r["Hkv"]}', r["mask"], r["weights"], th,
                     r["path"], f(num(r, "median_ms", path), 1),
                     f(num(r, "gflops", path), 1),
                     f(num(r, "x_sgemm", path), 2),
                     f(num(r, "proj_x_sgemm", path), 2),
                     f(x1, 2) if x1 > 0 else "-",
                     f(num(r, "peak_rss_mib", path), 0)])
    out = [table(["row", "B", "Lq", "Lk", "E", "H/Hkv", "mask", "weights",
                  "threads", "path", "median ms", "GFLOP/s", "x_sgemm",
                  "proj_x", "x_1th", "peak RSS MiB"], body,
                 "lrrrrrllrlrrrrrr")]
    notes = []
    for th in (1, 2):
        a, w = by.get(("L4096", th)), by.get(("L4096 weights", th))
        if a and w:
            # both rows count the same FLOPs, so the ratio of their
            # x_sgemm is that of their times, each measured against its
            # own runs of the ceiling: the machine's drift between the
            # rows cancels, as it does not in their median_ms
            ratio = num(a, "x_sgemm", path) / num(w, "x_sgemm", path)
            notes.append(f"{f(ratio, 2)} ({'one thread' if th == 1 else 'two threads'})")
    if notes:
        out.append("Returning per-head weights at L = 4096 costs "
                   + " and ".join(notes)
                   + " times the time without them: the `L4096` rows' "
                   "x_sgemm over the `L4096 weights` rows' (the same FLOPs, "
                   "each against its own runs of the ceiling, so that the "
                   "machine's drift between the rows cancels, as it does not "
                   "in their times).")
    return out, sgemm


def codec_section(rows, path):
    main, worst = [], []
    under = 0
    for r in rows:
        rate = num(r, "text_mb_s", path)
        if r["operation"] in CODEC_MAIN:
            main.append(cells(r, path, [
                ("operation", None), ("impl", None), ("text_mb", 1),
                ("median_ms", 2), ("text_mb_s", 0), ("float_mb_s", 0)]))
        else:
            low = r["impl"] != "jansson" and rate < WORST_FLOOR
            under += low
            worst.append([cell(r["operation"]), r["impl"],
                          f(num(r, "text_mb", path), 1),
                          f(num(r, "median_ms", path), 2),
                          f(rate, 0) + (" (under the floor)" if low else "")])
    out = ["One 4096 × 512 float32 tensor (f16 and bf16: packed to float16 "
           "and bfloat16, rounded in place, and in base64 as /v1 writes it):",
           table(["operation", "impl", "text MB", "median ms", "text MB/s",
                  "float32 MB/s"], main, "llrrrr")]
    if worst:
        out += [f"The worst bodies a client can send, in MB/s of body (floor "
                f"{WORST_FLOOR} MB/s for decode and scan; jansson's "
                f"`json_loadb` alone for reference); {under} under the "
                "floor:",
                table(["body", "path", "body MB", "median ms", "MB/s"], worst,
                      "llrrr")]
    return out


def e2e_section(rows, load, path, lpath):
    body = []
    ingest = None
    for r in rows:
        body.append(cells(r, path, [
            ("form", None), ("body_mb", 1), ("reply_mb", 1), ("total_ms", 1),
            ("compute_ms", 1), ("ratio", 3), ("decode_ms", 1),
            ("encode_ms", 1), ("client_ms", 1)]))
        if r["form"] == "oip" and num(r, "decode_ms", path) > 0:
            ingest = num(r, "body_mb", path) / num(r, "decode_ms", path)
    out = ["One worker, one thread; L = 4096, E = 512, H = 8, causal, "
           "medians of 5 requests:",
           table(["form", "body MB", "reply MB", "total ms", "compute ms",
                  "total/compute", "decode ms", "encode ms", "client ms"],
                 body)]
    extra = []
    if ingest is not None:
        extra.append(f"The OIP binary body is taken in at {f(ingest, 2)} GB/s "
                     "(its bytes over its decode time).")
    lr = load[0]
    extra.append(f"Loading an E = {lr['E']} BF16 layer "
                 f"({f(num(lr, 'file_mb', lpath), 0)} MB in the file, "
                 f"{f(num(lr, 'held_mb', lpath), 0)} MB of float32 held) took "
                 f"{f(num(lr, 'seconds', lpath), 3)} s: "
                 f"{f(num(lr, 'file_gb_s', lpath), 2)} GB/s of file weights.")
    out.append(" ".join(extra))
    return out


def decode_section(rows, batch, path, bpath):
    body = [cells(r, path, [("L", None), ("session_tok_s", 0),
                            ("resend_tok_s", 1), ("ratio", 1),
                            ("attention_ms", 3), ("kv_gb_s", 2),
                            ("x_memcpy", 2)]) for r in rows]
    r0 = rows[0]
    out = [f"{r0['sessions']} sessions of an E = 512, H = 8 layer, "
           f"{r0['steps']} one-token steps each, against the same steps "
           "resent through `/v1/attention` with their history; one-thread "
           f"memcpy {f(num(r0, 'memcpy_gb_s', path), 2)} GB/s in the same run:",
           table(["L", "session tok/s", "resend tok/s", "ratio",
                  "attention ms", "KV GB/s", "x_memcpy"], body)]
    b = batch[0]
    out += [f"Batching: {b['sessions']} sessions at L = {b['L']}, one client "
            f"thread each, {b['steps']} steps:",
            table(["batched tok/s", "alone tok/s", "ratio", "mean batch on",
                   "mean batch off", "core µs/step batched",
                   "core µs/step alone", "core ratio"],
                  [cells(b, bpath, [
                      ("batched_tok_s", 0), ("alone_tok_s", 0), ("ratio", 2),
                      ("mean_batch_on", 1), ("mean_batch_off", 1),
                      ("core_us_batched", 1), ("core_us_alone", 1),
                      ("core_ratio", 2)])], "r" * 8)]
    return out


def small_section(rows, path):
    body = [cells(r, path, [("what", None), ("c", None), ("req_s", 0),
                            ("ratio", 3), ("p99_ms", 2), ("errors", None),
                            ("cpu_us", 1)]) for r in rows]
    return ["wrk on the same cores as attnd, as `make bench` runs it: the "
            "median of 3 turns of 5 s each. Errors are wrk's replies that were "
            "not 2xx, over the 3 turns; in the step row, 409 `session_busy`: "
            "a truncate that found its session's last step still in flight "
            "(held up while 4 × connections other turns went by), which "
            "bench/wrk/step.lua sends again at the session's next turn:",
            table(["what", "connections", "req/s", "of /healthz's",
                   "p99 ms", "errors", "server CPU µs/request"], body,
                  "lrrrrrr")]


def section(bench):
    p = {n: os.path.join(bench, n) for n in CSVS}
    attn = read(bench, "attn.csv",
                ["name", "B", "Lq", "Lk", "E", "H", "Hkv", "mask", "weights",
                 "threads", "path", "median_ms", "gflops", "x_sgemm",
                 "proj_x_sgemm", "x_one_thread", "peak_rss_mib",
                 "sgemm_gflops"])
    codec = read(bench, "codec.csv", ["operation", "impl", "text_mb",
                                      "median_ms", "text_mb_s", "float_mb_s"])
    e2e = read(bench, "e2e.csv", ["form", "body_mb", "reply_mb", "total_ms",
                                  "compute_ms", "ratio", "decode_ms",
                                  "encode_ms", "client_ms"])
    load = read(bench, "e2e-load.csv", ["E", "file_mb", "held_mb", "seconds",
                                        "file_gb_s"])
    dec = read(bench, "decode.csv", ["L", "sessions", "steps",
                                     "session_tok_s", "resend_tok_s", "ratio",
                                     "attention_ms", "kv_gb_s", "memcpy_gb_s",
                                     "x_memcpy"])
    batch = read(bench, "decode-batch.csv",
                 ["L", "sessions", "steps", "batched_tok_s", "alone_tok_s",
                  "ratio", "mean_batch_on", "mean_batch_off",
                  "core_us_batched", "core_us_alone", "core_ratio"])
    small = read(bench, "small.csv", ["what", "c", "req_s", "ratio", "p99_ms",
                                      "errors", "cpu_us"])
    times = [os.path.getmtime(p[n]) for n in CSVS]
    first = datetime.datetime.fromtimestamp(min(times), datetime.timezone.utc)
    last = datetime.datetime.fromtimestamp(max(times), datetime.timezone.utc)
    when = first.strftime("%Y-%m-%d %H:%M")
    end = last.strftime("%H:%M" if last.date() == first.date()
                        else "%Y-%m-%d %H:%M")
    when += ("" if when.endswith(end) else "–" + end) + " UTC"
    model, ncpu = host()
    attn_out, sgemm = attn_section(attn, p["attn.csv"])
    out = [BEGIN, "", "## The latest run", "",
           f"Written by `make bench` from the run of {when}, on {model}, "
           f"{ncpu} CPUs. The host's single-thread sgemm (2048³), measured "
           f"beside every row of the core's table: median "
           f"{f(statistics.median(sgemm), 1)} GFLOP/s, from "
           f"{f(min(sgemm), 1)} to {f(max(sgemm), 1)} over the run. The "
           "machine is shared with other work, so every rate here moves with "
           "its load, from run to run and within one: compare the ratios "
           "measured in the same run (x_sgemm, total/compute, of /healthz's), "
           "not absolute times, and re-run `make bench` before quoting one.",
           "", "### The core (attn-bench)", ""]
    out += sum(([x, ""] for x in attn_out), [])
    out += ["### Codecs (codec-bench)", ""]
    out += sum(([x, ""] for x in codec_section(codec, p["codec.csv"])), [])
    out += ["### Whole requests (e2e-bench)", ""]
    out += sum(([x, ""] for x in e2e_section(e2e, load, p["e2e.csv"],
                                              p["e2e-load.csv"])), [])
    out += ["### Sessions (decode-bench)", ""]
    out += sum(([x, ""] for x in decode_section(dec, batch, p["decode.csv"],
                                                 p["decode-batch.csv"])), [])
    out += ["### Small requests (bench/wrk/small.sh)", ""]
    out += sum(([x, ""] for x in small_section(small, p["small.csv"])), [])
    out.append(END)
    return "\n".join(out) + "\n"


def main(argv):
    bench = argv[1] if len(argv) > 1 else "build/bench"
    doc = argv[2] if len(argv) > 2 else "docs/performance.md"
    try:
        new = section(bench)
        with open(doc) as d:
            text = d.read()
        a, b = text.find(BEGIN + "\n"), text.find(END + "\n")
        if a < 0 or b < a:
            raise Bad(f"{doc}: no section between\n  {BEGIN}\nand\n  {END}")
        text = text[:a] + new + text[b + len(END) + 1:]
        with open(doc + ".tmp", "w") as d:
            d.write(text)
        os.replace(doc + ".tmp", doc)
    except Bad as e:
        print(f"perf-table: {e}", file=sys.stderr)
        return 1
    print(f"perf-table: wrote the latest run into {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
