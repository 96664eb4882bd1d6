#!/bin/sh
# docker/container-test.sh BUILD: the container image, the compose file and
# the Kubernetes manifests, tested for real on this machine with podman and
# nginx (`make container-test` runs it after building BUILD/attnd).
#
#   1. prerequisites  podman, nginx, node, ... installed with apt-get if missing
#   2. base image     debian:bookworm(-slim) made with debootstrap, once
#   3. image          docker/Dockerfile built unchanged; size < 150 MB
#   4. container      /healthz, HEALTHCHECK, the README's worked example,
#                     the image's demo layer, non-root, read-only root, no
#                     capabilities
#   5. drain          `podman stop` (SIGTERM) with requests in flight: they
#                     get their 200, and the container exits 0 within 10 s
#   6. layer volume   a generated Hugging Face-style layer directory mounted
#                     read-only at /layers: listed, a layer request equal to
#                     BUILD/attnd's, the mount read-only; a layer added and
#                     loaded on `podman kill --signal HUP`
#   7. k8s manifests  every docker/k8s manifest against the Kubernetes
#                     schemas, offline, and attnd's own rules
#   8. kube play      the Deployment and ConfigMap run by `podman kube play`,
#                     the layers' claim a podman volume: layer requests, the
#                     mount read-only, SIGHUP through `exec bash -c 'kill -HUP 1'`
#   9. compose        compose.yaml's three replicas and nginx with the layer
#                     directory mounted: layer requests through nginx, one
#                     replica stopped
#  10. failover       three BUILD/attnd behind Debian's nginx with
#                     nginx/nginx.conf, under load (curl, and BUILD/attnd-load
#                     when built); one killed (SIGKILL), one drained
#                     (SIGTERM): no failed request
#  11. sessions       the same, for sessions: every request of an id on one
#                     replica (its key's), fork families together; then
#                     BUILD/attnd-load --mode decode through nginx, with ids
#                     of its own and with POST (ids chosen by nginx), the
#                     replica with the most sessions SIGKILLed under load:
#                     its sessions 404, recreated elsewhere, carried to the
#                     end and verified; every key's successes on one replica
#
# Everything it starts is removed on exit, failed or not. Exits 1 naming the
# check that failed; prints a summary of every check either way.
#
# Environment: ATTND_CT_CACHE (/var/tmp/attnd-container-test) keeps the base
# image's tarball between runs; ATTND_CT_NPM (/tmp/attnd-container-test/npm)
# the npm packages of docker/k8s-check.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail

# Whether $BUILD/attnd-load is built and its --help shows $1. The help is
# read whole first: its text is over the 4 KiB that stdio writes to a pipe
# at once, so grep -q, leaving early, would SIGPIPE attnd-load, and
# pipefail would fail the test.
load_has() {
  [ -x "$BUILD/attnd-load" ] &&
    grep -q -- "$1" <<<"$("$BUILD/attnd-load" --help 2>/dev/null)"
}
export LC_ALL=C

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
cd "$ROOT"

W=$BUILD/container-test # this run's logs and generated files
CACHE=${ATTND_CT_CACHE:-/var/tmp/attnd-container-test}
NPM_DIR=${ATTND_CT_NPM:-/tmp/attnd-container-test/npm}
IMAGE=localhost/attnd:latest # the name compose.yaml and deployment.yaml use
LB_IMAGE=localhost/attnd-lb:latest
BUILD_IMAGE=localhost/attnd-build:latest # the Dockerfile's build stage
CT=attnd-ct # prefix of every container, pod and compose project made here
MAX_IMAGE_BYTES=150000000

# The layers this test mounts: a Llama-style layer (GQA, RoPE, bf16) in a
# Hugging Face-style directory, and the request it answers ([2, 3, 32]).
LAYER0=model.layers.0.self_attn
LAYER1=model.layers.1.self_attn

# The README's worked example: output 4.6.
WORKED='{"query": [[0, 0]], "key": [[0, 0], [0, 0]], "value": [[2, 10], [6, -2]],
 "num_heads": 2,
 "mask": {"bias": [[[-0.22314355, -1.60943791]], [[-1.38629436, -0.28768207]]]},
 "projections": {"o_weight": [[2, -1]]}, "return": {"metrics": false}}'

T_START=$EPOCHREALTIME
SUMMARY=()
CHECK=""
T_CHECK=$EPOCHREALTIME
PIDS=()     # processes started here, ended on exit
USED_PORTS=" "
PORT=""
KUBE_VOLUME="" # the podman volume behind the layers' claim, once made

# ---- reporting --------------------------------------------------------------

# secs T [T2]: the seconds from T to T2 (to now when not given).
secs() { awk -v a="$1" -v b="${2:-$EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }'; }

begin() {
  CHECK=$1
  T_CHECK=$EPOCHREALTIME
  echo
  echo "== $CHECK"
}

pass() {
  local t
  t=$(secs "$T_CHECK")
  SUMMARY+=("$(printf 'PASS  %-14s %6ss  %s' "$CHECK" "$t" "$*")")
  echo "PASS $CHECK (${t}s): $*"
  CHECK=""
}

# Fails the current check with a message, and the run with it.
fail() {
  local t
  t=$(secs "$T_CHECK")
  SUMMARY+=("$(printf 'FAIL  %-14s %6ss  %s' "$CHECK" "$t" "$*")")
  echo "FAIL $CHECK (${t}s): $*" >&2
  CHECK=""
  exit 1
}

# Prints the last lines of a log file, indented, for a failure's context.
show() { [ -f "$1" ] && { echo "--- $1 (last ${2:-20} lines)"; tail -n "${2:-20}" "$1" | sed 's/^/  /'; } >&2 || true; }

# ---- cleanup ------------------------------------------------------------------

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  [ -n "$CHECK" ] && [ $rc -ne 0 ] &&
    SUMMARY+=("$(printf 'FAIL  %-14s %6ss  %s' "$CHECK" "$(secs "$T_CHECK")" "stopped (exit $rc)")")
  echo
  echo "== cleanup"
  [ -d "$W/failover" ] && touch "$W/failover/stop" # the clients' loops end
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  if command -v podman >/dev/null 2>&1; then
    # one name a call: podman 4.3 given a name that is gone among others
    # removes none of them, and says nothing (the drain check removes
    # $CT-run), so a failure after it left $CT-layers running, and the next
    # run failed on its name
    for ct in "$CT-run" "$CT-layers"; do podman rm -f -t 0 "$ct" >/dev/null 2>&1; done
    [ -f "$W/kube/deployment.yaml" ] && podman kube down "$W/kube/deployment.yaml" >/dev/null 2>&1
    [ -n "$KUBE_VOLUME" ] && podman volume rm -f "$KUBE_VOLUME" >/dev/null 2>&1
    if [ -f "$W/compose.up" ]; then
      ATTND_LB_PORT=1 ATTND_LAYERS_DIR=$W/layers podman-compose -p "$CT" -f docker/compose.yaml down -t 2 >/dev/null 2>&1
      podman network rm -f "${CT}_default" >/dev/null 2>&1
    fi
  fi
  sleep 0.2
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  echo
  echo "== summary (logs in $W)"
  for line in "${SUMMARY[@]}"; do echo "$line"; done
  if [ $rc -eq 0 ]; then
    echo "container-test: all checks passed in $(secs "$T_START")s"
  else
    echo "container-test: FAILED after $(secs "$T_START")s" >&2
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- helpers ------------------------------------------------------------------

# shellcheck source=docker/podman.sh
. "$ROOT/docker/podman.sh"

# pick_port: sets PORT to a free TCP port on 127.0.0.1, never the same twice
# in a run. (Not in a subshell: it remembers what it gave.) Below the
# kernel's ephemeral range, and unused in any state: a port that a client's
# connection holds (curl, nginx to its upstreams, other tests here) cannot
# be listened on, and podman's port forwarder then fails with "address
# already in use".
pick_port() {
  local p low high from n
  read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { low=32768; high=60999; }
  if [ "$low" -gt 21000 ]; then from=20000 n=$((low - 20000)); else from=$((high + 1)) n=$((65535 - high)); fi
  [ "$n" -ge 100 ] || { from=20000 n=40000; } # no room outside: anywhere, as before
  for _ in $(seq 200); do
    p=$((from + RANDOM % n))
    case $USED_PORTS in *" $p "*) continue ;; esac
    if [ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ]; then
      USED_PORTS="$USED_PORTS$p "
      PORT=$p
      return 0
    fi
  done
  fail "no free port on 127.0.0.1"
}

