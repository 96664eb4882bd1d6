#!/bin/sh
# tools/device/cores.sh: issue 32's measurements on a many-core machine, in
# one run (under 6 minutes on the device machine's 16 cores):
#
#   1. the core: attn-bench --shape rows at each thread count, with the
#      stages' times (projection, attention, output), and each row's
#      efficiency against the same run's one-thread row; per stage, how
#      evenly its tasks were shared (busy / (threads x its time)) and how
#      much more thread-time they took than on one thread (attn_timing_t's
#      busy times), to tell idle threads from slower tasks;
#   2. torch on the CPU on the same shapes and threads
#      (tools/device/torch_cores.py; skipped, and said so, without torch);
#   3. the server: attnd-load against a local attnd at each load length,
#      with N workers against 1 (threads_per_request 1), and a lone long
#      request with threads_per_request = auto against the core's time on
#      N threads for the same shape;
#
# then prints one table (and leaves every CSV and log in OUT).
#
# DIR is what `make cores-bundle` prepares here: DIR/bundle.tar.gz holds
# bin/ (attn-bench, attnd and attnd-load) and lib/ (their Debian libraries,
# ../shared/device/bundle.sh: the device machine has no apt), unpacked
# into DIR on the first run. `make device-bundle CUDA=1`'s DIR/bundle.tgz
# (.device-bundle) holds them too, so that one carried bundle serves both
# device scripts. On the device, from the repository root,
# with DIR carried (run's `carry`: ["build/device"]):
#
#   sh tools/device/cores.sh build/device
#
# Environment (defaults for 16 cores; a 2-core machine runs it with
# CORES_THREADS=1,2 CORES_LOAD_WORKERS=2):
#   CORES_THREADS         thread counts of the core's rows (1,2,4,8,16)
#   CORES_SHAPES          L,E,H ... (4096,512,8 16384,512,8 4096,4096,32)
#   CORES_REPS            runs per row, at least (3)
#   CORES_LOAD_LENGTHS    attnd-load's lengths (512,2048,4096)
#   CORES_LOAD_WORKERS    the many workers set against 1 (16)
#   CORES_LOAD_DURATION   measured seconds per load step (4)
#   CORES_LONE_LENGTH     the lone auto request's L, E 512 H 8 (16384; 0: none)
#   PYTHON                the Python with torch (python3)
#   OUT                   where the CSVs and logs go (DIR/out)
#   DEVICE_DEADLINE       when to be done, in seconds since the epoch: each
#                         step gets at most the time left, a step cut short
#                         keeps the rows it finished, and one that finds
#                         too little left is skipped and named at the end
#                         (tools/device/deadline.sh, session.sh)
set -eu
dir=${1:-build/device}
threads=${CORES_THREADS:-1,2,4,8,16}
shapes=${CORES_SHAPES:-4096,512,8 16384,512,8 4096,4096,32}
reps=${CORES_REPS:-3}
lengths=${CORES_LOAD_LENGTHS:-512,2048,4096}
many=${CORES_LOAD_WORKERS:-16}
duration=${CORES_LOAD_DURATION:-4}
lone=${CORES_LONE_LENGTH:-16384}
python=${PYTHON:-python3}
out=${OUT:-$dir/out}
here=$(cd "$(dirname "$0")" && pwd)
bin=$dir/bin
me=cores
. "$here/deadline.sh"
mkdir -p "$out"
# make cores-bundle's bundle.tar.gz, or make device-bundle CUDA=1's
# bundle.tgz (the same programs, built with the CUDA backend beside)
for t in "$dir/bundle.tar.gz" "$dir/bundle.tgz"; do
  if [ ! -x "$bin/attnd" ] && [ -f "$t" ]; then
    tar -C "$dir" -xzf "$t"
  fi
done
for b in attn-bench attnd attnd-load; do
  [ -x "$bin/$b" ] || { echo "cores: $bin/$b missing (make cores-bundle)" >&2; exit 2; }
done
. "$here/cudalib.sh"
cuda_dirs=$(cuda_libdirs "$bin/attnd") # a CUDA=1 bundle's programs need them
export LD_LIBRARY_PATH="$dir/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
maxth=$(echo "$threads" | tr ',' '\n' | sort -n | tail -1)
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }

echo "cores: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs," \
  "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)," \
  "$(($(sed -n 's/^MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo) / 1048576)) GiB"
# The topology bounds what the threads can do: two hyperthreads share one
# core's FMA units, so 16 CPUs that are 8 cores run the GEMM-bound stages
# no faster than 8 threads; so does a CPU quota (cgroup cpu.max) below
# the CPUs.
if command -v lscpu >/dev/null; then
  lscpu | grep -E '^(Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|L2|L3)' |
    sed 's/^/cores: /; s/  */ /g'
fi
echo "cores: CPU 0's siblings $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null || echo unknown)," \
  "cpu.max $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo 'not set (cgroup v1, or none)')"

