# tools/serve.sh: a local attnd and attnd-load runs against it, for the
# scripts that load-test one (tools/loadtest.sh, and on the device machine
# tools/device/cores.sh and check.sh), which source this file after
# setting `bin` (attnd and attnd-load are there), `out` (logs and CSVs) and
# `me` (their name, for messages). Every attnd started is stopped on exit.

pid=""
# stop: SIGTERM to the running attnd, SIGKILL after 30 s.
stop() {
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || { pid=""; return 0; }
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
trap 'stop' EXIT
trap 'stop; exit 130' INT TERM HUP

# serve NAME FLAGS...: starts attnd on a free loopback port with FLAGS,
# its log in OUT/attnd-NAME.log; sets $port. Exits when it does not start.
serve() {
  name=$1
  shift
  : >"$out/attnd-$name.log" # there before the polling below reads it
  "$bin/attnd" --host 127.0.0.1 --port 0 --access-log off --queue-depth 1024 \
    "$@" 2>"$out/attnd-$name.log" &
  pid=$!
  port=""
  i=0
  while [ -z "$port" ]; do
    port=$(sed -n 's/.*"event":"listening".*"port":\([0-9][0-9]*\).*/\1/p' \
      "$out/attnd-$name.log")
    [ -n "$port" ] && break
    if ! kill -0 "$pid" 2>/dev/null || [ $i -ge 300 ]; then
      cat "$out/attnd-$name.log" >&2
      echo "$me: attnd ($name) did not start" >&2
      exit 1
    fi
    sleep 0.1
    i=$((i + 1))
  done
}

# load NAME ATTND-LOAD-FLAGS...: one attnd-load sweep against the running
# attnd into OUT/load-NAME.csv (its output in OUT/load-NAME.log). Returns
# attnd-load's status, having said so on a failure.
load() {
  name=$1
  shift
  "$bin/attnd-load" --url "http://127.0.0.1:$port" --quiet --out "$out" \
    --name "load-$name" --timeout 300 "$@" >"$out/load-$name.log" 2>&1 || {
    rc=$?
    cat "$out/load-$name.log" >&2
    echo "$me: attnd-load ($name) failed" >&2
    return $rc
  }
}
