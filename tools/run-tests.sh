#!/bin/sh
# Runs each Check test binary given, prints its summary, and fails if any
# failed. Check forks each test, so one crash fails one test, not the run.
# With ATTND_TEST_REPLIES_DIR set, each suite records the replies it gets
# into DIR/<suite>.jsonl (ATTND_TEST_REPLIES, tests/server_harness.c).
set -u
failed=''
for t in "$@"; do
  if [ -n "${ATTND_TEST_REPLIES_DIR:-}" ]; then
    ATTND_TEST_REPLIES=$ATTND_TEST_REPLIES_DIR/$(basename "$t").jsonl
    export ATTND_TEST_REPLIES
  fi
  if ! "$t"; then
    failed="$failed $(basename "$t")"
  fi
done
if [ -n "$failed" ]; then
  echo "FAILED:$failed" >&2
  exit 1
fi
echo "all test suites passed ($#)"
