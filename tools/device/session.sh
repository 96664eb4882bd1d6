#!/usr/bin/env bash
# tools/device/session.sh [BUNDLE] [SECONDS]: a device session's work in
# one call of the device tool: issue 31's check.sh, then issue 32's
# cores.sh, both from BUNDLE (`make device-bundle CUDA=1`'s .device-bundle),
# within SECONDS (540) in all.
#
# Why one call: a session has 15 minutes of device time, the machine's
# start included, and one call runs at most 10. check.sh alone was sized
# for 8 minutes and cores.sh for 6, so two calls would not fit. Here each
# script gets a deadline (DEVICE_DEADLINE, tools/device/deadline.sh):
# check.sh until SECONDS less cores.sh's share (SESSION_CORES_SECONDS,
# 240, or half of SECONDS where that is less), cores.sh until SECONDS.
# Each script runs its most wanted steps first, and a step that finds too
# little time left is skipped and named.
#
# From the repository root, with carry [".device-bundle"], kind
# nvidia-h200 and timeout_s 600:
#
#   bash tools/device/session.sh .device-bundle
#
# $OUT gets check.log and cores.log (the whole output of each, written as
# they run, so a call cut off still returns them), summary.md (the tables)
# and results.tgz (every CSV and log of both scripts): four files, within
# the device tool's eight. The call's own output is each step's heading,
# the tests' tallies and any failure, then summary.md.
set -u
cd "$(dirname "$0")/../.."
bundle=${1:-.device-bundle}
total=${2:-540}
cores_share=${SESSION_CORES_SECONDS:-240}
# a SECONDS under cores.sh's share gives each script half
[ "$cores_share" -lt "$total" ] || cores_share=$((total / 2))
out=${OUT:-/tmp/attnd-device}
t0=$(date +%s)
work=$(mktemp -d /tmp/attnd-session.XXXXXX)
mkdir -p "$out" "$work/check" "$work/cores"
# one unpacked bundle for both scripts
if [ -f "$bundle/bundle.tgz" ]; then
  mkdir "$work/bundle"
  tar -C "$work/bundle" -xzf "$bundle/bundle.tgz" || exit 2
  bundle=$work/bundle
fi

# the lines worth reading as it runs; the logs hold the rest
progress() {
  grep --line-buffered -E \
    '^(== |-- |cores: )|[0-9]+%: Checks|FAIL|SKIP|[Ee]rror|not found' || true
}

echo "session: $(date -u '+%Y-%m-%d %H:%M UTC'): check.sh for up to" \
  "$((total - cores_share)) s, then cores.sh up to ${total} s in all"
OUT=$work/check DEVICE_DEADLINE=$((t0 + total - cores_share)) \
  bash tools/device/check.sh "$bundle" 2>&1 | tee "$out/check.log" | progress
check_rc=${PIPESTATUS[0]}

OUT=$work/cores DEVICE_DEADLINE=$((t0 + total)) \
  sh tools/device/cores.sh "$bundle" 2>&1 | tee "$out/cores.log" | progress
cores_rc=${PIPESTATUS[0]}

# summary.md: what to read first, and what goes into docs/performance.md
show() { # show TITLE FILE: the file under a heading, when it is there
  [ -s "$2" ] || return 0
  printf '\n## %s\n\n' "$1"
  cat "$2"
}
{
  echo "# Device session, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  grep -m1 -A1 '^name' "$out/check.log" | tail -1 | sed 's/^/GPU: /' || true
  grep -m1 '^cores: .*CPUs' "$out/cores.log" || true
  grep -E '^cores: (Thread|Core|Socket|NUMA|CPU 0)' "$out/cores.log" || true
  echo
  echo "check.sh: exit $check_rc; cores.sh: exit $cores_rc; $(($(date +%s) - t0)) s"
  grep -E '^== (FAILED|SKIPPED|done)' "$out/check.log" || true
  grep -E '^cores: .*(SKIPPED|failed|cut short)' "$out/cores.log" || true
  show "attnd CUDA against torch SDPA (table.md)" "$work/check/table.md"
  show "flash version 3 (table-v3.md)" "$work/check/table-v3.md"
  show "decoding over a kv cache on the GPU (decode.csv)" "$work/check/decode.csv"
  show "the same with flash version 4 (decode-v4.csv)" "$work/check/decode-v4.csv"
  show "HTTP: OIP binary bfloat16, L 16384 (http.md)" "$work/check/http.md"
  show "sixteen cores (cores.txt)" "$work/cores/cores.txt"
} >"$out/summary.md"
tar -C "$work" -czf "$out/results.tgz" check cores
rm -rf "$work"
echo
cat "$out/summary.md"
[ "$check_rc" = 0 ] && [ "$cores_rc" = 0 ]