# grep_o PATTERN [FILE]: grep -o, succeeding when nothing matches. Under
# pipefail, "$(grep -o X | wc -l)" with no match stops the script with exit 1
# and no message, where the caller wanted a count of 0.
grep_o() { grep -o "$@" || true; }

# http_code URL [curl options...]: the status, 000 when there is none.
http_code() {
  local url=$1
  shift
  curl -s -o /dev/null -w '%{http_code}' -m 5 "$@" "$url" 2>/dev/null || true
}

# wait_for URL CODE SECONDS: until URL answers CODE.
wait_for() {
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do
    [ "$(http_code "$1")" = "$2" ] && return 0
    sleep 0.2
  done
  return 1
}

# worked BASE_URL: POSTs the worked example; succeeds when the output is 4.6
# (to 1e-5). Prints the reply.
worked() {
  local body out
  body=$(curl -s -m 10 -H 'Content-Type: application/json' -d "$WORKED" "$1/v1/attention") || return 1
  echo "$body"
  out=$(printf '%s' "$body" | sed -n 's/.*"output":\[\[\([-0-9.eE+]*\)\]\].*/\1/p')
  [ -n "$out" ] && awk -v x="$out" 'BEGIN { d = x - 4.6; exit !(d < 1e-5 && d > -1e-5) }'
}

# proc_field PID FIELD: a line of /proc/PID/status, without its name.
proc_field() { awk -v f="$2:" '$1 == f { $1 = ""; sub(/^ /, ""); print }' "/proc/$1/status"; }

# check_process PID WHAT: non-root, no capabilities, no_new_privs, and a
# read-only root mount, seen from the host's /proc. Prints a description, or
# what is wrong and fails.
check_process() {
  local pid=$1 what=$2 uid f v
  uid=$(proc_field "$pid" Uid)
  for v in $uid; do
    [ "$v" != 0 ] || { echo "$what (pid $pid) runs as uid 0 (Uid: $uid)"; return 1; }
  done
  for f in CapInh CapPrm CapEff CapBnd CapAmb; do
    v=$(proc_field "$pid" $f)
    [ "$v" = 0000000000000000 ] || { echo "$what (pid $pid) has capabilities: $f $v"; return 1; }
  done
  [ "$(proc_field "$pid" NoNewPrivs)" = 1 ] || { echo "$what (pid $pid) may gain privileges (NoNewPrivs 0)"; return 1; }
  v=$(mount_ro "$pid" /) || { echo "$what: $v"; return 1; }
  echo "$what: uid ${uid%%[[:space:]]*}, no capabilities, no_new_privs, root ro"
}

# mount_ro PID PATH: PATH is mounted read-only where PID sees it (the last
# mount there, the one on top). Prints what is wrong.
mount_ro() {
  local v
  v=$(awk -v p="$2" '$5 == p { v = $6 } END { print v }' "/proc/$1/mountinfo")
  case ,$v, in
  *,ro,*) ;;
  *) echo "$2 (pid $1) mounted '${v:-not at all}', not read-only"; return 1 ;;
  esac
}

# gen_body B L E FILE: a request body with an all-zero float32 query
# [B, L, E] in base64; its reply's output has the same shape.
gen_body() {
  printf '{"query":{"shape":[%d,%d,%d],"dtype":"float32","base64":"%s"},"num_heads":1,"return":{"metrics":false}}' \
    "$1" "$2" "$3" "$(head -c $(($1 * $2 * $3 * 4)) /dev/zero | base64 -w0)" >"$4"
}

# container_pids NAME: the container's init (tini) and its children (attnd).
container_pids() {
  local pid
  pid=$(podman inspect -f '{{.State.Pid}}' "$1")
  [ -n "$pid" ] && [ "$pid" != 0 ] || return 1
  echo "$pid" $(pgrep -P "$pid" || true)
}

