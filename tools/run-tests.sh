#!/bin/sh
# Runs each Check test binary given, prints its summary, and fails if any
# failed. Check forks each test, so one crash fails one test, not the run.
set -u
failed=''
for t in "$@"; do
  if ! "$t"; then
    failed="$failed $(basename "$t")"
  fi
done
if [ -n "$failed" ]; then
  echo "FAILED:$failed" >&2
  exit 1
fi
echo "all test suites passed ($#)"
