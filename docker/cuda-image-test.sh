#!/bin/sh
# docker/cuda-image-test.sh BUILD: the CUDA variant of the image
# (docker/Dockerfile with --build-arg CUDA=1), built and run for real with
# podman on a machine without a GPU (`make cuda-image-test` runs it after
# building BUILD/attnd and the demo layer).
#
#   1. prerequisites  podman (docker/podman.sh), curl, node
#   2. base image     debian:bookworm(-slim), as container-test makes them
#   3. image          built with --build-arg CUDA=1 (Debian's CUDA 11.8 from
#                     non-free); its build time and size; the runtime stage
#                     carries cudart and cuBLAS, not the toolkit nor the
#                     driver's libcuda; attnd links cudart and names
#                     libcublas.so.11, the soname of the headers it was
#                     built against, whose libraries all resolve and which
#                     defines every function forward.cu looks up in it
#   4. container      attnd starts with ATTND_BACKEND=auto and no GPU, and
#                     has not loaded cuBLAS; /v1/info: cuda built, not
#                     usable, and why; requests naming no backend or "cpu"
#                     compute on the CPU, the demo layer's equal to
#                     BUILD/attnd's; "cuda" is 503 backend_unavailable;
#                     SIGTERM exits 0
#   5. backend=cuda   attnd refuses to start, naming the reason
#
# Not in CI (.ci/run): the toolkit is about 2 GB to download and the build
# takes minutes. podman keeps the build stage (tagged attnd-cuda-build) as
# the next run's cache.
#
# Environment: ATTND_CT_CACHE (/var/tmp/attnd-container-test) keeps the base
# image's tarball between runs, shared with container-test.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
cd "$ROOT"

W=$BUILD/cuda-image-test # this run's logs
CACHE=${ATTND_CT_CACHE:-/var/tmp/attnd-container-test}
IMAGE=localhost/attnd-cuda:latest # the name k8s/gpu/deployment.yaml uses
BUILD_IMAGE=localhost/attnd-cuda-build:latest
NAME=attnd-cuda-it
DEMO=$ROOT/build/demo/demo.safetensors
WORKED='{"query": [[0, 0]], "key": [[0, 0], [0, 0]], "value": [[2, 10], [6, -2]],
 "num_heads": 2,
 "mask": {"bias": [[[-0.22314355, -1.60943791]], [[-1.38629436, -0.28768207]]]},
 "projections": {"o_weight": [[2, -1]]}, "return": {"metrics": false}'
REF_PID=""

fail() {
  echo "cuda-image-test: FAILED: $*" >&2
  exit 1
}
show() { [ -f "$1" ] && { echo "--- $1 (last ${2:-20} lines)"; tail -n "${2:-20}" "$1" | sed 's/^/  /'; } >&2 || true; }
ok() { echo "ok   $*"; }

cleanup() {
  local rc=$?
  set +e
  # one name a call: podman 4.3 given a name that is gone among others
  # removes none of them
  for ct in "$NAME" "$NAME-strict"; do podman rm -f -t 0 "$ct" >/dev/null 2>&1; done
  [ -n "$REF_PID" ] && kill -TERM "$REF_PID" 2>/dev/null && wait "$REF_PID" 2>/dev/null
  [ $rc -eq 0 ] && echo "cuda-image-test: all checks passed in $((SECONDS))s (logs in ${W#"$ROOT"/})"
  exit $rc
}
trap cleanup EXIT

# shellcheck source=docker/podman.sh
. "$ROOT/docker/podman.sh"