# listening_port LOG: the port attnd says it listens on in LOG, within 30 s
# (attnd re-executes itself before it listens, and three start at once: 5 s
# is little on a loaded machine).
listening_port() {
  local p="" end=$((SECONDS + 30))
  while [ $SECONDS -lt $end ]; do
    p=$(sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' "$1")
    [ -n "$p" ] && break
    sleep 0.05
  done
  [ -n "$p" ] && echo "$p"
}

# start_replicas DIR: three BUILD/attnd on loopback ports of their own
# choosing, one worker each, logging to DIR/attndN.log: their ports in
# ports[], their pids in replicas[].
start_replicas() {
  local i p
  ports=()
  replicas=()
  for i in 1 2 3; do
    "$BUILD/attnd" --host 127.0.0.1 --port 0 --workers 1 --access-log off >"$1/attnd$i.log" 2>&1 &
    PIDS+=($!)
    replicas+=($!)
  done
  for i in 1 2 3; do
    p=$(listening_port "$1/attnd$i.log") || { show "$1/attnd$i.log"; fail "attnd $i did not start"; }
    ports+=("$p")
  done
}

# start_lb DIR: Debian's nginx running compose's nginx.conf with only the
# addresses changed (the replicas of ports[] in both of its upstreams, and
# a free loopback port), its access log in DIR/access.log; sets url.
start_lb() {
  local d=$1 lb
  pick_port
  lb=$PORT
  sed -e "s|server attnd1:8080|server 127.0.0.1:${ports[0]}|" \
    -e "s|server attnd2:8080|server 127.0.0.1:${ports[1]}|" \
    -e "s|server attnd3:8080|server 127.0.0.1:${ports[2]}|" \
    -e "s|listen 8080;|listen 127.0.0.1:$lb;|" docker/nginx/nginx.conf >"$d/nginx.conf"
  grep -q "listen 127.0.0.1:$lb;" "$d/nginx.conf" && [ "$(grep -c "server 127.0.0.1:" "$d/nginx.conf")" = 6 ] ||
    fail "docker/nginx/nginx.conf no longer has 'listen 8080;' and servers attnd1..3:8080 in each of its two upstreams"
  local ngx=(nginx -e stderr -c "$d/nginx.conf" -g "daemon off; pid $d/nginx.pid;")
  "${ngx[@]}" -t >"$d/nginx-t.log" 2>&1 || { show "$d/nginx-t.log"; fail "nginx -t rejects the config"; }
  "${ngx[@]}" >"$d/access.log" 2>"$d/nginx.log" &
  PIDS+=($!)
  url=http://127.0.0.1:$lb
  wait_for "$url/healthz" 200 10 || { show "$d/nginx.log"; fail "nginx did not start"; }
}

# The layers' tool, in node (which the manifests' checks need anyway):
#   write FILE N    one Llama-style attention layer, model.layers.N.self_attn
#                   (E = 32, 4 heads, 2 KV heads of 8, no biases), in
#                   bfloat16 as Hugging Face checkpoints hold it; the
#                   weights are a fixed function of N
#   request FILE    a request to model.layers.0.self_attn: hidden states
#                   [2, 3, 32], float32 in base64
#   check OUT [REF] OUT is a reply of output [2, 3, 32], finite and not all
#                   zero; within 1e-5 of REF's output when given
LAYER_JS='
const fs = require("fs");
const [cmd, file, arg] = process.argv.slice(1);
const B = 2, L = 3, E = 32, H = 4, KV = 2, D = 8;
const b64 = (x) => Buffer.from(x.buffer).toString("base64");
const output = (f) => {
  const o = JSON.parse(fs.readFileSync(f, "utf8")).output;
  return { shape: JSON.stringify(o.shape), x: new Float32Array(new Uint8Array(Buffer.from(o.base64, "base64")).buffer) };
};
if (cmd === "write") {
  const n = Number(arg), header = { __metadata__: { format: "pt" } }, blobs = [];
  const f = new Float32Array(1), u = new Uint32Array(f.buffer);
  let off = 0;
  for (const [name, rows, cols] of [["q_proj", H * D, E], ["k_proj", KV * D, E], ["v_proj", KV * D, E], ["o_proj", E, H * D]]) {
    const b = Buffer.alloc(rows * cols * 2);
    for (let i = 0; i < rows * cols; i++) {
      f[0] = 0.3 * Math.sin(0.37 * i + name.charCodeAt(0) + n);
      b.writeUInt16LE(u[0] >>> 16, 2 * i); // bfloat16: the high half of a float32
    }
    header[`model.layers.${n}.self_attn.${name}.weight`] = { dtype: "BF16", shape: [rows, cols], data_offsets: [off, off + b.length] };
    blobs.push(b);
    off += b.length;
  }
  let h = JSON.stringify(header);
  h += " ".repeat((8 - (h.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(h), ...blobs]));
} else if (cmd === "request") {
  const x = new Float32Array(B * L * E).map((_, i) => Math.sin(0.11 * i));
  fs.writeFileSync(file, JSON.stringify({ layer: "model.layers.0.self_attn",
    query: { shape: [B, L, E], dtype: "float32", base64: b64(x) }, return: { metrics: false } }));
} else if (cmd === "check") {
  const a = output(file), want = JSON.stringify([B, L, E]);
  let why = "";
  if (a.shape !== want) why = `output shape ${a.shape}, not ${want}`;
  else if (!a.x.every(Number.isFinite) || a.x.every((v) => v === 0)) why = "output not finite, or all zero";
  else if (arg) {
    const r = output(arg);
    const d = a.x.reduce((m, v, i) => Math.max(m, Math.abs(v - r.x[i])), 0);
    if (!(d <= 1e-5)) why = `output differs from BUILD/attnd\x27s by ${d}`;
  }
  if (why) { console.log(why); process.exit(1); }
}
'

# make_layers DIR: DIR as a directory of layer files with a Hugging Face
# config.json (head counts, RoPE): layer0.safetensors with layer 0, readable
# by anyone (the image runs as uid 10001); and $W/layer-req.json. Not
# model.safetensors: a directory with one reads it alone, as transformers
# does (docs/layers.md), and the SIGHUP steps add a second file beside it.
make_layers() {
  mkdir -p "$1"
  node -e "$LAYER_JS" write "$1/layer0.safetensors" 0
  cat >"$1/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
 "rope_theta": 10000.0, "torch_dtype": "bfloat16"}
EOF
  chmod 755 "$1"
  chmod 644 "$1"/*
  node -e "$LAYER_JS" request "$W/layer-req.json"
}

# layers_are URL PREFIX NAME...: GET URL/v1/layers lists exactly the layers
# NAME..., each from a file under PREFIX. Prints their names, or what is
# wrong.
layers_are() {
  local url=$1 prefix=$2 body names f
  shift 2
  body=$(curl -s -m 5 "$url/v1/layers") || { echo "GET /v1/layers failed"; return 1; }
  names=$(grep_o '"name":"[^"]*"' <<<"$body" | cut -d'"' -f4 | sort | tr '\n' ' ')
  [ "$names" = "$(printf '%s\n' "$@" | sort | tr '\n' ' ')" ] ||
    { echo "GET /v1/layers lists '${names% }', not '$*': $(head -c 300 <<<"$body")"; return 1; }
  for f in $(grep_o '"file":"[^"]*"' <<<"$body" | cut -d'"' -f4); do
    case $f in "$prefix"*) ;; *) echo "layer file $f is not under $prefix"; return 1 ;; esac
  done
  echo "${names% }"
}

# layer_request URL LAYER OUT [REF]: POSTs $W/layer-req.json to LAYER; the
# reply (in OUT) must be a 200 that `check`s (above). Prints what is wrong.
layer_request() {
  local code
  sed "s/\"layer\":\"[^\"]*\"/\"layer\":\"$2\"/" "$W/layer-req.json" >"$3.req"
  code=$(curl -s -o "$3" -w '%{http_code}' -m 10 -H 'Content-Type: application/json' \
    --data-binary @"$3.req" "$1/v1/attention" 2>/dev/null || true)
  [ "$code" = 200 ] || { echo "layer $2: HTTP $code: $(head -c 300 "$3" 2>/dev/null)"; return 1; }
  node -e "$LAYER_JS" check "$3" "${4:-}"
}

# wait_layers URL N SECONDS: until URL/v1/layers lists N layers.
wait_layers() {
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do
    [ "$(curl -s -m 2 "$1/v1/layers" | grep -o '"name":' | wc -l)" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# ---- 1. prerequisites -----------------------------------------------------------

begin prerequisites
mkdir -p "$W" "$CACHE"
find "$W" -mindepth 1 -delete
# podman's own packages are docker/podman.sh's; then the commands this test
# drives beside them, each with the Debian package that provides it.
podman_install podman-compose=podman-compose nginx=nginx curl=curl ss=iproute2 \
  node=nodejs npm=npm
missing=$PODMAN_INSTALLED
[ -x "$BUILD/attnd" ] || fail "$BUILD/attnd is missing: run through 'make container-test'"
podman_configure
pass "${missing:+installed $missing; }podman $(podman --version | awk '{print $3}'), nginx $(nginx -v 2>&1 | sed 's|.*/||'), node $(node --version)"

# ---- 2. base image ----------------------------------------------------------------

begin "base image"
base_image
pass "debian:bookworm and debian:bookworm-slim $BASE_HOW ($(podman image inspect -f '{{.Size}}' $BASE:bookworm-slim | awk '{printf "%.0f MB", $1 / 1e6}'))"

# ---- 3. image -----------------------------------------------------------------------

begin image
echo "podman build (log: $W/build.log)"
# The build stage is tagged too, so that it stays as the next build's cache
# while the images these builds replace are removed.
old_ids=$(podman image inspect -f '{{.Id}}' $IMAGE $BUILD_IMAGE 2>/dev/null || true)
# --format docker: an OCI image has no HEALTHCHECK.
{ podman build --pull=never --format docker -f docker/Dockerfile --target build -t $BUILD_IMAGE . &&
  podman build --pull=never --format docker -f docker/Dockerfile -t $IMAGE .; } >"$W/build.log" 2>&1 ||
  { show "$W/build.log" 30; fail "podman build -f docker/Dockerfile failed"; }
remove_replaced $old_ids
size=$(podman image inspect -f '{{.Size}}' $IMAGE)
mb=$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1e6 }')
echo "image size: $mb MB ($size bytes)"
[ "$size" -lt $MAX_IMAGE_BYTES ] || fail "the image is $mb MB, over $((MAX_IMAGE_BYTES / 1000000)) MB"
user=$(podman image inspect -f '{{.Config.User}}' $IMAGE)
[ "${user%%:*}" != 0 ] && [ -n "$user" ] || fail "the image's USER is '$user'"
grep -q '"Healthcheck"\|"HealthCheck"' <<<"$(podman image inspect $IMAGE)" || fail "the image has no HEALTHCHECK"
pass "$mb MB (limit $((MAX_IMAGE_BYTES / 1000000)) MB), USER $user, HEALTHCHECK present"

# ---- 4. container -----------------------------------------------------------------

begin container
pick_port
port=$PORT
# As Kubernetes' securityContext would run it: read-only root with no tmpfs
# anywhere, no capabilities, no privilege gain; a bridge network of its own.
podman run -d --name "$CT-run" --network bridge -p "127.0.0.1:$port:8080" \
  --read-only --read-only-tmpfs=false --cap-drop ALL \
  --security-opt no-new-privileges --memory 2g --pids-limit 256 \
  $IMAGE >"$W/run.log" 2>&1 || { show "$W/run.log"; fail "podman run failed"; }
url=http://127.0.0.1:$port
wait_for "$url/healthz" 200 20 || { podman logs "$CT-run" >"$W/container.log" 2>&1; show "$W/container.log"; fail "no 200 from /healthz in 20 s"; }
body=$(curl -s -m 5 "$url/healthz") || fail "GET /healthz failed after its 200 (curl exit $?)"
[ "$body" = '{"status":"ok"}' ] || fail "/healthz said $body"
podman healthcheck run "$CT-run" >"$W/healthcheck.log" 2>&1 || { show "$W/healthcheck.log"; fail "the image's HEALTHCHECK failed"; }
reply=$(worked "$url") || fail "worked example: expected output 4.6, got: $reply"
# The image's default ATTND_LAYERS: its demo layer. Three tokens at
# positions 10 to 12, weights averaged over the heads (docs/layers.md).
demo=$(layers_are "$url" /usr/share/attnd/layers/ demo) || fail "the image's demo layer: $demo"
printf '{"layer":"demo","query":{"shape":[3,64],"base64":"%s"},"positions":{"query":[10,11,12],"key":[10,11,12]},"return":{"weights":"mean","metrics":false}}' \
  "$(head -c 768 /dev/zero | base64 -w0)" >"$W/demo.json"
