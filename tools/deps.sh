#!/bin/sh
# Installs the Debian packages that building and testing attnd need, when
# they are missing. As root it runs apt-get; otherwise it prints the one
# apt-get line to run and fails.
set -eu

# A pkg-config module or a command, then the Debian package providing it.
need='pkg:libmicrohttpd libmicrohttpd-dev
pkg:jansson libjansson-dev
pkg:libuv libuv1-dev
pkg:openblas libopenblas-dev
pkg:check check
pkg:libcurl libcurl4-openssl-dev
cmd:pkg-config pkg-config
cmd:gcc gcc
cmd:curl curl'

missing=$(echo "$need" | while read -r what pkg; do
  case $what in
  pkg:*) command -v pkg-config >/dev/null 2>&1 &&
    pkg-config --exists "${what#pkg:}" || echo "$pkg" ;;
  cmd:*) command -v "${what#cmd:}" >/dev/null 2>&1 || echo "$pkg" ;;
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
