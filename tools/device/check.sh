#!/usr/bin/env bash
# tools/device/check.sh [BUNDLE]: issue 31's check on the device machine,
# in one call of under 8 minutes, the most wanted results first (a call
# cut off at the device's time limit still returns what $OUT holds):
# versions, the GPU, the libraries; the GPU tests of the default kernels
# (tests/check_cuda.c, which must not skip there) and the GPU cases of
# check_server, check_layer_api and check_pinned against the bundle's
# attnd; attnd's CUDA backend against torch's SDPA on the same GPU
# (bench/cuda_bench.c, tools/device/torch_sdpa.py) as one table
# (tools/device/table.py); then the GPU tests of the kernels not yet the
# default and of the device made to fail; the rows again, fp32 and bf16,
# with flash version 3 as a second table, version 1 on the small rows;
# decoding over a kv cache in device memory with the default kernel and
# with version 4; one HTTP row: attnd-load's OIP binary bfloat16 at L
# 16384 against attnd on the GPU (tools/serve.sh); what an attnd says of
# the GPU (its metrics and health) and its GPU budget
# (tools/device/device_http.py); and last the GPU tests again under
# compute-sanitizer where it runs.
#
# BUNDLE (default .device-bundle) is the CUDA=1 build made on the
# developer's machine with `make device-bundle CUDA=1`: BUNDLE/bundle.tgz
# holds bin/ (the GPU suites, attn-cuda-bench, attnd, attnd-load) and lib/ (the Debian
# libraries they load: ../shared/device/bundle.sh; CUDA's own are the
# device's, wherever tools/device/cudalib.sh finds them); it is unpacked into
# /tmp/attnd-bundle. An unpacked BUNDLE (bin/, lib/) is used as it is.
# Carry it: run from the repository root with carry [".device-bundle"] and
#   bash tools/device/check.sh .device-bundle
# Results go to $OUT (the device tool's folder) or /tmp/attnd-device:
# attnd.csv, attnd-v3.csv, torch.csv, table.md, table-v3.md, decode.csv,
# decode-v4.csv, load-http-pinned.csv, load-http-ordinary.csv,
# http.md, and sanitizer.log.
#
# DEVICE_DEADLINE (seconds since the epoch) bounds the whole run: each
# step gets at most the time left, and a step that finds too little left
# is skipped and named at the end (tools/device/deadline.sh;
# tools/device/session.sh sets it to leave cores.sh its share).
set -eu
cd "$(dirname "$0")/../.."
bundle=${1:-.device-bundle}
out=${OUT:-/tmp/attnd-device}
me=check.sh
. tools/device/deadline.sh
mkdir -p "$out"
step() { printf '\n== %s (at %ds)\n' "$*" "$SECONDS"; }

if [ -f "$bundle/bundle.tgz" ]; then
  rm -rf /tmp/attnd-bundle
  mkdir -p /tmp/attnd-bundle
  tar -C /tmp/attnd-bundle -xzf "$bundle/bundle.tgz"
  bundle=/tmp/attnd-bundle
fi
if [ ! -x "$bundle/bin/check_cuda" ]; then
  echo "check.sh: no $bundle/bin/check_cuda: run make device-bundle CUDA=1" \
    "here first, and carry $bundle" >&2
  exit 2