code=$(curl -s -o "$W/demo.out" -w '%{http_code}' -m 10 -H 'Content-Type: application/json' --data-binary @"$W/demo.json" "$url/v1/attention" || true)
[ "$code" = 200 ] && grep -q '"output":{"shape":\[3,64\]' "$W/demo.out" && grep -q '"weights":{"shape":\[3,3\]' "$W/demo.out" ||
  fail "a request to the demo layer got $code: $(head -c 300 "$W/demo.out")"
podman logs "$CT-run" >"$W/container.log" 2>&1
grep -q '"event":"listening","host":"0.0.0.0","port":8080' "$W/container.log" ||
  { show "$W/container.log"; fail "attnd is not listening on 0.0.0.0:8080 inside the container"; }
if grep -q 're-executing to set up OpenBLAS' "$W/container.log"; then fail "attnd could not re-execute itself"; fi
pids=$(container_pids "$CT-run") || fail "no process for $CT-run"
set -- $pids
[ $# -eq 2 ] || fail "expected tini and attnd in the container, found pids: $pids"
d1=$(check_process "$1" tini) || fail "$d1"
d2=$(check_process "$2" attnd) || fail "$d2"
# (read whole first, as in load_has: grep -q leaving early could SIGPIPE tr)
grep -qx 'OPENBLAS_NUM_THREADS=1' <<<"$(tr '\0' '\n' <"/proc/$2/environ")" ||
  fail "attnd did not re-execute itself with OPENBLAS_NUM_THREADS=1"
info=$(curl -s -m 5 "$url/v1/info") || fail "GET /v1/info failed (curl exit $?)"
kernel=$(sed -n 's/.*"blas_kernel":"\([^"]*\)".*/\1/p' <<<"$info")
# Even root in the container (no capabilities) writes nowhere.
out=$(podman exec --user 0 "$CT-run" sh -c \
  'for f in /probe /tmp/probe /var/tmp/probe /run/probe; do touch "$f" 2>&1 && echo "wrote $f"; done' 2>&1 || true)
[ "$(grep -c 'Read-only file system' <<<"$out")" = 4 ] || fail "the container's filesystem is writable: $out"
# The limits attnd sizes itself by, read from its own cgroup inside a
# container (server/cgroup.c; podman's default namespace here names the
# host's cgroup path in /proc/self/cgroup): 1 GiB and one CPU give
# max_memory_bytes 3/4 of the GiB and one worker.
podman run --rm --memory 1g --cpus 1 $IMAGE --print-config >"$W/cgroup.log" 2>&1 ||
  { show "$W/cgroup.log"; fail "podman run --print-config failed"; }
grep -qx 'max_memory_bytes = 805306368' "$W/cgroup.log" && grep -qx 'workers = 1' "$W/cgroup.log" ||
  { show "$W/cgroup.log"; fail "with --memory 1g --cpus 1, attnd did not size itself by the container's limits"; }
pass "/healthz 200, HEALTHCHECK healthy, output 4.6, listening on 0.0.0.0:8080; demo layer served by default (output [3, 64], weights [3, 3]); $d1; $d2; /, /tmp, /var/tmp, /run read-only; OpenBLAS re-exec ok ($kernel); --memory 1g --cpus 1: max_memory_bytes 768 MiB, 1 worker"

# ---- 5. drain ---------------------------------------------------------------------

begin drain
# Two requests in flight when SIGTERM comes: one computing (about 1.5 s
# here), one still uploading (1.4 MB at 700 KB/s). Both must get their 200.
gen_body 2 32768 16 "$W/compute.json"
gen_body 1 16384 16 "$W/upload.json"
post() { curl -s -o "$W/$1.out" -w '%{http_code}' -m 30 -H 'Content-Type: application/json' "${@:3}" --data-binary "@$W/$2" "$url/v1/attention" >"$W/$1.code" 2>"$W/$1.err" || true; }
post upload upload.json --limit-rate 700K &
up_pid=$!
post compute compute.json &
co_pid=$!
busy=0
for _ in $(seq 100); do
  # (a poll that gets no answer polls again)
  busy=$(curl -s -m 2 "$url/metrics" | awk '$1 == "attnd_busy_workers" { print $2 }' || true)
  [ "${busy:-0}" -ge 1 ] && break
  sleep 0.05
done
[ "${busy:-0}" -ge 1 ] || fail "the compute request never started"
t0=$EPOCHREALTIME
podman stop -t 10 "$CT-run" >"$W/stop.log" 2>&1 &
stop_pid=$!
ready=""
while kill -0 $stop_pid 2>/dev/null; do
  c=$(http_code "$url/readyz" -m 1)
  [ "$c" = 503 ] && ready=503
  sleep 0.1
done
wait $stop_pid || { show "$W/stop.log"; fail "podman stop failed"; }
stop_s=$(secs "$t0")
wait $up_pid $co_pid
podman logs "$CT-run" >"$W/container.log" 2>&1
exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$CT-run")
for r in compute upload; do
  code=$(cat "$W/$r.code")
  [ "$code" = 200 ] && grep -q '"shape":\[[12],[0-9]*,16\]' "$W/$r.out" ||
    { show "$W/container.log"; fail "the $r request in flight got '$code' ($(head -c 200 "$W/$r.out"; cat "$W/$r.err"))"; }
done
awk -v s="$stop_s" 'BEGIN { exit !(s < 10) }' || fail "podman stop took ${stop_s}s (SIGKILL after 10 s)"
[ "$exit_code" = 0 ] || { show "$W/container.log"; fail "the container exited $exit_code, not 0"; }
grep -q '"event":"draining","signal":15' "$W/container.log" || fail "attnd never saw SIGTERM"
[ "$ready" = 503 ] || fail "/readyz never answered 503 while draining"
podman rm "$CT-run" >"$W/rm.log" 2>&1 || { show "$W/rm.log"; fail "podman rm $CT-run failed"; }
pass "stopped in ${stop_s}s, exit 0; /readyz 503 while draining; computing and uploading requests both got 200"

# ---- 6. layer volume ---------------------------------------------------------------

begin "layer volume"
# The reference: BUILD/attnd on the same directory.
make_layers "$W/layers"
"$BUILD/attnd" --host 127.0.0.1 --port 0 --workers 1 --access-log off --layers "$W/layers" >"$W/layer-ref.log" 2>&1 &
ref_pid=$!
PIDS+=("$ref_pid")
ref_port=$(listening_port "$W/layer-ref.log") || { show "$W/layer-ref.log"; fail "BUILD/attnd did not start on $W/layers"; }
d=$(layer_request "http://127.0.0.1:$ref_port" $LAYER0 "$W/layer-ref.json") || fail "BUILD/attnd: $d"
kill -TERM $ref_pid
wait $ref_pid || true
# The image as a deployment runs it: read-only, the layers on a read-only
# bind mount at /layers.
pick_port
port=$PORT
podman run -d --name "$CT-layers" --network bridge -p "127.0.0.1:$port:8080" \
  --read-only --read-only-tmpfs=false --cap-drop ALL --security-opt no-new-privileges \
  -v "$W/layers:/layers:ro" -e ATTND_LAYERS=/layers \
  $IMAGE >"$W/layers-run.log" 2>&1 || { show "$W/layers-run.log"; fail "podman run -v $W/layers:/layers:ro failed"; }
url=http://127.0.0.1:$port
wait_for "$url/healthz" 200 20 || { podman logs "$CT-layers" >"$W/layers.log" 2>&1; show "$W/layers.log"; fail "no 200 from /healthz in 20 s"; }
d=$(layers_are "$url" /layers/ $LAYER0) || fail "$d"
d=$(layer_request "$url" $LAYER0 "$W/layer-volume.out" "$W/layer-ref.json") || fail "$d"
pids=$(container_pids "$CT-layers") || fail "no process for $CT-layers"
set -- $pids
d=$(mount_ro "${!#}" /layers) || fail "$d"
out=$(podman exec --user 0 "$CT-layers" touch /layers/probe 2>&1 || true)
grep -q 'Read-only file system' <<<"$out" || fail "/layers is writable in the container: $out"
# A layer added, then SIGHUP from outside: tini passes it on, attnd loads
# the directory again.
node -e "$LAYER_JS" write "$W/layers/extra.safetensors" 1
chmod 644 "$W/layers/extra.safetensors"
t0=$EPOCHREALTIME
podman kill --signal HUP "$CT-layers" >/dev/null 2>&1 || fail "podman kill --signal HUP failed"
wait_layers "$url" 2 10 || { podman logs "$CT-layers" >"$W/layers.log" 2>&1; show "$W/layers.log"; fail "no second layer 10 s after SIGHUP"; }
hup_s=$(secs "$t0")
d=$(layer_request "$url" $LAYER1 "$W/layer-volume1.out") || fail "after SIGHUP: $d"
podman logs "$CT-layers" >"$W/layers.log" 2>&1
grep -q '"event":"layers_reloaded","layers":2' "$W/layers.log" || { show "$W/layers.log"; fail "attnd did not log layers_reloaded"; }
rm -f "$W/layers/extra.safetensors"
podman rm -f -t 0 "$CT-layers" >/dev/null 2>&1
pass "${W#"$ROOT"/}/layers (config.json, bf16 Llama layer) read-only at /layers: listed, request equal to BUILD/attnd's (output [2, 3, 32]); /layers ro for attnd, root cannot write it; a layer added + podman kill --signal HUP: 2 layers in ${hup_s}s"

# ---- 7. k8s manifests -------------------------------------------------------------

begin "k8s manifests"
mkdir -p "$NPM_DIR"
if ! cmp -s docker/k8s-check/package-lock.json "$NPM_DIR/package-lock.json" || [ ! -d "$NPM_DIR/node_modules" ]; then
  echo "npm ci in $NPM_DIR (log: $W/npm.log)"
  rm -rf "$NPM_DIR/node_modules"
  cp docker/k8s-check/package.json docker/k8s-check/package-lock.json "$NPM_DIR/"
  (cd "$NPM_DIR" && npm ci --no-audit --no-fund) >"$W/npm.log" 2>&1 || { show "$W/npm.log"; fail "npm ci failed"; }
fi
cp docker/k8s-check/*.mjs "$NPM_DIR/"
manifests=$(find "$ROOT/docker/k8s" -name '*.yaml' | sort)
node "$NPM_DIR/validate.mjs" $manifests | tee "$W/validate.log" | sed "s|$ROOT/||" || fail "a manifest does not validate (above)"
keys=$("$BUILD/attnd" --print-config | awk -F' = ' '!/^#/ { printf "%s%s", s, $1; s = "," }')
node "$NPM_DIR/policy.mjs" --keys "$keys" --compose "$ROOT/docker/compose.yaml" $manifests | tee "$W/policy.log" ||
  fail "a rule for attnd's manifests does not hold (above)"
# The ConfigMap's values, read by attnd itself; and the collision that
# enableServiceLinks: false avoids.
cm_env=$(awk '/^data:/ { d = 1; next } d && /^  ATTND_/ { sub(/^  /, ""); sub(/: */, "="); gsub(/"/, ""); print }' docker/k8s/configmap.yaml)
env -i $cm_env "$BUILD/attnd" --print-config >"$W/configmap-config.log" 2>&1 ||
  { show "$W/configmap-config.log"; fail "attnd rejects the ConfigMap's values"; }
if env -i ATTND_PORT=tcp://10.96.0.10:8080 "$BUILD/attnd" --print-config >"$W/service-link.log" 2>&1; then
  fail "attnd accepted ATTND_PORT=tcp://...: update the service-link comments"
fi
n=$(grep -c '^ok' "$W/validate.log" || true)
[ "$n" -ge 1 ] || { show "$W/validate.log"; fail "validate.mjs passed but printed no 'ok' line (log: $W/validate.log)"; }
pass "$n manifests valid (schemas, no unknown fields); $(grep -c '^ok' "$W/policy.log") rules hold; attnd accepts the ConfigMap; a service link would stop it: $(head -1 "$W/service-link.log")"

# ---- 8. kube play -------------------------------------------------------------------

begin "kube play"
pick_port
port=$PORT
mkdir -p "$W/kube"
node "$NPM_DIR/podman-variant.mjs" docker/k8s/deployment.yaml "$W/kube/deployment.yaml" "$CT" "$port"
image=$(awk '$1 == "image:" { print $2; exit }' docker/k8s/deployment.yaml)
podman tag $IMAGE "$image"
# The layers' claim: kube play mounts the podman volume named like it (the
# copy names it $CT-CLAIM), made and filled here first, as the claim's
# volume must hold the files before the pods start. (podman's own
# PersistentVolumeClaim object would make an empty one.)
claim=$(awk '$1 == "claimName:" { print $2; exit }' docker/k8s/deployment.yaml)
[ -n "$claim" ] || fail "docker/k8s/deployment.yaml mounts no persistentVolumeClaim"
KUBE_VOLUME=$CT-$claim
podman volume rm -f "$KUBE_VOLUME" >/dev/null 2>&1 || true
podman volume create "$KUBE_VOLUME" >"$W/kube/volume.log" 2>&1 || { show "$W/kube/volume.log"; fail "podman volume create failed"; }
vol=$(podman volume inspect -f '{{.Mountpoint}}' "$KUBE_VOLUME")
cp -p "$W/layers/layer0.safetensors" "$W/layers/config.json" "$vol/"
podman kube play --network bridge --configmap docker/k8s/configmap.yaml "$W/kube/deployment.yaml" >"$W/kube/play.log" 2>&1 ||
  { show "$W/kube/play.log"; fail "podman kube play failed"; }
url=http://127.0.0.1:$port
ctr=$CT-pod-0-attnd
wait_for "$url/healthz" 200 20 || { podman logs "$ctr" >"$W/kube/attnd.log" 2>&1; show "$W/kube/attnd.log"; fail "no 200 from /healthz through the pod in 20 s"; }
reply=$(worked "$url") || fail "worked example through the pod: $reply"
info=$(curl -s -m 5 "$url/v1/info") || fail "GET /v1/info through the pod failed (curl exit $?)"
want=$(awk '$1 == "ATTND_QUEUE_DEPTH:" { gsub(/"/, "", $2); print $2 }' docker/k8s/configmap.yaml)
case $info in *"\"queue_depth\":$want,"*) ;; *) fail "the ConfigMap did not reach attnd (queue_depth $want): $info" ;; esac
# The ConfigMap's ATTND_LAYERS, on the claim's volume.
d=$(layers_are "$url" /layers/ $LAYER0) || fail "layers through the pod: $d"
d=$(layer_request "$url" $LAYER0 "$W/kube/layer.out" "$W/layer-ref.json") || fail "through the pod: $d"
pids=$(container_pids "$ctr") || fail "no process for $ctr"
set -- $pids
proc=$(check_process "${!#}" attnd) || fail "$proc"
ro=$(mount_ro "${!#}" /layers) || fail "the claim's volume: $ro"
# A layer added to the volume, and SIGHUP as `kubectl exec` sends it (the
# image has no kill binary: bash's builtin).
node -e "$LAYER_JS" write "$vol/extra.safetensors" 1
chmod 644 "$vol/extra.safetensors"
podman exec "$ctr" bash -c 'kill -HUP 1' >"$W/kube/hup.log" 2>&1 || { show "$W/kube/hup.log"; fail "exec bash -c 'kill -HUP 1' failed"; }
wait_layers "$url" 2 10 || { podman logs "$ctr" >"$W/kube/attnd.log" 2>&1; show "$W/kube/attnd.log"; fail "no second layer 10 s after SIGHUP"; }
d=$(layer_request "$url" $LAYER1 "$W/kube/layer1.out") || fail "after SIGHUP: $d"
t0=$EPOCHREALTIME
podman kube down "$W/kube/deployment.yaml" >"$W/kube/down.log" 2>&1 || { show "$W/kube/down.log"; fail "podman kube down failed"; }
down_s=$(secs "$t0")
[ -z "$(podman pod ps -q --filter name="$CT-pod")" ] || fail "pods left after kube down"
mv "$W/kube/deployment.yaml" "$W/kube/deployment.played.yaml" # nothing left to take down
podman volume rm -f "$KUBE_VOLUME" >/dev/null 2>&1 || fail "podman volume rm $KUBE_VOLUME failed"
KUBE_VOLUME=""
pass "image $image: /healthz 200 and output 4.6 through the pod, ConfigMap applied (queue_depth $want, layers /layers); claim $claim as a podman volume: layer listed, request equal to BUILD/attnd's, /layers ro; exec bash -c 'kill -HUP 1' loaded a layer added; $proc; torn down in ${down_s}s"

