#!/bin/sh
# Small requests at the HTTP ceiling (issue 16's targets), on one attnd of
# the defaults with the demo layer, all measured by wrk in one run:
#   healthz  GET /healthz: the anchor, what the HTTP layer alone answers;
#   tiny     POST /v1/attention, L = 16, E = 16, 2 heads (JSON);
#   tiny64   the same shape with its tensors in base64, both ways (from
#            attnd-load --dump-body, its "return" dropped, so metrics on as
#            in tiny): what is left when no number is read or printed;
#   step     one-token steps of the demo layer's sessions, each attending
#            over at most PREFILL + LIMIT = 128 keys (bench/wrk/step.lua:
#            4 sessions a connection, taken in turn, truncated back to 64
#            tokens every 64 steps: 1 request in 65 is that truncate).
# For each concurrency the three take turns REPS times (3); printed: the
# median req/s of each, its ratio to healthz's, the median p99, and the
# server's CPU time per request (user + system, from /proc, over the whole
# run): with wrk on the same cores, the one column that noise from other
# tenants barely moves.
#
# The same table goes to BUILD/bench/small.csv, for tools/perf-table.py.
#
# usage: sh bench/wrk/small.sh [BUILD] [SECONDS]
# CONCURRENCY (space-separated) overrides "16 64".
set -eu
build=${1:-build}
secs=${2:-5}
fail() {
  echo "small: $*" >&2
  exit 1
}
command -v wrk >/dev/null 2>&1 || fail "needs wrk (apt-get install -y wrk)"
here=$(dirname "$0")
out=$build/wrk/small
csv=$build/bench/small.csv
mkdir -p "$out" "$build/bench"
PREFILL=64 LIMIT=64

: >"$out/attnd.log" # there, and not the last run's, before the polling reads it
"$build/attnd" --port 0 --layers "$build/demo/demo.safetensors" \
  --access-log off >"$out/attnd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT INT TERM
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' "$out/attnd.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$out/attnd.log" >&2; fail "attnd did not start (log: $out/attnd.log)"; }
url=http://127.0.0.1:$port

# JSON rows of n random floats in [-1, 1): "[[...],[...]]", rows x n.
rows() {
  awk -v r="$1" -v n="$2" -v seed="$3" 'BEGIN { srand(seed); printf "[";
    for (i = 0; i < r; i++) { printf "%s[", i ? "," : "";
      for (j = 0; j < n; j++) printf "%s%.6f", j ? "," : "", 2 * rand() - 1;
      printf "]" } printf "]" }'
}
printf '{"query":%s,"num_heads":2}' "$(rows 16 16 1)" >"$out/tiny.json"
printf '{"query":%s}' "$(rows 1 64 2)" >"$out/step.json"
"$build/attnd-load" --lengths 16 --embed 16 --heads 2 --causal none \
  --encoding base64 --dump-body "$out/tiny64.full.json" >/dev/null
sed 's/,"return":{[^}]*}//' "$out/tiny64.full.json" >"$out/tiny64.json"
printf '{"query":%s}' "$(rows $PREFILL 64 3)" >"$out/prefill.json"

# The median of the numbers given as arguments.
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
    END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
field() { sed -n "s/^wrk: .* s, \([0-9.]*\) req\/s;.* p99 \([0-9.]*\) .*errors: status \([0-9]*\).*/$1/p" "$2"; }
# attnd's CPU time so far, in clock ticks (user + system), and a run's
# request count.
ticks() {
  [ -r "/proc/$pid/stat" ] || fail "attnd (pid $pid) is gone (log: $out/attnd.log)"
  awk '{ print $14 + $15 }' "/proc/$pid/stat"
}
hz_tick=$(getconf CLK_TCK)
requests() { sed -n 's/^wrk: \([0-9]*\) requests in .*/\1/p' "$1"; }

