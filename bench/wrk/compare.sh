#!/bin/sh
# attnd-load against wrk: the same request (attnd-load --dump-body, sent by
# attention.lua) at the same concurrency, on a running attnd. The tools take
# turns, REPS times each (3), so that both see the same noise; it prints
# the median throughput of each and their ratio for each context length and
# concurrency, and leaves the runs' output in BUILD/wrk/.
#
# usage: sh bench/wrk/compare.sh URL [BUILD] [SECONDS]
#   e.g. sh bench/wrk/compare.sh http://127.0.0.1:8080 build 5
# LENGTHS and CONCURRENCY (space-separated) override "128 512 2048", "1 4".
set -eu
url=${1:?usage: sh bench/wrk/compare.sh URL [BUILD] [SECONDS]}
build=${2:-build}
secs=${3:-5}
fail() {
  echo "compare: $*" >&2
  exit 1
}
command -v wrk >/dev/null 2>&1 || fail "needs wrk (apt-get install -y wrk)"
here=$(dirname "$0")
out=$build/wrk
mkdir -p "$out"

# The value of column $2 in the first data row of CSV file $1.
csv_col() {
  awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) k = i }
    NR == 2 { print $k }' "$1"
}

# The median of the numbers given as arguments.
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
    END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

printf '%6s %4s %14s %14s %7s\n' L c attnd-load_rps wrk_rps ratio
for L in ${LENGTHS:-128 512 2048}; do
  # (its stdout is the body's header lines, which attention.lua sets itself)
  "$build/attnd-load" --lengths "$L" --dump-body "$out/body-$L.json" >/dev/null
  for c in ${CONCURRENCY:-1 4}; do
    # one second of wrk as warm-up (attnd-load warms up by itself)
    wrk -t1 -c"$c" -d1s -s "$here/attention.lua" "$url/v1/attention" -- \
      "$out/body-$L.json" >/dev/null
    as='' ws=''
    for rep in $(seq "${REPS:-3}"); do
      name=attnd-load-L$L-c$c-$rep
      "$build/attnd-load" --url "$url" --lengths "$L" --concurrency "$c" \
        --warmup 1 --duration "$secs" --variants 1 --quiet --out "$out" \
        --name "$name"
      # (a value missing would leave the median of the others, or none)
      a=$(csv_col "$out/$name.csv" rps)
      [ -n "$a" ] || fail "no rps in $out/$name.csv"
      as="$as $a"
      wrk -t1 -c"$c" -d"${secs}s" -s "$here/attention.lua" \
        "$url/v1/attention" -- "$out/body-$L.json" >"$out/wrk-L$L-c$c-$rep.txt"
      w=$(sed -n 's/^wrk: .* s, \([0-9.]*\) req\/s;.*/\1/p' \
        "$out/wrk-L$L-c$c-$rep.txt")
      [ -n "$w" ] || fail "no summary line of bench/wrk/summary.lua's in $out/wrk-L$L-c$c-$rep.txt"
      ws="$ws $w"
    done
    # shellcheck disable=SC2086
    a=$(median $as)
    # shellcheck disable=SC2086
    w=$(median $ws)
    printf '%6s %4s %14.1f %14.1f %7.3f\n' "$L" "$c" "$a" "$w" \
      "$(awk -v a="$a" -v w="$w" 'BEGIN { print a / w }')"
  done
done
