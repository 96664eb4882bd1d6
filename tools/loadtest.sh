#!/bin/sh
# A load test of a local attnd: starts BUILD/attnd on a free loopback port,
# sweeps context lengths with BUILD/attnd-load, stops the server with
# SIGTERM (tools/serve.sh), and leaves attnd-load.csv, .json and .svg (and
# the server's log, attnd-loadtest.log) in BUILD/loadtest/. Options after
# BUILD go to attnd-load and override the defaults (e.g. --lengths
# 128,512,2048,8192). About 30 s: six steps of 4 s.
#
# usage: sh tools/loadtest.sh [BUILD] [attnd-load options...]
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
out=$build/loadtest
mkdir -p "$out"
bin=$build me=loadtest
. "$(dirname "$0")/serve.sh"
serve loadtest
echo "loadtest: attnd (pid $pid) on 127.0.0.1:$port"

rc=0
"$build/attnd-load" --url "http://127.0.0.1:$port" \
  --lengths 128,512,2048 --concurrency 1,4 --warmup 1 --duration 3 \
  --verify 2 --timeout 60 --out "$out" "$@" || rc=$?
stop
echo "loadtest: results in $out/ (attnd-load.csv, attnd-load.json, attnd-load.svg, attnd-loadtest.log)"
exit $rc
