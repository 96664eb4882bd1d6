#!/bin/sh
# tests/fuzz/run.sh DIR SECONDS NAME...: runs each libFuzzer harness
# DIR/fuzz_NAME for SECONDS on a fresh copy of its seed corpus
# (tests/fuzz/corpus/NAME, copied to DIR/corpus/NAME, so that the repo's
# seeds are never rewritten), logs to DIR/logs/NAME.log, and prints each
# harness's executions and rate from libFuzzer's final stats. A crash, a
# leak, a timeout (FUZZ_TIMEOUT seconds for one input) or an out-of-memory
# (FUZZ_RSS_MB) fails the run; its input is saved as DIR/artifacts/NAME-*.
# Replay one with: DIR/fuzz_NAME DIR/artifacts/NAME-crash-...
# tests/fuzz/fuzz_NAME.options, when present, adds that harness's flags.
# FUZZ_JOBS harnesses run at once (by default one a CPU): each is one
# process on one core, and each runs for SECONDS, so batches of them end
# together.
set -u

dir=$1
seconds=$2
shift 2
timeout_s=${FUZZ_TIMEOUT:-30}
rss_mb=${FUZZ_RSS_MB:-2048}
here=$(dirname "$0")
mkdir -p "$dir/logs" "$dir/artifacts"

jobs=${FUZZ_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}

# Runs harness $1 and writes its exit status to DIR/logs/NAME.rc.
run_one() {
  name=$1
  corpus=$dir/corpus/$name
  log=$dir/logs/$name.log
  rm -rf "$corpus" "$dir/logs/$name.rc"
  mkdir -p "$corpus"
  [ -d "$here/corpus/$name" ] && cp "$here/corpus/$name"/* "$corpus"/
  # a harness's own libFuzzer flags, one line: tests/fuzz/fuzz_NAME.options
  options=$(cat "$here/fuzz_$name.options" 2>/dev/null || true)
  seeds=$(find "$corpus" -type f | wc -l)
  echo "fuzz: $name for ${seconds}s ($seeds seeds; log $log)"
  # shellcheck disable=SC2086 # the options are words
  "$dir/fuzz_$name" -max_total_time="$seconds" -timeout="$timeout_s" \
    -rss_limit_mb="$rss_mb" -print_final_stats=1 $options \
    -artifact_prefix="$dir/artifacts/$name-" "$corpus" >"$log" 2>&1
  echo $? >"$dir/logs/$name.rc"
}

running=0
for name in "$@"; do
  run_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait
    running=0
  fi
done
wait

failed=""
summary=""
for name in "$@"; do
  log=$dir/logs/$name.log
  rc=$(cat "$dir/logs/$name.rc" 2>/dev/null || echo "?")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  line=$(printf '%-8s %12s executions %8s exec/s' "$name" "${execs:-?}" \
    "${rate:-?}")
  if [ "$rc" != 0 ]; then
    line="$line  FAILED (exit $rc)"
    failed="$failed $name"
    echo "fuzz: $name failed (exit $rc); the end of $log:" >&2
    grep -v '^{"' "$log" | tail -n 40 >&2
    for f in "$dir/artifacts/$name-"*; do
      [ -e "$f" ] && echo "fuzz: input saved: $f" >&2
    done
  fi
  summary="$summary$line
"
done

echo "fuzz: executions per harness (${seconds}s each, $jobs at once):"
printf '%s' "$summary"
if [ -n "$failed" ]; then
  echo "fuzz: FAILED:$failed" >&2
  exit 1
fi