# ---- 1. the core -----------------------------------------------------------
args=""
for s in $shapes; do args="$args --shape $s"; done
t=$(secs 900 60) || {
  echo "cores: no time left for attn-bench (DEVICE_DEADLINE)" >&2
  exit 1
}
rc=0
# shellcheck disable=SC2086 # the shapes' flags, split on purpose
timeout "$t" "$bin/attn-bench" --unpaired --reps "$reps" --threads "$threads" $args \
  --csv "$out/attn.csv" >"$out/attn.txt" 2>&1 || rc=$?
if [ $rc -eq 124 ]; then
  echo "cores: attn-bench cut short at ${t} s: the table has the rows it finished"
elif [ $rc -ne 0 ]; then
  cat "$out/attn.txt" >&2
  echo "cores: attn-bench failed" >&2
  exit 1
fi
echo "cores: attn-bench done ($(elapsed)); its own table is in $out/attn.txt"

# ---- 2. torch --------------------------------------------------------------
torch_note=""
rc=0
if t=$(secs 600 30); then
  PYTHONUNBUFFERED=1 timeout "$t" "$python" "$here/torch_cores.py" \
    "$(echo "$shapes" | tr ' ' ';')" "$threads" "$reps" \
    >"$out/torch.csv" 2>"$out/torch.log" || rc=$?
else
  skip torch
  rc=-1
  : >"$out/torch.csv"
fi
if [ $rc -eq -1 ]; then
  torch_note="torch: SKIPPED, out of time (DEVICE_DEADLINE)"
elif [ $rc -eq 124 ]; then
  torch_note="torch: cut short at its time limit (DEVICE_DEADLINE): the rows it finished"
elif [ $rc -eq 3 ] || ! command -v "$python" >/dev/null 2>&1; then
  torch_note="torch: SKIPPED, $python has no torch ($(tail -1 "$out/torch.log" 2>/dev/null))"
  : >"$out/torch.csv"
elif [ $rc -ne 0 ]; then
  torch_note="torch: FAILED (rc $rc): $(tail -1 "$out/torch.log")"
else
  torch_note=$(head -1 "$out/torch.log")
fi
echo "cores: torch done ($(elapsed)): $torch_note"

# ---- 3. the server ---------------------------------------------------------
. "$here/../serve.sh"

conc=$((2 * many))
# a sweep takes about (1 + duration) s a length, and a start and a stop
sweep=$((($(echo "$lengths" | tr ',' '\n' | wc -l)) * (duration + 1) + 10))
for w in "$many" 1; do
  if secs "$sweep" "$sweep" >/dev/null; then
    serve "w$w" --workers "$w" --threads-per-request 1
    load "w$w" --lengths "$lengths" --concurrency "$conc" --warmup 1 \
      --duration "$duration" || true
    stop
  else
    skip "attnd-load-w$w"
  fi
done
if [ "$lone" -gt 0 ]; then
  if secs 30 30 >/dev/null; then
    serve lone --workers "$many" --threads-per-request auto \
      --max-threads-per-request "$maxth"
    load lone --lengths "$lone" --embed 512 --heads 8 --projections inline \
      --concurrency 1 --warmup 1 --requests 5 --variants 1 || true
    stop
  else
    skip attnd-load-lone
  fi
fi
echo "cores: attnd-load done ($(elapsed))"

# ---- the table -------------------------------------------------------------
awk -F, -v torchcsv="$out/torch.csv" -v note="$torch_note" -v many="$many" \
  -v lone="$lone" -v maxth="$maxth" -v loaddir="$out" '