fi
case $bundle in /*) ;; *) bundle=$PWD/$bundle ;; esac
# The bundle's libraries for attnd's programs alone: python3 (torch) keeps
# the device's own.
. tools/device/cudalib.sh
cuda_dirs=$(cuda_libdirs "$bundle/bin/check_cuda")
libs="$bundle/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
with_libs() { LD_LIBRARY_PATH=$libs "$@"; }

step versions
uname -srm
cat "$bundle/BUILD-INFO" 2>/dev/null || true
nvidia-smi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv || true
if command -v nvcc >/dev/null; then nvcc --version | tail -2; else echo "nvcc: not on PATH"; fi
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name())' ||
  echo "check.sh: python3 cannot use torch (the torch rows will be missing)"

step libraries
missing=0
for b in "$bundle"/bin/*; do
  if with_libs ldd "$b" | grep 'not found'; then
    echo "check.sh: $b cannot find the libraries above" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 1
# (neither, linked statically, is worth a line, not the end of the run)
with_libs ldd "$bundle/bin/check_cuda" | grep -E 'libcudart|libopenblas' ||
  echo "check.sh: check_cuda loads neither libcudart nor libopenblas as a shared library"
# cuBLAS is loaded at run time (dlopen, by the probe): show where it is
echo "check.sh: CUDA's libraries from ${cuda_dirs:-nowhere found}"
for d in $(echo "$cuda_dirs" | tr ':' ' '); do ls -l "$d"/libcublas.so.* 2>/dev/null; done |
  grep . || echo "check.sh: no libcublas.so.* found (the probe will say)"

# A failing test does not stop the run: the benchmark's numbers still come
# back, and the script exits 1 at the end.
failed=''
# check_cuda CASE...: one process a case (check_cuda.c's test_suite): CUDA
# forbids fork(), so a kernel that leaves the device failed would fail
# every later case of its process; here it fails only its own. A case
# takes seconds; 90 s is a hung kernel.
check_cuda() {
  for case in "$@"; do
    echo "-- check_cuda: $case"
    t=$(secs 90) || { skip "check_cuda:$case"; continue; }
    if ! CK_RUN_CASE=$case ATTND_REQUIRE_CUDA=1 with_libs timeout "$t" \
      "$bundle/bin/check_cuda"; then
      failed="$failed check_cuda:$case"
    fi
  done
}
step "GPU tests: the default kernels"
check_cuda refusals table gpu gpu-kv gpu-reduce

step "GPU tests through the server: cuda sessions, layers on the GPU, pinned memory"
# check_server's "protocol" case (test_cuda_session, the backend choice),
# check_layer_api's "gpu" case (test_layers_on_device) and check_pinned's
# (test_server_real), each against the bundle's attnd; ATTND_REQUIRE_CUDA=1
# makes check_layer_api's cases fail where they would skip their GPU half
for t in check_server:protocol check_layer_api:gpu check_pinned:gpu; do
  s=$(secs 120) || { skip "$t"; continue; }
  if ! ATTND_BIN="$bundle/bin/attnd" CK_RUN_CASE=${t#*:} ATTND_REQUIRE_CUDA=1 \
    with_libs timeout "$s" "$bundle/bin/${t%%:*}"; then
    failed="$failed $t"
  fi
done

step "benchmark: attnd, CUDA backend"
if t=$(secs 300 30); then
  with_libs timeout "$t" "$bundle/bin/attn-cuda-bench" --csv "$out/attnd.csv" ||
    failed="$failed attn-cuda-bench"
else skip attn-cuda-bench; fi

step "benchmark: torch SDPA"
if t=$(secs 200 30); then
  PYTHONUNBUFFERED=1 timeout "$t" python3 tools/device/torch_sdpa.py --csv "$out/torch.csv" ||
    failed="$failed torch_sdpa"
else skip torch_sdpa; fi
[ -s "$out/torch.csv" ] || echo "L,E,H,precision,torch_ms" >"$out/torch.csv"

step "table: attnd against torch"
if [ -s "$out/attnd.csv" ]; then
  python3 tools/device/table.py "$out/attnd.csv" "$out/torch.csv" | tee "$out/table.md"
fi

# The kernels not yet the default after the table: one never run before
# that hung would cost its own steps, not the table. (The CSV is written
# a row at a time: a run cut short keeps the rows it finished.)
step "GPU tests: the kernels not yet the default, then the device made to fail"
check_cuda gpu-v3 gpu-v4 gpu-v1 lost

step "benchmark: attnd, flash version 3, fp32 (3xTF32) and bf16 (check_cuda above ran it on every case it takes)"
if t=$(secs 150 30); then
  with_libs timeout "$t" "$bundle/bin/attn-cuda-bench" --kernel 3 \
    --csv "$out/attnd-v3.csv" || failed="$failed attn-cuda-bench-v3"
else skip attn-cuda-bench-v3; fi
if [ -s "$out/attnd-v3.csv" ]; then
  python3 tools/device/table.py "$out/attnd-v3.csv" "$out/torch.csv" | tee "$out/table-v3.md"
fi

step "benchmark: attnd, flash version 1 throughout, small shapes (to compare)"
if t=$(secs 120 30); then
  with_libs timeout "$t" "$bundle/bin/attn-cuda-bench" --quick --kernel 1 --reps 3 ||
    failed="$failed attn-cuda-bench-v1"
else skip attn-cuda-bench-v1; fi

step "benchmark: decoding over a kv cache in device memory (sessions on the GPU)"
# prefill at 4096, 16384 and 32768 tokens, then steps of one token (check_cuda
# above compared such caches with the CPU core's)
if t=$(secs 120 30); then
  with_libs timeout "$t" "$bundle/bin/attn-cuda-bench" --decode --reps 9 \
    --csv "$out/decode.csv" || failed="$failed attn-cuda-bench-decode"
else skip attn-cuda-bench-decode; fi

step "benchmark: the same steps with flash version 4 (the keys split across blocks; check_cuda above ran it on every case)"
if t=$(secs 120 30); then
  with_libs timeout "$t" "$bundle/bin/attn-cuda-bench" --decode --reps 9 \
    --kernel 4 --csv "$out/decode-v4.csv" ||
    failed="$failed attn-cuda-bench-decode-v4"
else skip attn-cuda-bench-decode-v4; fi

step "HTTP: OIP binary bfloat16 on the GPU, L 16384, E 512, H 8, tensors in pinned memory and not"
# attnd with backend cuda, bf16, and attnd-load sending what a bf16 client
# sends (bfloat16 inputs, bfloat16 outputs, binary data): req/s, and the
# client's time against the server's compute; once with the tensors
# decoded into pinned memory (pinned_memory_bytes auto, the default) and
# once into ordinary memory (off), which the GPU copies more slowly.
# (About 30 s: it starts only with a minute left.)
if ! secs 60 60 >/dev/null; then
  skip http
elif (
  export LD_LIBRARY_PATH=$libs
  bin=$bundle/bin me=check
  . tools/serve.sh
  for mem in pinned ordinary; do
    pinned=auto
    [ $mem = pinned ] || pinned=off
    serve "http-$mem" --backend cuda --precision bf16 --workers 4 \
      --threads-per-request 1 --pinned-memory-bytes $pinned
    load "http-$mem" --protocol v2 --tensors binary --dtype bfloat16 \
      --lengths 16384 --embed 512 --heads 8 --projections inline \
      --concurrency 1,4 --warmup 1 --duration 5 || exit 1
    stop
  done
); then
  for mem in pinned ordinary; do
    # a time with no value is an empty cell: "-", not 0.00
    awk -F, -v mem=$mem 'function ms(v) { return v == "" ? "-" : sprintf("%.2f", v) }
      NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { printf "| %s | %s | %s | %.1f | %s | %s | %s |\n", mem,
          $c["length"], $c["concurrency"], $c["rps"], ms($c["lat_p50_ms"]),
          ms($c["total_p50_ms"]), ms($c["compute_p50_ms"]) }' "$out/load-http-$mem.csv"
  done >"$out/http.rows"
  {
    echo "| tensors in | L | in flight | req/s | client p50 ms | server total p50 ms | compute p50 ms |"
    echo "|---|---|---|---|---|---|---|"
    cat "$out/http.rows"
  } | tee "$out/http.md"
else
  failed="$failed http"
fi

step "the server on the GPU: its metrics, health and GPU budget"
if ! secs 30 30 >/dev/null; then
  skip device-http
elif ! (
  export LD_LIBRARY_PATH=$libs
  bin=$bundle/bin me=check
  . tools/serve.sh
  # (set -e does not hold in an if's condition: each step is chained)
  serve device --backend cuda --workers 2 --threads-per-request 1
  python3 tools/device/device_http.py serving "$port" && stop &&
    serve budget --backend auto --max-device-memory-bytes 1M &&
    python3 tools/device/device_http.py budget "$port"
); then
  failed="$failed device-http"
fi

step "GPU tests under compute-sanitizer (memcheck)"
if ! t=$(secs 150 40); then
  skip compute-sanitizer
elif command -v compute-sanitizer >/dev/null; then
  # Not fatal: on gVisor it refuses the device (docs/cuda.md); say what
  # it said either way.
  # (without the case that makes the device fail on purpose, whose trap
  # the sanitizer would report)
  if ATTND_REQUIRE_CUDA=1 ATTND_CUDA_NO_TRAP=1 with_libs timeout "$t" compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$bundle/bin/check_cuda" >"$out/sanitizer.log" 2>&1; then
    echo "compute-sanitizer: clean"
  else
    echo "compute-sanitizer: exit $? (see below; 124 is its time limit)"
  fi
  tail -n 15 "$out/sanitizer.log"
else
  echo "compute-sanitizer: not on PATH"
fi

[ -z "$skipped" ] || step "SKIPPED (out of time):$skipped"
if [ -n "$failed" ]; then
  step "FAILED:$failed"
  exit 1
fi
step "done: every step that ran passed"
