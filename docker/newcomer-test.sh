#!/bin/sh
# docker/newcomer-test.sh: the README's two commands, as a newcomer runs them
# on a fresh Debian 12 (`make newcomer-test`).
#
# In a bare debian:bookworm container (the base image container-test makes,
# with this machine's Debian mirror as its only apt source), it adds make,
# git and ca-certificates and nothing else, clones the commit under test
# (HEAD of this checkout: uncommitted changes are not in it), and runs the
# README's `make test`, which must install all it needs from Debian's own
# archive (Debian's Node 18 among them) and pass. Then `make run` starts
# the service, and the README's first request, run as the README writes it
# (curl), must answer 4.6. Last, it checks that node and npm came from
# Debian's packages and that apt knows no other source.
#
# This machine reaches the npm registry through a proxy whose certificate
# authority only the host trusts: the host's CA bundle is mounted read-only
# and named to node and npm (NODE_EXTRA_CA_CERTS, npm's cafile), and nothing
# else of the host goes in.
#
# Environment: ATTND_CT_CACHE (/var/tmp/attnd-container-test) keeps the base
# image's tarball, as for container-test; ATTND_NEWCOMER_TIMEOUT (2400)
# bounds the container's run, in seconds.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
W=$ROOT/build/newcomer-test
CACHE=${ATTND_CT_CACHE:-/var/tmp/attnd-container-test}
TIMEOUT=${ATTND_NEWCOMER_TIMEOUT:-2400}
NAME=attnd-newcomer
CA=/etc/ssl/certs/ca-certificates.crt

fail() {
  echo "newcomer-test: FAILED: $*" >&2
  exit 1
}
show() { [ -f "$1" ] && { echo "--- $1 (last ${2:-20} lines)"; tail -n "${2:-20}" "$1" | sed 's/^/  /'; } >&2 || true; }

# shellcheck source=docker/podman.sh
. "$ROOT/docker/podman.sh"

mkdir -p "$W"
find "$W" -mindepth 1 -delete
trap 'podman rm -f -t 0 "$NAME" >/dev/null 2>&1 || true' EXIT

podman_install git=git
podman_configure
base_image
echo "newcomer-test: debian:bookworm $BASE_HOW${PODMAN_INSTALLED:+; installed $PODMAN_INSTALLED}"

commit=$(git rev-parse HEAD)
gitdir=$(cd "$(git rev-parse --git-common-dir)" && pwd)
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  echo "newcomer-test: the working tree has uncommitted changes; testing the commit $commit alone"

mounts=(-v "$gitdir:/attnd.git:ro")
envs=()
if [ -f "$CA" ]; then
  mounts+=(-v "$CA:/etc/host-ca.crt:ro")
  envs+=(-e NODE_EXTRA_CA_CERTS=/etc/host-ca.crt -e npm_config_cafile=/etc/host-ca.crt)
fi

# What runs inside, as root, as a newcomer would type it. The README's first
# request is its first ```sh block after "## A first request", run as it is.
inside='set -eu
export DEBIAN_FRONTEND=noninteractive
step() { echo; echo "=== newcomer: $*"; }
step "apt-get install make git ca-certificates"
apt-get update -qq
apt-get install -y -qq --no-install-recommends make git ca-certificates >/dev/null
step "git clone; git checkout $COMMIT"
git clone -q /attnd.git /root/attnd
cd /root/attnd
git checkout -q "$COMMIT"
step "make test"
make test
step "make run"
make run >/tmp/run.log 2>&1 &
for i in $(seq 600); do
  curl -s -o /dev/null localhost:8080/healthz && break
  sleep 0.5
done
curl -s localhost:8080/healthz || { tail -20 /tmp/run.log; echo "make run: no answer on :8080"; exit 1; }
echo
step "the README first request"
awk "/^## A first request/ { f = 1 } f && /^\`\`\`sh/ { s = 1; next } s && /^\`\`\`/ { exit } s" README.md >/tmp/first.sh
cat /tmp/first.sh
reply=$(sh /tmp/first.sh) || { echo "the README first request failed (exit $?): $reply"; exit 1; }
echo "$reply"
out=$(printf "%s" "$reply" | sed -n "s/.*\"output\":\[\[\([-0-9.eE+]*\)\]\].*/\1/p")
# float32, as the README says: 4.6 within 1e-5 (its nearest float32 prints
# as 4.6, and a sum in another order as 4.6000004)
if [ -n "$out" ] && awk -v x="$out" "BEGIN { d = x - 4.6; exit !(d < 1e-5 && d > -1e-5) }"; then
  echo "output 4.6 ($out)"
else
  echo "the README first request did not answer 4.6"; exit 1
fi
step "where node and npm came from"
node --version
dpkg -S "$(readlink -f "$(command -v node)")" "$(readlink -f "$(command -v npm)")"
apt-cache policy | awk "/^ *[0-9]+ (http|https|file)/ { print \$2 }" | sort -u >/tmp/sources
cat /tmp/sources
ls /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null || true
uris=$(awk "/^URIs:/ { print \$2 }" /etc/apt/sources.list.d/debian.sources)
for s in $(cat /tmp/sources); do
  ok=0
  for u in $uris; do case $s in "$u"*) ok=1 ;; esac; done
  [ $ok = 1 ] || { echo "apt source $s is not one of debian.sources"; exit 1; }
done
echo "NEWCOMER OK"'

echo "newcomer-test: commit $commit in a bare debian:bookworm (log: $W/run.log)"
t0=$SECONDS
rc=0
timeout "$TIMEOUT" podman run --rm --name "$NAME" --network bridge --shm-size 1g \
  "${mounts[@]}" "${envs[@]}" -e COMMIT="$commit" \
  $BASE:bookworm bash -c "$inside" >"$W/run.log" 2>&1 || rc=$?
secs=$((SECONDS - t0))
grep -E '^=== newcomer|^(all test suites passed|[0-9]+ passed, [0-9]+ failed|v[0-9]+\.|output 4\.6|NEWCOMER OK)' "$W/run.log" || true
[ $rc = 0 ] && tail -n 1 "$W/run.log" | grep -q 'NEWCOMER OK' ||
  { show "$W/run.log" 40; fail "exit $rc after ${secs}s"; }
echo "newcomer-test: passed in ${secs}s: make test and make run on a bare debian:bookworm, the README's first request 4.6"