# ---- 9. compose -----------------------------------------------------------------------

begin compose
echo "podman build docker/nginx (log: $W/lb-build.log)"
old_ids=$(podman image inspect -f '{{.Id}}' $LB_IMAGE 2>/dev/null || true)
podman build --pull=never --format docker -t $LB_IMAGE docker/nginx >"$W/lb-build.log" 2>&1 ||
  { show "$W/lb-build.log"; fail "podman build docker/nginx failed"; }
remove_replaced $old_ids
pick_port
port=$PORT
touch "$W/compose.up"
export ATTND_LAYERS_DIR=$W/layers # the replicas' layer volume
ATTND_LB_PORT=$port podman-compose -p "$CT" -f docker/compose.yaml up -d >"$W/compose-up.log" 2>&1 ||
  { show "$W/compose-up.log"; fail "podman-compose up failed"; }
url=http://127.0.0.1:$port
# Every replica healthy (the image's HEALTHCHECK) before a request goes
# through nginx, not once nginx answers: nginx answers when one replica is
# up, a request it sent to one still starting marks that one failed for 5 s
# (max_fails=1), and the requests below would spread over two.
for i in 1 2 3; do
  end=$((SECONDS + 30))
  until podman healthcheck run "${CT}_attnd${i}_1" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || { show "$W/compose-up.log"; fail "replica attnd$i not healthy in 30 s"; }
    sleep 0.2
  done
