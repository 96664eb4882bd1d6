#!/bin/sh
# attnd for arm64 (aarch64), built and tested on an x86-64 Debian machine:
# Debian's cross compiler builds the core, its suites and attnd against an
# arm64 Debian tree (a sysroot of extracted packages, build/cross/sysroot,
# kept between runs), and qemu-aarch64 runs them. The core's suites must
# pass against the float64 reference as they do on x86-64; then attnd
# starts on a free loopback port and answers README.md's first request.
# Nothing is installed into this machine's own arm64 libraries: it has
# none. As root it installs what is missing (the cross compiler, qemu-user
# and mmdebstrap) with apt-get, as tools/deps.sh does; otherwise it prints
# the apt-get line to run and fails.
#
#   sh tools/cross-check.sh [SUITE...]   (default: the core's suites and
#                                         check_codec)
#
# Under qemu speed means nothing; this checks that arm64 builds and
# computes right, not how fast.
set -eu

T=aarch64-linux-gnu
OUT=build/cross/arm64
ROOT=$PWD/build/cross/sysroot
SUITES=${*:-check_validate check_forward check_properties check_reduce \
  check_kv check_codec}
# The arm64 packages the build links: the core's, the server's and the
# suites' (tools/deps.sh names the same for this machine).
PKGS=libc6-dev,libgomp1,libopenblas-dev,libopenblas0-pthread,check,\
libmicrohttpd-dev,libjansson-dev,libuv1-dev,libgnutls28-dev,zlib1g-dev,\
libcurl4-openssl-dev
# This machine's Debian release: the cross compiler is its, and so are the
# C library's headers it brings, which must match the tree's.
# shellcheck disable=SC1091 # this machine's, not the tree's
. /etc/os-release
RELEASE=${VERSION_CODENAME:-bookworm}

