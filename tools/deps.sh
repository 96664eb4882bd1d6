#!/bin/sh
# Installs the Debian packages that building and testing attnd need, when
# they are missing. As root it runs apt-get; otherwise it prints the one
# apt-get line to run and fails. `deps.sh fuzz` adds what `make fuzz`
# needs: clang-14, its libFuzzer and sanitizer runtimes, and its OpenMP;
# `deps.sh tsan-core` what `make tsan-core` adds: LLVM's OpenMP runtime
# and its Archer tool; `deps.sh format` what `make format` needs:
# clang-format;
# `deps.sh ui` what `make ui-test` needs: Debian's chromium; `deps.sh
# bench` what `make bench` adds: wrk.
set -eu

# A pkg-config module, a command or a file (a glob), then the Debian
# package providing it.
need='pkg:libmicrohttpd libmicrohttpd-dev
pkg:gnutls libgnutls28-dev
pkg:jansson libjansson-dev
pkg:libuv libuv1-dev
pkg:zlib zlib1g-dev
pkg:openblas libopenblas-dev
pkg:check check
pkg:libcurl libcurl4-openssl-dev
cmd:pkg-config pkg-config
cmd:gcc gcc
cmd:g++ g++
cmd:curl curl
cmd:node nodejs
cmd:npm npm
file:/usr/bin/python3 python3
file:/usr/lib/gcc/*-linux-gnu/*/libgfortran.a libgfortran-12-dev
cmd:readelf binutils
cmd:groff groff-base
cmd:col bsdextrautils
cmd:strace strace'
if [ "${1:-}" = fuzz ]; then
  need="$need
cmd:clang-14 clang-14
file:/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a libclang-rt-14-dev
file:/usr/lib/llvm-14/lib/clang/*/include/omp.h libomp-14-dev"
fi
if [ "${1:-}" = tsan-core ]; then
  need="$need
file:/usr/lib/llvm-14/lib/libarcher.so libomp-14-dev"
fi
if [ "${1:-}" = ui ]; then
  need="$need
cmd:chromium chromium"
fi
if [ "${1:-}" = format ]; then
  need="$need
cmd:clang-format clang-format"
fi
if [ "${1:-}" = bench ]; then
  need="$need
cmd:wrk wrk"
fi

missing=$(echo "$need" | while read -r what pkg; do
  case $what in
  pkg:*) command -v pkg-config >/dev/null 2>&1 &&
    pkg-config --exists "${what#pkg:}" || echo "$pkg" ;;
  cmd:*) command -v "${what#cmd:}" >/dev/null 2>&1 || echo "$pkg" ;;
  file:*)
    # shellcheck disable=SC2086 # the path is a glob, expanded here
    set -- ${what#file:}
    [ -e "$1" ] || echo "$pkg" ;;
  esac
done | sort -u | tr '\n' ' ')

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
else
  echo "deps: missing packages; run:" >&2
  echo "  sudo apt-get install -y $missing" >&2
  exit 1
fi
