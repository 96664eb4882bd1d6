#!/bin/sh
# tests/device/check.sh BUILD: the device scripts run here, where there is
# no GPU, as a device session runs them (tools/device/session.sh, which
# runs check.sh and cores.sh), from a bundle of BUILD's programs, with a
# stand-in nvidia-smi (this machine has none) and small shapes. A session
# gets the device rarely and for minutes, so what it relies on is checked
# before it has one:
#   - both scripts run to their ends, and session.sh leaves exactly its
#     four files in OUT (the device tool returns eight at most), the
#     summary holding the GPU's name and each script's exit status;
#   - check.sh's GPU steps fail here, are named at the end (FAILED:), and
#     do not stop the steps after them; check_layer_api's gpu case among
#     them, whose cases would pass here skipping their GPU halves but for
#     the ATTND_REQUIRE_CUDA=1 that check.sh gives them;
#   - cores.sh's table has the core's rows at each thread count, the
#     server's rows with many workers and with one, and the lone
#     threads_per_request = auto request: so the attnd and attnd-load
#     flags the scripts pass still exist;
#   - with too little time (DEVICE_DEADLINE), steps are skipped and named
#     (SKIPPED (out of time):), and the call still ends with its summary.
# usage: sh tests/device/check.sh BUILD (from the repository root)
set -eu
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() {
  echo "device-scripts: $*" >&2
  [ ! -f "$tmp/log" ] || tail -n 40 "$tmp/log" >&2
  exit 1
}

# the bundle, unpacked, as make device-bundle CUDA=1 packs it (here, the
# programs link the system's libraries, so lib/ is empty)
mkdir -p "$tmp/bundle/bin" "$tmp/bundle/lib" "$tmp/stub"
for b in tests/check_cuda tests/check_server tests/check_layer_api \
  tests/check_pinned attn-cuda-bench attnd attnd-load attn-bench; do
  [ -x "$build/$b" ] || fail "no $build/$b (make build first)"
  ln -s "$PWD/$build/$b" "$tmp/bundle/bin/${b#tests/}"
done
cat >"$tmp/stub/nvidia-smi" <<'STUB'
#!/bin/sh
echo "name, driver_version, memory.total [MiB], clocks.sm [MHz], clocks.max.sm [MHz]"
echo "stand-in GPU, 0, 0 MiB, 0 MHz, 0 MHz"
STUB
chmod +x "$tmp/stub/nvidia-smi"

# 0. CUDA's libraries where the device's image may keep them: not in the
# toolkit's directory but apart, inside wheels (tools/device/cudalib.sh).
# A program linked with a stand-in libcudart.so.13 asks for them.
fake=$tmp/fakecuda
mkdir -p "$fake/rt/nvidia/cuda_runtime/lib" "$fake/rt/nvidia/cu13/lib" "$fake/kit"
echo 'int cuda_stand_in(void) { return 0; }' >"$fake/lib.c"
echo 'int cuda_stand_in(void); int main(void) { return cuda_stand_in(); }' >"$fake/main.c"
cc -shared -fPIC -Wl,-soname,libcudart.so.13 -o "$fake/kit/libcudart.so.13" "$fake/lib.c"
cc -o "$fake/prog" "$fake/main.c" "$fake/kit/libcudart.so.13"
cp "$fake/kit/libcudart.so.13" "$fake/rt/nvidia/cuda_runtime/lib/"
for l in libcublas.so.13 libcublasLt.so.13 libcublas.so.12; do
  cp "$fake/kit/libcudart.so.13" "$fake/rt/nvidia/cu13/lib/$l"
done
got=$(. tools/device/cudalib.sh && CUDA_LIB_FIRST="$fake/none" \
  CUDA_LIB_SEARCH="$fake/rt" cuda_libdirs "$fake/prog")
[ "$got" = "$fake/rt/nvidia/cuda_runtime/lib:$fake/rt/nvidia/cu13/lib" ] ||
  fail "cudalib.sh found '$got', not the runtime's and cuBLAS's directories"