done
wait_for "$url/healthz" 200 30 || { show "$W/compose-up.log"; fail "no 200 from /healthz through nginx in 30 s"; }
for i in 1 2 3; do
  [ "$(podman inspect -f '{{.HostConfig.ReadonlyRootfs}}' "${CT}_attnd${i}_1")" = true ] || fail "replica attnd$i: root not read-only"
  rw=$(podman inspect -f '{{range .Mounts}}{{if eq .Destination "/layers"}}{{.RW}}{{end}}{{end}}' "${CT}_attnd${i}_1")
  [ "$rw" = false ] || fail "replica attnd$i: /layers mounted '${rw:-not at all}', not read-only"
  # compose.yaml's mem_limit (3g): attnd's memory budget is 3/4 of it, not
  # of the host's memory.
  mm=$(podman exec "${CT}_attnd${i}_1" attnd --print-config | sed -n 's/^max_memory_bytes = //p') ||
    fail "replica attnd$i: podman exec attnd --print-config failed (above)"
  [ "$mm" = 2415919104 ] || fail "replica attnd$i: max_memory_bytes $mm, not 3/4 of compose.yaml's mem_limit 3g"
done
for i in $(seq 9); do reply=$(worked "$url") || fail "worked example through nginx: $reply"; done
# The layer, through nginx: listed, and six requests (two a replica).
d=$(layers_are "$url" /layers/ $LAYER0) || fail "through nginx: $d"
for i in $(seq 6); do
  d=$(layer_request "$url" $LAYER0 "$W/compose-layer.out" "$W/layer-ref.json") || fail "through nginx: $d"
done
# nginx logs a request after its reply has gone, and podman's copy of the
# log lags behind that: read it until it holds all 15 POSTs (the 9 worked
# examples and the 6 layer requests), not once, when the last ones may be
# missing and tail -6 below would count a worked example.
end=$((SECONDS + 10))
while :; do
  podman logs "${CT}_lb_1" >"$W/compose-lb.log" 2>"$W/compose-lb.err" ||
    { show "$W/compose-lb.err"; fail "podman logs ${CT}_lb_1 failed"; }
  [ "$(grep -c 'POST /v1/attention' "$W/compose-lb.log" || true)" -ge 15 ] && break
  [ $SECONDS -lt $end ] || fail "nginx's log holds $(grep -c 'POST /v1/attention' "$W/compose-lb.log" || true) of the 15 POST /v1/attention sent (log: $W/compose-lb.log)"
  sleep 0.2
done
spread=$(grep_o 'upstream=[0-9.:]*' "$W/compose-lb.log" | sort -u | wc -l)
[ "$spread" -eq 3 ] || fail "nginx used $spread replicas, not 3 (log: $W/compose-lb.log)"
layer_spread=$({ grep 'POST /v1/attention' "$W/compose-lb.log" || true; } | tail -6 | grep_o 'upstream=[0-9.:]*' | sort -u | wc -l)
[ "$layer_spread" -eq 3 ] || fail "the layer requests went to $layer_spread replicas, not 3 (log: $W/compose-lb.log)"
# One replica stopped (drained) under a little load: every request answered.
codes=$W/compose-codes
: >"$codes"
(for i in $(seq 60); do http_code "$url/v1/attention" -H 'Content-Type: application/json' -d "$WORKED" >>"$codes"; echo >>"$codes"; done) &
loop=$!
sleep 0.3
podman stop -t 10 "${CT}_attnd2_1" >/dev/null 2>&1 || fail "podman stop attnd2 failed"
wait $loop
bad=$(grep -cv '^200$' "$codes" || true)
[ "$bad" = 0 ] || fail "$bad of $(wc -l <"$codes") requests failed while attnd2 stopped: $(sort "$codes" | uniq -c | tr '\n' ' ')"
t0=$EPOCHREALTIME
ATTND_LB_PORT=$port podman-compose -p "$CT" -f docker/compose.yaml down -t 10 >"$W/compose-down.log" 2>&1 ||
  { show "$W/compose-down.log"; fail "podman-compose down failed"; }
podman network rm -f "${CT}_default" >/dev/null 2>&1 || true
rm -f "$W/compose.up"
pass "3 replicas healthy behind nginx, spread over 3, each with ${W#"$ROOT"/}/layers read-only at /layers; the layer listed and 6 requests equal to BUILD/attnd's, over 3 replicas; 60 requests while one replica stopped: all 200; down in $(secs "$t0")s"

# ---- 10. failover ------------------------------------------------------------------------

begin failover
F=$W/failover
mkdir -p "$F"
start_replicas "$F"
start_lb "$F"

# The load: 6 clients in closed loops, each request causal self-attention
# over 2048 keys (E = 64, H = 4, 1.4 MB of JSON in, 1 MB out: about 100 ms
# under this load), each reply compared with the one replica 1 gave before
# the load.
awk 'BEGIN { L = 2048; E = 64; printf "{\"query\":{\"shape\":[%d,%d],\"data\":[", L, E
  for (i = 0; i < L * E; i++) printf "%s%.4f", (i ? "," : ""), sin(i * 0.37) * 2
  printf "]},\"num_heads\":4,\"mask\":{\"causal\":true},\"return\":{\"metrics\":false,\"encoding\":\"flat\"}}" }' >"$F/req.json"
code=$(curl -s -o "$F/ref.out" -w '%{http_code}' -m 30 -H 'Content-Type: application/json' \
  --data-binary @"$F/req.json" "http://127.0.0.1:${ports[0]}/v1/attention" || true)
[ "$code" = 200 ] || fail "the reference request got $code: $(head -c 300 "$F/ref.out")"
client() { # N: loops until $F/stop exists; one line per request: time code ok|wrong
  local n=$1 c
  while [ ! -e "$F/stop" ]; do
    c=$(curl -s -o "$F/c$n.out" -w '%{http_code}' -m 60 -H 'Content-Type: application/json' \
      --data-binary @"$F/req.json" "$url/v1/attention" 2>/dev/null || true)
    if [ "$c" = 200 ] && cmp -s "$F/c$n.out" "$F/ref.out"; then
      echo "$EPOCHREALTIME $c ok"
    else
      echo "$EPOCHREALTIME ${c:-000} wrong"
      cp "$F/c$n.out" "$F/c$n.failed.$EPOCHREALTIME" 2>/dev/null || true
    fi
  done >"$F/client$n.log"
}
clients=()
for n in 1 2 3 4 5 6; do
  client $n &
  clients+=($!)
  PIDS+=($!)
done
# attnd-load too, when it is there: two more requests in flight (L = 512),
# some replies checked against the core, and no error allowed. Six to check:
# a loaded machine answered 18 in the 8 s (2 req/s), and a reply to check
# that never came fails the run.
load=""
if load_has --max-error-rate; then
  "$BUILD/attnd-load" --url "$url" --lengths 512 --concurrency 2 --warmup 0 --duration 8 \
    --verify 6 --max-error-rate 0 --out "$F" --name attnd-load >"$F/attnd-load.log" 2>&1 &
  load=$!
  PIDS+=($!)