printf '%-8s %4s %10s %8s %9s %7s %8s\n' what c req/s ratio p99_ms errors cpu_us
echo what,c,req_s,ratio,p99_ms,errors,cpu_us >"$csv.tmp"
for c in ${CONCURRENCY:-16 64}; do
  ids=''
  for _ in $(seq $((4 * c))); do
    # (curl -sf says nothing when it fails: each failure is named here)
    reply=$(curl -sf -X POST -H 'Content-Type: application/json' \
      -d '{"layer":"demo"}' "$url/v1/sessions") ||
      fail "POST /v1/sessions failed (curl exit $?; log: $out/attnd.log)"
    id=$(printf '%s' "$reply" | sed -n 's/.*"session":"\([0-9a-f]*\)".*/\1/p')
    [ -n "$id" ] || fail "POST /v1/sessions answered no session id: $reply"
    curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' \
      --data-binary @"$out/prefill.json" "$url/v1/sessions/$id/attention" ||
      fail "the prefill of session $id failed (curl exit $?; log: $out/attnd.log)"
    ids="$ids $id"
  done
  wrk -t1 -c"$c" -d1s "$url/healthz" >/dev/null # warm-up
  for what in healthz tiny tiny64 step; do
    eval "r_$what='' p_$what='' e_$what=0 t_$what=0 n_$what=0"
  done
  for rep in $(seq "${REPS:-3}"); do
    for what in healthz tiny tiny64 step; do
      f=$out/$what-c$c-$rep.txt
      t0=$(ticks)
      # shellcheck disable=SC2086 # the ids are words
      case $what in
      healthz) wrk -t1 -c"$c" -d"${secs}s" -s "$here/get.lua" "$url/healthz" >"$f" ;;
      tiny | tiny64) wrk -t1 -c"$c" -d"${secs}s" -s "$here/attention.lua" \
        "$url/v1/attention" -- "$out/$what.json" >"$f" ;;
      step) wrk -t1 -c"$c" -d"${secs}s" -s "$here/step.lua" "$url" -- \
        "$out/step.json" $PREFILL $LIMIT $ids >"$f" ;;
      esac
      # (without summary.lua's line the sums below would end the run in an
      # arithmetic error on an empty value)
      r=$(field '\1' "$f") p=$(field '\2' "$f") e=$(field '\3' "$f") n=$(requests "$f")
      [ -n "$r" ] && [ -n "$p" ] && [ -n "$e" ] && [ -n "$n" ] ||
        fail "no summary line of bench/wrk/summary.lua's in $f"
      eval "r_$what=\"\$r_$what $r\""
      eval "p_$what=\"\$p_$what $p\""
      eval "e_$what=\$((e_$what + e))"
      t=$(ticks) # (an assignment: a failure here stops the run)
      eval "t_$what=\$((t_$what + t - t0))"
      eval "n_$what=\$((n_$what + n))"
    done
  done
  # shellcheck disable=SC2154,SC2086
  hz=$(median $r_healthz)
  for what in healthz tiny tiny64 step; do
    eval "r=\$(median \$r_$what) p=\$(median \$p_$what) e=\$e_$what"
    eval "t=\$t_$what n=\$n_$what"
    ratio=$(awk -v a="$r" -v b="$hz" 'BEGIN { print a / b }')
    cpu=$(awk -v t="$t" -v n="$n" -v k="$hz_tick" 'BEGIN { print t / k / n * 1e6 }')
    # shellcheck disable=SC2154
    printf '%-8s %4s %10.0f %8.3f %9.2f %7s %8.2f\n' "$what" "$c" "$r" \
      "$ratio" "$p" "$e" "$cpu"
    printf '%s,%s,%.0f,%.3f,%.2f,%s,%.2f\n' "$what" "$c" "$r" "$ratio" "$p" \
      "$e" "$cpu" >>"$csv.tmp"
  done
  for id in $ids; do
    curl -sf -o /dev/null -X DELETE "$url/v1/sessions/$id" ||
      fail "DELETE /v1/sessions/$id failed (curl exit $?; log: $out/attnd.log)"
  done
done
mv "$csv.tmp" "$csv"
echo "CSV: $csv"