cp "$fake/rt/nvidia/cu13/lib/libcublas"*.so.13 "$fake/kit/"
got=$(. tools/device/cudalib.sh && CUDA_LIB_FIRST="$fake/kit" \
  CUDA_LIB_SEARCH="$fake/rt" cuda_libdirs "$fake/prog")
[ "$got" = "$fake/kit" ] || fail "cudalib.sh found '$got', not the toolkit's $fake/kit first"
got=$(. tools/device/cudalib.sh && cuda_libdirs "$build/attn-bench")
[ -n "$got" ] || [ -z "$(ldd "$build/attn-bench" | grep libcudart)" ] ||
  fail "cudalib.sh found nothing for $build/attn-bench, which is linked with libcudart"

# session.sh BUNDLE SECONDS, with cores.sh sized for two CPUs and seconds
session() {
  rm -rf "$tmp/out"
  PATH=$tmp/stub:$PATH OUT=$tmp/out CORES_THREADS=1,2 CORES_LOAD_WORKERS=2 \
    CORES_SHAPES="256,64,2 512,512,8" CORES_REPS=1 CORES_LOAD_LENGTHS=64,128 \
    CORES_LOAD_DURATION=1 CORES_LONE_LENGTH=512 SESSION_CORES_SECONDS=$2 \
    bash tools/device/session.sh "$tmp/bundle" "$1" >"$tmp/log" 2>&1 || true
  [ "$(ls "$tmp/out" | tr '\n' ' ')" = "check.log cores.log results.tgz summary.md " ] ||
    fail "OUT holds $(ls "$tmp/out" | tr '\n' ' '), not check.log cores.log results.tgz summary.md"
  grep -q '^# Device session' "$tmp/log" || fail "the call's output ends without the summary"
}

# 1. time enough for every step
session 240 120
sum=$tmp/out/summary.md
grep -q '^GPU: stand-in GPU' "$sum" || fail "the summary does not name the GPU"
grep -q '^check.sh: exit 1; cores.sh: exit 0' "$sum" ||
  fail "the summary's exit statuses are not check.sh 1 (no GPU here), cores.sh 0"
for step in check_cuda:gpu check_cuda:gpu-v3 check_layer_api:gpu attn-cuda-bench http \
  device-http; do
  grep '^== FAILED:' "$sum" | grep -q " $step\( \|$\)" ||
    fail "check.sh's FAILED line does not name $step"
done
grep -q '^== GPU tests under compute-sanitizer' "$tmp/out/check.log" ||
  fail "check.sh stopped before its last step"
! grep -q 'out of time' "$sum" || fail "a step was skipped with time to spare"
for row in '| 256,64,2 *|   1 |' '| 256,64,2 *|   2 |' '| 512,512,8 *|   2 |'; do
  grep -q "$row" "$sum" || fail "cores.sh's table has no row $row"
done
grep -Eq '^\| +128 \| +[0-9.]+ \| +[0-9.]+ \| +[0-9.]+ \|' "$sum" ||
  fail "cores.sh's server table has no L 128 row with both worker counts"
grep -Eq '^A lone L 512 request .*: compute p50 [0-9.]+ ms; the core on 2 threads [0-9.]+ ms: [0-9.]+ of it' "$sum" ||
  fail "cores.sh's lone auto request has no result against the core's time"
tar -tzf "$tmp/out/results.tgz" | grep -q '^cores/attn.csv$' ||
  fail "results.tgz does not hold cores/attn.csv"

# 2. no time: check.sh skips every step it gates; cores.sh cannot start
session 30 28
grep '^== SKIPPED (out of time):' "$sum" | grep -q ' check_cuda:gpu .* attn-cuda-bench .* compute-sanitizer (at ' ||
  fail "check.sh did not skip and name its steps with no time left"
grep -q '^cores: no time left for attn-bench' "$tmp/out/cores.log" ||
  fail "cores.sh did not say it had no time for attn-bench"
grep -q '^check.sh: exit 0; cores.sh: exit 1' "$sum" ||
  fail "the summary's exit statuses are not check.sh 0 (all skipped), cores.sh 1"
echo "device-scripts: session.sh, check.sh and cores.sh: every step, the summary, the skips"
