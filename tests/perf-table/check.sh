#!/bin/sh
# tests/perf-table/check.sh: tools/perf-table.py on the CSVs of
# tests/perf-table/bench/ (one small run, written by hand), against a page
# with text around its markers and a stale section between them:
#   - the text outside the markers comes back byte for byte, and the stale
#     section is gone;
#   - the host's sgemm is the median and range of attn.csv's sgemm_gflops;
#   - the weights cost is the ratio of the rows' x_sgemm (1.25 here), not of
#     their median_ms (2.00), which the machine's drift moves;
#   - a codec name with a comma ("nesting, 1 MB", quoted in the CSV) stays
#     one cell, and a rate under the floor is marked; a half-precision row
#     ("bf16 pack") is in the tensor's table, not among the worst bodies;
#   - a missing CSV exits 1, names the file, and leaves the page as it was;
#     so does a row cut short or with no thread count (attn.csv's threads
#     was read with int(), and a bad value ended in a traceback);
#   - docs/performance.md itself has the markers, once each.
# usage: sh tests/perf-table/check.sh (from the repository root)
set -eu
here=tests/perf-table
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() {
  echo "perf-table: $*" >&2
  exit 1
}
# the page: before, the markers around a stale section, after
grep -m1 '^<!-- perf-table: begin' docs/performance.md >"$tmp/begin" ||
  fail "docs/performance.md has no '<!-- perf-table: begin' marker"
printf '# A page\n\nsome text before\n\n' >"$tmp/before"
printf 'some text after\n' >"$tmp/after"
{
  cat "$tmp/before" "$tmp/begin"
  printf '\nstale figures\n<!-- perf-table: end -->\n'
  cat "$tmp/after"
} >"$tmp/page.md"

/usr/bin/python3 tools/perf-table.py "$here/bench" "$tmp/page.md" >/dev/null ||
  fail "failed on $here/bench"
head -c "$(wc -c <"$tmp/before")" "$tmp/page.md" | cmp -s - "$tmp/before" ||
  fail "the text before the section changed"
tail -n 1 "$tmp/page.md" | cmp -s - "$tmp/after" ||
  fail "the text after the section changed"
! grep -q 'stale figures' "$tmp/page.md" || fail "the stale section is still there"
expect() {
  grep -qF -- "$1" "$tmp/page.md" || fail "no '$1' in the section:
$(cat "$tmp/page.md")"
}
expect '## The latest run'
expect 'median 125.0 GFLOP/s, from 75.0 to 140.0 over the run'
expect 'costs 1.25 (one thread) and 1.50 (two threads) times'
expect '| bf16 pack | attnd | 4.2 | 1.38 | 3,031 | 6,062 |'
expect '| nesting, 1 MB | decode | 1.1 | 1.00 | 1,045 |'
expect '| nesting, 255 KB | decode | 0.3 | 26.89 | 10 (under the floor) |'
expect '1 under the floor'
expect '| oip | 12.6 | 8.4 | 376.5 | 352.9 | 1.067 | 1.6 | 1.1 | 387.0 |'
expect 'taken in at 7.87 GB/s'
expect '| tiny | 16 | 25,481 | 0.345 | 6.74 | 0 | 20.9 |'
[ "$(grep -c '^<!-- perf-table: end -->$' "$tmp/page.md")" = 1 ] ||
  fail "not one end marker"

# a missing CSV: exit 1, the file named, the page untouched
mkdir "$tmp/partial"
cp "$here"/bench/*.csv "$tmp/partial/"
rm "$tmp/partial/small.csv"
cp "$tmp/page.md" "$tmp/kept.md"
if /usr/bin/python3 tools/perf-table.py "$tmp/partial" "$tmp/page.md" \
  2>"$tmp/err"; then
  fail "exit 0 without small.csv"
fi
grep -q 'small.csv' "$tmp/err" || fail "the error does not name small.csv: $(cat "$tmp/err")"
cmp -s "$tmp/page.md" "$tmp/kept.md" || fail "a failed run changed the page"

# a malformed or cut-short row (a run killed mid-row): exit 1, the file
# named, no traceback, the page untouched
for cut in 's/^\(L2048 generic,1,2048\),.*/\1/' 's/,none,1,generic/,none,,generic/'; do
  rm -rf "$tmp/bad" && mkdir "$tmp/bad"
  cp "$here"/bench/*.csv "$tmp/bad/"
  sed -i "$cut" "$tmp/bad/attn.csv"
  if /usr/bin/python3 tools/perf-table.py "$tmp/bad" "$tmp/page.md" \
    2>"$tmp/err"; then
    fail "exit 0 with attn.csv's last row malformed ($cut)"
  fi
  if ! grep -q '^perf-table: .*attn.csv: ' "$tmp/err" ||
    grep -q Traceback "$tmp/err"; then
    fail "a malformed attn.csv ($cut) is not named: $(cat "$tmp/err")"
  fi
  cmp -s "$tmp/page.md" "$tmp/kept.md" || fail "a failed run changed the page"
done

# the real page has its markers, once each
[ "$(grep -c '^<!-- perf-table: begin' docs/performance.md)" = 1 ] &&
  [ "$(grep -c '^<!-- perf-table: end -->$' docs/performance.md)" = 1 ] ||
  fail "docs/performance.md needs one begin and one end marker"
echo "perf-table: ok"