missing=
command -v $T-gcc >/dev/null 2>&1 || missing="$missing crossbuild-essential-arm64"
command -v qemu-aarch64 >/dev/null 2>&1 || missing="$missing qemu-user"
command -v mmdebstrap >/dev/null 2>&1 || missing="$missing mmdebstrap"
command -v curl >/dev/null 2>&1 || missing="$missing curl"
if [ -n "$missing" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "cross-check: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # recommends kept: crossbuild-essential-arm64 brings the arm64 C
    # library through them
    # shellcheck disable=SC2086
    apt-get install -y -qq $missing
  else
    echo "cross-check: missing packages; run:" >&2
    echo "  sudo apt-get install -y$missing" >&2
    exit 1
  fi
fi

# The tree, once per package list and release: mmdebstrap resolves the
# packages' dependencies and extracts them, running none of their scripts.
# The links that OpenBLAS's scripts would make (Debian's alternatives) are
# made here.
stamp="$RELEASE $PKGS"
if [ "$(cat "$ROOT.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$ROOT" "$ROOT.stamp"
  mkdir -p "$(dirname "$ROOT")"
  mmdebstrap --quiet --arch=arm64 --variant=extract --include="$PKGS" \
    "$RELEASE" "$ROOT" http://deb.debian.org/debian
  lib=$ROOT/usr/lib/$T
  ln -sfr "$lib/openblas-pthread/libopenblas.so.0" "$lib/libopenblas.so.0"
  ln -sfr "$lib/openblas-pthread/libopenblas.so" "$lib/libopenblas.so"
  ln -sfr "$lib/openblas-pthread/pkgconfig/openblas.pc" "$lib/pkgconfig/openblas.pc"
  echo "$stamp" >"$ROOT.stamp"
fi

# The build from nothing each time (the tree above is what is kept): make
# keeps an archive whose objects' flags or list changed, so a stale build
# would hide a Makefile that compiles the x86 kernels for arm64 again.
rm -rf $OUT

# pkg-config reads the tree's .pc files and prefixes their paths with it;
# build/embed, a step of the build, runs here (HOST_CC).
export PKG_CONFIG_LIBDIR="$ROOT/usr/lib/$T/pkgconfig:$ROOT/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$ROOT"
# shellcheck disable=SC2046 # one word a suite
make --no-print-directory -j"$(nproc)" BUILD=$OUT HOST_CC=gcc \
  CC="$T-gcc --sysroot=$ROOT -B$ROOT/usr/lib/$T" \
  $OUT/libattn.a $OUT/attnd \
  $(for s in $SUITES; do echo "$OUT/tests/$s"; done)

# The x86 kernels must not be in an arm64 library (the Makefile's
# KERNEL_ISAS): only the generic one is.
syms=$($T-nm $OUT/libattn.a | grep -o 'attn__attend_[a-z0-9]*$' | sort -u | tr '\n' ' ')
if [ "$syms" != "attn__attend_generic " ]; then
  echo "cross-check: $OUT/libattn.a has kernels: $syms" >&2
  exit 1
fi

# OPENBLAS_NUM_THREADS=1 is what tests/main.c and attnd re-execute
# themselves to set (server/blas.c); qemu-user cannot run that exec of an
# arm64 binary, so it is set from the start. Check's timeouts are for
# native speed. ATTND_REQUIRE_ISA (x86-64 CI's demand for AVX-512, which
# turns a skipped avx512 case into a failure) is unset: arm64 has only the
# generic kernel, and check_forward checks that it is the one picked.
unset ATTND_REQUIRE_ISA
run() {
  OPENBLAS_NUM_THREADS=1 CK_TIMEOUT_MULTIPLIER=20 qemu-aarch64 -L "$ROOT" "$@"
}
failed=
for s in $SUITES; do
  echo "cross-check: $s (arm64, qemu)"
  # the skipped cases' lines (avx2, avx512) are counted, not printed
  if ! run "$OUT/tests/$s" 2>"$OUT/$s.stderr"; then
    failed="$failed $s"
    cat "$OUT/$s.stderr" >&2
  fi
  n=$(grep -c 'case skipped' "$OUT/$s.stderr" || true)
  [ "$n" = 0 ] || echo "cross-check: $s: $n x86 cases skipped"
done
if [ -n "$failed" ]; then
  echo "cross-check: failed under qemu-aarch64:$failed" >&2
  exit 1
fi

# attnd itself: README.md's first request, on a free loopback port.
log=$OUT/attnd.log
# qemu itself in the background (not run's shell), so that $! is what to stop
OPENBLAS_NUM_THREADS=1 qemu-aarch64 -L "$ROOT" $OUT/attnd --host 127.0.0.1 \
  --port 0 2>$log &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
port=
for _ in $(seq 300); do
  port=$(sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' $log)
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.2
done
if [ -z "$port" ]; then
  echo "cross-check: attnd did not start under qemu-aarch64:" >&2
  cat $log >&2
  exit 1
fi
grep '"event":"listening"' $log
# README.md's first ```sh block after "## A first request", as
# docker/newcomer-test.sh takes it, sent to this attnd's port.
awk '/^## A first request/ { f = 1 } f && /^```sh/ { s = 1; next }
  s && /^```/ { exit } s' README.md |
  sed "s|localhost:8080|127.0.0.1:$port|" >$OUT/first.sh
grep -q "127.0.0.1:$port" $OUT/first.sh || {
  echo "cross-check: no request for localhost:8080 in README.md's first" >&2
  exit 1
}
reply=$(timeout 120 sh $OUT/first.sh) # (a hang under qemu fails, not waits)
echo "$reply"
# 4.6 within float32's rounding (README.md shows 4.6000004 on x86-64; an
# FMA-contracted sum may round otherwise)
out=$(echo "$reply" | sed -n 's/.*"output":\[\[\([-0-9.e]*\)\]\].*/\1/p')
if awk -v x="${out:-nan}" 'BEGIN { exit !(x - 4.6 < 1e-5 && 4.6 - x < 1e-5) }'
then
  echo "cross-check: arm64 passed"
else
  echo "cross-check: attnd under qemu-aarch64 did not answer 4.6" >&2
  exit 1
fi
