#!/bin/sh
# A load test of a local attnd: starts BUILD/attnd on a free loopback port,
# sweeps context lengths with BUILD/attnd-load, stops the server with
# SIGTERM, and leaves attnd-load.csv, .json and .svg (and the server's log)
# in BUILD/loadtest/. Options after BUILD go to attnd-load and override the
# defaults (e.g. --lengths 128,512,2048,8192). About a minute on 2 cores.
#
# usage: sh tools/loadtest.sh [BUILD] [attnd-load options...]
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
out=$build/loadtest
mkdir -p "$out"
log=$out/attnd.log

"$build/attnd" --host 127.0.0.1 --port 0 --access-log off 2>"$log" &
pid=$!

# Stops the server: SIGTERM drains it; after 30 s it is killed.
stop() {
  kill -TERM "$pid" 2>/dev/null || return 0
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
trap 'stop; exit 130' INT TERM HUP

# Its stderr says {"event":"listening",...,"port":N} once it serves.
port=''
i=0
while [ -z "$port" ]; do
  port=$(sed -n 's/.*"event":"listening".*"port":\([0-9][0-9]*\).*/\1/p' "$log")
  [ -n "$port" ] && break
  if ! kill -0 "$pid" 2>/dev/null || [ $i -ge 200 ]; then
    echo "loadtest: attnd did not start listening:" >&2
    cat "$log" >&2
    stop
    exit 1
  fi
  sleep 0.1
  i=$((i + 1))
done
echo "loadtest: attnd (pid $pid) on 127.0.0.1:$port"

rc=0
"$build/attnd-load" --url "http://127.0.0.1:$port" \
  --lengths 128,512,2048 --concurrency 1,4 --warmup 1 --duration 3 \
  --verify 2 --timeout 60 --out "$out" "$@" || rc=$?
stop
trap - INT TERM HUP
echo "loadtest: results in $out/ (attnd-load.csv, attnd-load.json, attnd-load.svg)"
exit $rc