# json FILE EXPR: EXPR (JavaScript, over the parsed FILE as `j`) printed.
json() { node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"; }

# post URL BODY_FILE OUT: POSTs to URL/v1/attention; prints the status.
post() { curl -s -o "$3" -w '%{http_code}' -m 20 -H 'Content-Type: application/json' --data-binary @"$2" "$1/v1/attention" || true; }

# same_output A B: the replies A and B have the same output shape, and
# values within 1e-5; prints the largest difference, or what differs.
same_output() {
  node -e '
const fs = require("fs");
const out = (f) => {
  const o = JSON.parse(fs.readFileSync(f, "utf8")).output;
  const x = o.base64 !== undefined
    ? new Float32Array(new Uint8Array(Buffer.from(o.base64, "base64")).buffer) : o.data.flat(Infinity);
  return { shape: JSON.stringify(o.shape), x: Array.from(x) };
};
const a = out(process.argv[1]), b = out(process.argv[2]);
if (a.shape !== b.shape) { console.log(`shape ${a.shape}, not ${b.shape}`); process.exit(1); }
const d = a.x.reduce((m, v, i) => Math.max(m, Math.abs(v - b.x[i])), 0);
console.log(`output ${a.shape}, largest difference ${d}`);
process.exit(d <= 1e-5 && a.x.every(Number.isFinite) ? 0 : 1);' "$1" "$2"
}

# ---- 1, 2. prerequisites, base image -------------------------------------------

mkdir -p "$W" "$CACHE"
find "$W" -mindepth 1 -delete
podman_install curl=curl node=nodejs nm=binutils
podman_configure
[ -x "$BUILD/attnd" ] && [ -f "$DEMO" ] || fail "$BUILD/attnd or $DEMO is missing: run through 'make cuda-image-test'"
base_image
ok "podman $(podman --version | awk '{print $3}')${PODMAN_INSTALLED:+, installed $PODMAN_INSTALLED}; debian:bookworm $BASE_HOW"

# ---- 3. image --------------------------------------------------------------------

echo "podman build --build-arg CUDA=1 (log: $W/build.log)"
old_ids=$(podman image inspect -f '{{.Id}}' $IMAGE $BUILD_IMAGE 2>/dev/null || true)
t0=$SECONDS
{ podman build --pull=never --format docker -f docker/Dockerfile --build-arg CUDA=1 --target build -t $BUILD_IMAGE . &&
  podman build --pull=never --format docker -f docker/Dockerfile --build-arg CUDA=1 -t $IMAGE .; } >"$W/build.log" 2>&1 ||
  { show "$W/build.log" 40; fail "podman build --build-arg CUDA=1 failed"; }
build_s=$((SECONDS - t0))
remove_replaced $old_ids
size=$(podman image inspect -f '{{.Size}}' $IMAGE)
mb=$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1e6 }')
# (for the report alone: "?" where the build stage cannot say)
nvcc=$(podman run --rm $BUILD_IMAGE nvcc --version 2>/dev/null | sed -n 's/.*Cuda compilation tools, //p' || true)
# What the runtime stage holds, seen from inside: the libraries attnd links
# resolved, cuBLAS (dlopened) and cuBLASLt present, no toolkit, no driver.
podman run --rm --entrypoint bash $IMAGE -c '
  ldd /usr/local/bin/attnd
  echo "cublas: $(ls /usr/lib/x86_64-linux-gnu/libcublas.so.11 /usr/lib/x86_64-linux-gnu/libcublasLt.so.11 2>&1 | tr "\n" " ")"
  ldd /usr/lib/x86_64-linux-gnu/libcublas.so.11 | sed "s/^/cublas needs/"
  echo "toolkit: $(ls /usr/bin/nvcc /usr/include/cuda_runtime.h 2>/dev/null | tr "\n" " ")"
  echo "driver: $(find / -xdev -name "libcuda.so*" 2>/dev/null | tr "\n" " ")"
  echo "sonames: $(grep -a -o "libcublas\.so\.[0-9]*" /usr/local/bin/attnd | sort -u | tr "\n" " ")"
  echo "arch: $(grep -a -o "code for sm_[0-9a-z]*" /usr/local/bin/attnd | sort -u | tr "\n" " ")"
' >"$W/image.log" 2>&1 || { show "$W/image.log"; fail "could not look inside $IMAGE"; }
cudart=$(awk '$1 ~ /^libcudart\.so/ { print $1, $3 }' "$W/image.log")
[ -n "$cudart" ] && ! grep -q 'not found' "$W/image.log" ||
  { show "$W/image.log" 40; fail "attnd links no cudart, or a library of attnd's or cuBLAS's is not found"; }
grep -q '^cublas: /usr/lib/x86_64-linux-gnu/libcublas.so.11 /usr/lib/x86_64-linux-gnu/libcublasLt.so.11 $' "$W/image.log" ||
  { show "$W/image.log"; fail "libcublas.so.11 or libcublasLt.so.11 missing from the image"; }