fi
# ok_since T: the replies that came back right after time T, all clients'.
ok_since() { cat "$F"/client*.log | awk -v t="$1" '$1 > t && $3 == "ok"' | wc -l; }
# wait_ok T N: until N replies came back right after time T, or 60 s. The
# load ends on the replies that the checks below count, not after a fixed
# 3.5 s past the SIGTERM: on a loaded machine a request can take a second,
# too few of them for the counts. When failover is broken, they never come.
wait_ok() {
  local end=$((SECONDS + 60))
  while [ "$(ok_since "$1")" -lt "$2" ] && [ $SECONDS -lt $end ]; do sleep 0.1; done
}
t_load=$EPOCHREALTIME
sleep 2.5
t_kill=$EPOCHREALTIME
{ kill -KILL "${replicas[0]}" && wait "${replicas[0]}"; } 2>/dev/null || true
# Keep replica 2 draining for a while after its SIGTERM, answering 503 to
# what nginx sends it: a slow upload straight to it (1.4 MB at 500 KB/s,
# 2.8 s), which must get its 200 too.
gen_body 1 16384 16 "$F/upload.json"
curl -s -o "$F/upload.out" -w '%{http_code}' -m 30 --limit-rate 500K -H 'Content-Type: application/json' \
  --data-binary @"$F/upload.json" "http://127.0.0.1:${ports[1]}/v1/attention" >"$F/upload.code" 2>&1 &
upload=$!
sleep 2
t_term=$EPOCHREALTIME
kill -TERM "${replicas[1]}"
sleep 3.5
wait_ok "$t_term" 5 # after_kill, the replies after t_kill, are more
wait_ok "$t_load" 30
load_s=$(secs "$t_load")
touch "$F/stop"
wait "${clients[@]}"
# (curl failing on the upload is a status the check below reports: wait
# would pass its exit on, and set -e would end the run without a word)
wait "$upload" || true
load_rc=0
load_says="not built"
if [ -n "$load" ]; then
  wait "$load" || load_rc=$?
  load_says=$(sed -n 's/^step 1 [^:]*: \([0-9]*\/[0-9]* ok, [0-9]* errors\).*/\1/p' "$F/attnd-load.log")
fi
rc2=0
wait "${replicas[1]}" || rc2=$?
total=$(cat "$F"/client*.log | wc -l)
wrong=$(cat "$F"/client*.log | grep -c ' wrong$' || true)
after_kill=$(ok_since "$t_kill")
after_term=$(ok_since "$t_term")
retried=$(grep -c 'upstream=[^ ]*, ' "$F/access.log" || true)
retried_503=$(grep 'upstream=[^ ]*, ' "$F/access.log" | grep -c 'ustatus=[^ ]*503' || true)
echo "requests: $total, failed: $wrong; answered after the SIGKILL: $after_kill, after the SIGTERM: $after_term; retried by nginx: $retried ($retried_503 after a 503); attnd-load: $load_says"
[ "$wrong" = 0 ] || { grep -h ' wrong$' "$F"/client*.log | head -5 >&2 || true; fail "$wrong of $total requests failed or came back wrong"; }
[ "$load_rc" = 0 ] || { show "$F/attnd-load.log"; fail "attnd-load exited $load_rc: $load_says"; }
[ "$total" -ge 30 ] || fail "only $total requests in ${load_s}s: the load did not run"
[ "$after_kill" -ge 5 ] || fail "only $after_kill requests answered after the SIGKILL"
[ "$after_term" -ge 5 ] || fail "only $after_term requests answered after the SIGTERM"
[ "$retried" -ge 1 ] || fail "nginx retried nothing: the failover was not exercised"
[ "$rc2" = 0 ] || { show "$F/attnd2.log"; fail "the SIGTERM'd replica exited $rc2, not 0"; }
[ "$(cat "$F/upload.code")" = 200 ] || fail "the upload in flight on the SIGTERM'd replica got $(cat "$F/upload.code")"
[ "$retried_503" -ge 1 ] || fail "nginx never retried after a 503 from the draining replica"
grep -q '"event":"stopped","exit_code":0' "$F/attnd2.log" || fail "the SIGTERM'd replica did not drain"
pass "curl: $total requests, 0 failed, every reply identical; attnd-load: $load_says; replica 1 SIGKILLed at $(secs "$t_load" "$t_kill") s, replica 2 SIGTERMed at $(secs "$t_load" "$t_term") s (drained its upload, exit 0); nginx retried $retried ($retried_503 on a 503)"

# ---- 11. sessions ----------------------------------------------------------------------

begin sessions
S=$W/sessions
mkdir -p "$S"
start_replicas "$S"
start_lb "$S"