# Reads a CSV with a header into rows; col[name] is a column index.
function readcsv(path, rows, col,    line, n, i, h) {
  n = 0
  if ((getline line < path) <= 0) return 0
  h = split(line, hd, ",")
  for (i = 1; i <= h; i++) col[hd[i]] = i
  while ((getline line < path) > 0) rows[++n] = line
  close(path)
  return n
}
FNR == 1 { for (i = 1; i <= NF; i++) a[$i] = i; next }
{
  key = $a["Lq"] "," $a["E"] "," $a["H"]
  th = $a["threads"]
  ms[key, th] = $a["median_ms"]; gf[key, th] = $a["gflops"]
  st[key, th] = sprintf("%.1f / %.1f / %.1f", $a["projection_ms"],
                        $a["attention_ms"], $a["output_ms"])
  # per part: its time and its busy time (attn_timing_t: the threads time
  # in its tasks), to tell uneven sharing from slower tasks
  split("projection attention output", parts, " ")
  for (q = 1; q <= 3; q++) {
    pms[key, th, q] = $a[parts[q] "_ms"]
    pbusy[key, th, q] = ("projection_busy_ms" in a) ? $a[parts[q] "_busy_ms"] : ""
  }
  if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
  if (!((key, th) in hasth)) { hasth[key, th] = 1; ths[key] = ths[key] " " th }
}
END {
  while ((getline line < torchcsv) > 0) {
    split(line, t, ",")
    tms[t[1] "," t[2] "," t[3], t[4]] = t[5]; tgf[t[1] "," t[2] "," t[3], t[4]] = t[6]
  }
  print ""
  print "The core: causal self-attention with projections, B 1; GFLOP/s dense-equivalent (8·L·E² + 4·L²·E)"
  print note
  printf "| %-14s | %3s | %10s | %8s | %5s | %-26s | %-16s | %-16s | %10s | %8s | %8s |\n", \
    "L, E, H", "th", "attnd ms", "GFLOP/s", "eff", "proj / attn / out ms", \
    "shared p/a/o", "thread-time x1", "torch ms", "GFLOP/s", "x torch"
  print "|---|---|---|---|---|---|---|---|---|---|---|"
  for (k = 1; k <= nk; k++) {
    key = order[k]; n = split(ths[key], tl, " ")
    for (j = 1; j <= n; j++) {
      th = tl[j]
      eff = (key, 1) in gf && gf[key, 1] > 0 ? sprintf("%.2f", gf[key, th] / (gf[key, 1] * th)) : "-"
      tm = (key, th) in tms ? tms[key, th] : "-"
      tg = (key, th) in tgf ? tgf[key, th] : "-"
      xt = tm != "-" ? sprintf("%.2f", tm / ms[key, th]) : "-"
      # shared: busy / (threads x the part time), 1 when no thread waited;
      # thread-time x1: busy against the one-thread part time, 1 when the
      # tasks ran as fast as alone (above 1: bandwidth, caches)
      sh = ""; x1 = ""
      for (q = 1; q <= 3; q++) {
        bz = pbusy[key, th, q]; pt = pms[key, th, q]; bz1 = pbusy[key, 1, q]
        sh = sh (q > 1 ? " / " : "") (bz != "" && pt > 0 ? sprintf("%.2f", bz / (th * pt)) : "-")
        x1 = x1 (q > 1 ? " / " : "") (bz != "" && bz1 > 0 ? sprintf("%.2f", bz / bz1) : "-")
      }
      printf "| %-14s | %3d | %10.1f | %8.1f | %5s | %-26s | %-16s | %-16s | %10s | %8s | %8s |\n", \
        key, th, ms[key, th], gf[key, th], eff, st[key, th], sh, x1, tm, tg, xt
    }
  }
  print ""
  print "The server: attnd-load, closed loop, " 2 * many " in flight, threads_per_request 1; req/s"
  printf "| %6s | %12s | %12s | %8s | %14s | %14s | %12s |\n", "L", \
    "1 worker", many " workers", "ratio", "compute p50 1", "compute p50 " many, \
    "client CPU %"
  print "|---|---|---|---|---|---|---|"
  n1 = readcsv(loaddir "/load-w1.csv", r1, c1)
  nm = readcsv(loaddir "/load-w" many ".csv", rm, cm)
  for (i = 1; i <= nm; i++) {
    split(rm[i], x, ","); L = x[cm["length"]]
    rpsm[L] = x[cm["rps"]]; cpm[L] = x[cm["compute_p50_ms"]]
    cpu[L] = x[cm["client_cpu_pct"]]; errm[L] = x[cm["error_rate"]]; Ls[++nl] = L
  }
  for (i = 1; i <= n1; i++) {
    split(r1[i], x, ","); L = x[c1["length"]]
    rps1[L] = x[c1["rps"]]; cp1[L] = x[c1["compute_p50_ms"]]; err1[L] = x[c1["error_rate"]]
  }
  for (i = 1; i <= nl; i++) {
    L = Ls[i]
    printf "| %6s | %12.1f | %12.1f | %8s | %14s | %14s | %12s |%s\n", L, \
      rps1[L], rpsm[L], (rps1[L] > 0 ? sprintf("%.2f", rpsm[L] / rps1[L]) : "-"), \
      cp1[L], cpm[L], cpu[L], \
      (errm[L] + err1[L] > 0) ? " errors " err1[L] " / " errm[L] : ""
  }
  if (lone > 0) {
    nl1 = readcsv(loaddir "/load-lone.csv", rl, cl)
    key = lone ",512,8"
    print ""
    if (nl1 < 1) { print "lone request: no result (see " loaddir "/load-lone.log)"; exit }
    split(rl[1], x, ",")
    core = (key, maxth) in ms ? ms[key, maxth] : 0
    printf "A lone L %d request (E 512, H 8, projections), threads_per_request = auto on %d workers: compute p50 %.1f ms; the core on %d threads %s ms%s\n", \
      lone, many, x[cl["compute_p50_ms"]], maxth, core ? sprintf("%.1f", core) : "(not measured)", \
      core ? sprintf(": %.2f of it", x[cl["compute_p50_ms"]] / core) : ""
  }
}' "$out/attn.csv" >"$out/cores.txt" || {
  echo "cores: the table failed; the CSVs are in $out" >&2
  exit 1
}
cat "$out/cores.txt"
[ -z "$skipped" ] || echo "cores: SKIPPED (out of time):$skipped"
echo "cores: done in $(elapsed); files in $out"