grep -q '^toolkit: $' "$W/image.log" && grep -q '^driver: $' "$W/image.log" ||
  { show "$W/image.log"; fail "the runtime stage carries the toolkit or the driver's libcuda"; }
grep -q '^sonames: libcublas.so.11 $' "$W/image.log" ||
  { show "$W/image.log"; fail "attnd does not load cuBLAS as libcublas.so.11 ($(grep '^sonames' "$W/image.log"))"; }
# Without a GPU the probe never loads cuBLAS: what a GPU host would find
# missing is checked here instead. Every function core/cuda/forward.cu
# looks up (dlsym) must be defined by the image's libcublas.so.11.
podman run --rm --entrypoint cat $IMAGE /usr/lib/x86_64-linux-gnu/libcublas.so.11 >"$W/libcublas.so.11" ||
  fail "could not read libcublas.so.11 from the image"
# (no match must reach the check below: under pipefail a failing grep
# would end the script here without a word)
wanted=$({ grep -o 'dlsym(h, "[A-Za-z_0-9]*")' core/cuda/forward.cu || true; } | cut -d'"' -f2)
[ -n "$wanted" ] || fail "no dlsym(h, \"...\") found in core/cuda/forward.cu"
nm -D --defined-only "$W/libcublas.so.11" | awk '{ print $NF }' | sed 's/@.*//' | sort -u >"$W/cublas-symbols"
absent=$(for f in $wanted; do grep -qx "$f" "$W/cublas-symbols" || echo "$f"; done)
[ -z "$absent" ] || fail "the image's libcublas.so.11 lacks what forward.cu looks up: $absent"
rm -f "$W/libcublas.so.11"
arch=$(sed -n 's/^arch: code for \(sm_[0-9a-z]*\) $/\1/p' "$W/image.log")
[ -n "$arch" ] || { show "$W/image.log"; fail "attnd in the image names no single CUDA_ARCH"; }
ok "built in ${build_s}s (nvcc ${nvcc:-?}, $arch); $mb MB ($size bytes); $cudart; cuBLAS libcublas.so.11 (+Lt) present, loaded as libcublas.so.11, defining $(echo $wanted | wc -w) functions forward.cu looks up; no nvcc, headers or libcuda.so"

# ---- 4. container ----------------------------------------------------------------

# As the CPU image is run (container-test): read-only, no capabilities; a
# host port podman picks.
podman run -d --name "$NAME" --network bridge -p 127.0.0.1::8080 \
  --read-only --read-only-tmpfs=false --cap-drop ALL --security-opt no-new-privileges \
  -e ATTND_BACKEND=auto $IMAGE >"$W/run.log" 2>&1 || { show "$W/run.log"; fail "podman run failed"; }
url=http://$(podman port "$NAME" 8080/tcp | head -1)
for _ in $(seq 150); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "$url/healthz" || true)" = 200 ] && break
  sleep 0.2
done
podman logs "$NAME" >"$W/container.log" 2>&1
[ "$(curl -s -m 2 "$url/healthz" || true)" = '{"status":"ok"}' ] || { show "$W/container.log"; fail "attnd did not start: no 200 from /healthz in 30 s"; }
curl -s -m 5 "$url/v1/info" >"$W/info.json" ||
  { podman logs "$NAME" >"$W/container.log" 2>&1; show "$W/container.log"; fail "GET /v1/info failed (log: $W/container.log)"; }
backend=$(json "$W/info.json" 'JSON.stringify(j.backend)')
echo "/v1/info backend: $backend"
[ "$(json "$W/info.json" 'j.backend.cuda.built === true && j.backend.cuda.usable === false && j.backend.default === "auto" && JSON.stringify(j.backend.available) === JSON.stringify(["cpu"])')" = true ] ||
  fail "/v1/info's backend is not {built: true, usable: false, default: auto, available: [cpu]}"