# log_fields FILE: one line per request of nginx's log (nginx.conf's
# log_format attnd): method, path, status, skey, and the replicas tried,
# comma-separated ("-" for an empty key).
log_fields() {
  awk -F'"' '{
    split($2, q, " "); split($3, a, " ")
    u = $3; sub(/.*upstream=/, "", u); sub(/ ustatus=.*/, "", u); gsub(/ /, "", u)
    k = $3; sub(/.*skey=/, "", k); sub(/ .*/, "", k)
    print q[1], q[2], a[1], (k == "" ? "-" : k), u
  }' "$1"
}
# hex N: N random hex digits.
hex() { head -c $(($1 / 2)) /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# 1. Routing, with ids that no replica has: a step, GET and DELETE of each
# must reach one replica, the one its key hashes to, and answer its 404
# unknown_session (no 502: the replicas are up); the keys spread over the
# three; ids that share their first 16 digits (a fork's family) share it.
ids=()
for _ in $(seq 24); do ids+=("$(hex 32)"); done
for f in 1 2; do
  fam=$(hex 16)
  for _ in 1 2 3 4; do ids+=("$fam$(hex 16)"); done
done
: >"$S/routing.codes"
for id in "${ids[@]}"; do
  {
    # (a transport error is a 000, which the count below reports)
    rm -f "$S/step.out"
    curl -s -o "$S/step.out" -w '%{http_code} ' -m 5 -H 'Content-Type: application/json' -d '{}' "$url/v1/sessions/$id/attention" || true
    grep -qs '"code":"unknown_session"' "$S/step.out" && echo unknown_session || echo "other: $(head -c 100 "$S/step.out" 2>/dev/null)"
    http_code "$url/v1/sessions/$id"
    echo
    http_code "$url/v1/sessions/$id" -X DELETE
    echo
  } >>"$S/routing.codes"
done
n_req=$((3 * ${#ids[@]}))
bad=$(grep -cvE '^404( unknown_session)?$' "$S/routing.codes" || true)
[ "$bad" = 0 ] || fail "$bad of $n_req requests for unknown sessions were not a 404 unknown_session: $(grep -vE '^404( unknown_session)?$' "$S/routing.codes" | sort | uniq -c | head -3 | tr '\n' ' ')"
log_fields "$S/access.log" >"$S/routing.log"
split=$(awk '$2 ~ /^\/v1\/sessions\// { print $4, $5 }' "$S/routing.log" | sort -u | awk '{ print $1 }' | uniq -d | wc -l)
[ "$split" = 0 ] || fail "$split session keys reached more than one replica (log: $S/access.log)"
spread=$(awk '$2 ~ /^\/v1\/sessions\// { print $5 }' "$S/routing.log" | sort -u | wc -l)
[ "$spread" = 3 ] || fail "${#ids[@]} session ids went to $spread replicas, not 3"
fams=$(for id in "${ids[@]:24}"; do { grep " ${id:0:16} " "$S/routing.log" || true; } | awk '{ print substr($4, 1, 16), $5 }'; done | sort -u | wc -l)
[ "$fams" = 2 ] || fail "the ids of two fork families went to $fams (family, replica) pairs, not 2"
routing="${#ids[@]} unknown ids (2 families of 4 sharing 16 digits): each id's step, GET and DELETE on one replica, 404 unknown_session, over 3 replicas, each family on one"

# 2. Creation: attnd takes the id it is given (PUT /v1/sessions/{id}, what
# nginx sends for a POST /v1/sessions; docs/deployment.md).
probe=$(hex 32)
code=$(curl -s -o "$S/put.out" -w '%{http_code}' -m 5 -X PUT -H 'Content-Type: application/json' \
  -d '{"num_heads":1,"head_dim":4}' "http://127.0.0.1:${ports[0]}/v1/sessions/$probe" 2>/dev/null || true)
[ "$code" = 201 ] || fail "PUT /v1/sessions/$probe answered $code, not 201: $(head -c 200 "$S/put.out")"
{
  http_code "http://127.0.0.1:${ports[0]}/v1/sessions/$probe" -X DELETE >/dev/null
  grep -q "\"session\":\"$probe\"" "$S/put.out" || fail "PUT /v1/sessions/$probe made another id: $(head -c 200 "$S/put.out")"
  load_has '--mode request|decode' ||
    fail "$BUILD/attnd-load has no --mode decode: run through 'make container-test'"
  # csv_col FILE NAME: column NAME of the CSV's first row; fails, saying
  # so, where there is no such column or row (an empty value would end the
  # arithmetic below in a bare syntax error).
  csv_col() {
    awk -F, -v c="$2" -v f="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i } NR == 2 && k { print $k; found = 1 }
      END { if (!found) { print "container-test: no column " c " in the first row of " f > "/dev/stderr"; exit 1 } }' "$1"
  }
  dec=(--mode decode --url "$url" --prefill 64 --embed 64 --heads 4 --kv-heads 2 --rope half --out "$S")

  # 3. Sessions with ids of the client's own, through nginx: all of it
  # answered, verified, no recreation.
  "$BUILD/attnd-load" "${dec[@]}" --create put --sessions 6 --steps 20 --concurrency 3 --verify 6 \
    --name put >"$S/put.log" 2>&1 || { rc=$?; show "$S/put.log"; fail "attnd-load --create put through nginx exited $rc"; }
  [ "$(csv_col "$S/put.csv" recreated)" = 0 ] && [ "$(csv_col "$S/put.csv" verified)" = 6 ] ||
    { show "$S/put.log"; fail "attnd-load --create put: $(csv_col "$S/put.csv" recreated) recreated, $(csv_col "$S/put.csv" verified) of 6 verified"; }

  # 4. Under load, POST /v1/sessions (nginx chooses the ids), and the
  # replica with the most sessions SIGKILLed once 1500 steps are done: its
  # sessions answer 404 from the next replica on the ring, attnd-load
  # creates them again there and carries them to the end; the only errors
  # allowed are the steps that were in flight on it (502, at most the
  # concurrency), all of them sent again.
  sessions=12 steps=600 conc=6
  "$BUILD/attnd-load" "${dec[@]}" --sessions $sessions --steps $steps --concurrency $conc \
    --verify $sessions --max-error-rate 0.01 --name decode >"$S/decode.log" 2>&1 &
  load=$!
  PIDS+=($load)
  # Until 1500 steps are done or attnd-load ends: a count of looks (600,
  # 50 ms apart) could run out on a slow machine before either, and the
  # message below would blame attnd-load. The bound is only against a hang.
  done_steps=0
  end=$((SECONDS + 300))
  while [ $SECONDS -lt $end ]; do
    done_steps=$(grep -c '/attention HTTP/1.1" 200 ' "$S/access.log" || true)
    [ "$done_steps" -ge 1500 ] && break
    kill -0 $load 2>/dev/null || break
    sleep 0.05
  done
  [ "$done_steps" -ge 1500 ] || { show "$S/decode.log"; fail "only $done_steps steps answered through nginx before attnd-load ended"; }
  # attnd-load is stopped (SIGSTOP) while the replicas are asked for their
  # sessions, and continued just before the kill: a step takes under a
  # millisecond here, and on a loaded machine the three GETs took so long
  # that the load was all but over when the kill came (4 steps after it).
  # Stopped, it cannot create or end a session between the count and the
  # kill either; continued, it sends its next steps at once, so the kill
  # still comes under load.
  kill -STOP $load 2>/dev/null || true
  victim=0 most=-1
  for i in 0 1 2; do
    body=$(curl -s -m 5 "http://127.0.0.1:${ports[$i]}/v1/sessions?limit=100") || {
      kill -CONT $load 2>/dev/null
      show "$S/attnd$((i + 1)).log"
      fail "GET /v1/sessions on replica $((i + 1)) failed under load"
    }
    c=$(grep_o '"session":' <<<"$body" | wc -l) # a replica may hold none
    [ "$c" -gt "$most" ] && { most=$c; victim=$i; }
  done
  at_kill=$(wc -l <"$S/access.log")
  kill -CONT $load 2>/dev/null || true
  { kill -KILL "${replicas[$victim]}" && wait "${replicas[$victim]}"; } 2>/dev/null || true
  load_rc=0
  wait $load || load_rc=$?
  [ "$load_rc" = 0 ] || { show "$S/decode.log"; fail "attnd-load exited $load_rc after replica $((victim + 1)) was killed"; }
  recreated=$(csv_col "$S/decode.csv" recreated)
  r404=$(csv_col "$S/decode.csv" recreated_404)
  errors=$(($(csv_col "$S/decode.csv" err_other) + $(csv_col "$S/decode.csv" err_transport) + $(csv_col "$S/decode.csv" err_503)))
  [ "$(csv_col "$S/decode.csv" sessions_done)" = $sessions ] && [ "$(csv_col "$S/decode.csv" abandoned)" = 0 ] ||
    { show "$S/decode.log"; fail "$(csv_col "$S/decode.csv" sessions_done) of $sessions sessions done, $(csv_col "$S/decode.csv" abandoned) abandoned"; }
  [ "$r404" -ge 1 ] && [ "$r404" -le "$most" ] ||
    { show "$S/decode.log"; fail "$r404 sessions recreated after a 404; replica $((victim + 1)) held $most"; }
  [ "$errors" -le $conc ] || { show "$S/decode.log"; fail "$errors errors, more than the $conc steps that can be in flight on one replica"; }
  [ "$(csv_col "$S/decode.csv" verified)" = $sessions ] || { show "$S/decode.log"; fail "$(csv_col "$S/decode.csv" verified) of $sessions steps verified"; }
  after=$(tail -n +$((at_kill + 1)) "$S/access.log" | grep -c '/attention HTTP/1.1" 200 ' || true)
  [ "$after" -ge 100 ] || fail "only $after steps answered after the kill"

  # 5. Affinity, from nginx's log of the whole run: every success of a key
  # (its creation, steps, deletion) came from one replica, the one that
  # created it; no step that succeeded had been tried on another live
  # replica first (only on the dead one, whose connection was refused: an
  # nginx worker that had not yet seen it fail).
  log_fields "$S/access.log" >"$S/sessions.log"
  awk '$4 != "-" && $3 ~ /^2/ { n = split($5, u, ","); print $4, u[n] }' "$S/sessions.log" | sort -u >"$S/key-replica"
  keys=$(awk '{ print $1 }' "$S/key-replica" | sort -u | wc -l)
  split=$(awk '{ print $1 }' "$S/key-replica" | uniq -d | wc -l)
  [ "$split" = 0 ] || fail "$split of $keys session keys succeeded on more than one replica: $(awk '{ print $1 }' "$S/key-replica" | uniq -d | head -3 | tr '\n' ' ')"
  created=$(awk '$1 == "POST" && $2 == "/v1/sessions" && $3 == 201' "$S/sessions.log" | wc -l)
  [ "$created" = $((sessions + recreated)) ] || fail "$created sessions created through POST, expected $sessions + $recreated"
  dead=127.0.0.1:${ports[$victim]}
  retried=$(awk -v d="$dead" '$2 ~ /\/attention$/ && $3 ~ /^2/ {
    n = split($5, u, ","); for (i = 1; i < n; i++) if (u[i] != d) { print; break } }' "$S/sessions.log" | wc -l)
  [ "$retried" = 0 ] || fail "$retried steps succeeded after nginx had sent them to another live replica (log: $S/sessions.log)"
  moved=$(awk '$2 ~ /\/attention$/ && $5 ~ /,/' "$S/sessions.log" | wc -l)
  steps_line=$(sed -n 's/^step 1 prefill=64 c=6: \(.*\) | ttft.*/\1/p' "$S/decode.log" | sed 's/ (429[^)]*)//')
  pass "$routing; PUT with client ids: 6 sessions, 0 recreated, verified; POST (ids by nginx) under load: $steps_line; replica $((victim + 1)) (of $most sessions) SIGKILLed after $done_steps steps, $after steps after; $keys keys, each succeeding on one replica; nginx moved $moved steps on from the dead replica, none from a live one"
}