status=$(json "$W/info.json" 'j.backend.cuda.status')
case $status in *"no CUDA device here"*) ;; *) fail "backend.cuda.status does not say why: '$status'" ;; esac
# cuBLAS is loaded once a device is found: never here.
pid=$(podman inspect -f '{{.State.Pid}}' "$NAME")
attnd_pid=$({ pgrep -P "$pid" || true; } | head -1) # none: the check below says so
[ -n "$attnd_pid" ] && grep -q libcudart "/proc/$attnd_pid/maps" || fail "no attnd process with cudart mapped under $NAME"
if grep -q libcublas "/proc/$attnd_pid/maps"; then fail "attnd mapped cuBLAS without a GPU"; fi
# Requests: no backend named (auto: the CPU here) and "cpu", the worked
# example's 4.6; the demo layer's request equal to BUILD/attnd's; "cuda",
# 503 naming the backend and why.
for b in "" ', "backend": "cpu"'; do
  printf '%s%s}' "$WORKED" "$b" >"$W/worked.json"
  code=$(post "$url" "$W/worked.json" "$W/worked.out")
  out=$(sed -n 's/.*"output":\[\[\([-0-9.eE+]*\)\]\].*/\1/p' "$W/worked.out")
  [ "$code" = 200 ] && [ -n "$out" ] && awk -v x="$out" 'BEGIN { d = x - 4.6; exit !(d < 1e-5 && d > -1e-5) }' ||
    fail "worked example${b:+ with$b}: $code $(head -c 300 "$W/worked.out")"
done
printf '{"layer":"demo","query":{"shape":[3,64],"base64":"%s"},"positions":{"query":[10,11,12],"key":[10,11,12]},"return":{"weights":"mean","metrics":false}}' \
  "$(node -e 'process.stdout.write(Buffer.from(new Float32Array(192).map((_, i) => Math.sin(0.37 * i)).buffer).toString("base64"))')" >"$W/demo.json"
"$BUILD/attnd" --host 127.0.0.1 --port 0 --workers 1 --access-log off --layers "$DEMO" >"$W/ref.log" 2>&1 &
REF_PID=$!
ref_port=""
for _ in $(seq 100); do
  ref_port=$(sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' "$W/ref.log")
  [ -n "$ref_port" ] && break
  sleep 0.05
done
[ -n "$ref_port" ] || { show "$W/ref.log"; fail "BUILD/attnd did not start"; }
code=$(post "http://127.0.0.1:$ref_port" "$W/demo.json" "$W/demo-ref.out")
[ "$code" = 200 ] || fail "BUILD/attnd's demo request: $code $(head -c 300 "$W/demo-ref.out")"
code=$(post "$url" "$W/demo.json" "$W/demo.out")
[ "$code" = 200 ] || fail "the demo layer's request: $code $(head -c 300 "$W/demo.out")"
demo=$(same_output "$W/demo.out" "$W/demo-ref.out") || fail "the demo layer's request against BUILD/attnd's: $demo"
printf '%s, "backend": "cuda"}' "$WORKED" >"$W/cuda.json"
code=$(post "$url" "$W/cuda.json" "$W/cuda.out")
[ "$code" = 503 ] && [ "$(json "$W/cuda.out" 'j.error.code + " " + j.error.field')" = "backend_unavailable backend" ] ||
  fail "\"backend\": \"cuda\" got $code $(head -c 300 "$W/cuda.out"), not 503 backend_unavailable naming backend"
t0=$SECONDS
podman stop -t 10 "$NAME" >/dev/null 2>&1 || fail "podman stop failed"
exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$NAME")
[ "$exit_code" = 0 ] || { podman logs "$NAME" >"$W/container.log" 2>&1; show "$W/container.log"; fail "the container exited $exit_code after SIGTERM"; }
ok "attnd started without a GPU (read-only, no capabilities), cuBLAS not mapped; /v1/info: cuda built, not usable: $status"
ok "no backend named (auto) and \"cpu\": output 4.6; the demo layer's request: $demo against BUILD/attnd's; \"cuda\": 503 backend_unavailable; SIGTERM: exit 0 in $((SECONDS - t0))s"

# ---- 5. backend = cuda ---------------------------------------------------------------

rc=0
timeout 60 podman run --name "$NAME-strict" --network bridge -e ATTND_BACKEND=cuda $IMAGE >"$W/strict.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q 'backend: cuda cannot run here: no CUDA device here' "$W/strict.log" ||
  { show "$W/strict.log"; fail "ATTND_BACKEND=cuda without a GPU: exit $rc, not a refusal naming why"; }
ok "ATTND_BACKEND=cuda without a GPU: exit $rc, $(grep -o 'backend: cuda cannot run here[^"]*' "$W/strict.log" | head -1)"
