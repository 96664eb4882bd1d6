#!/bin/sh
# Runs each Check test binary given, prints its summary, and fails if any
# failed. Check forks each test, so one crash fails one test, not the run.
# With ATTND_TEST_REPLIES_DIR set, each suite records the replies it gets
# into DIR/<suite>.jsonl (ATTND_TEST_REPLIES, tests/server_harness.c).
# The suites named in ATTND_TEST_NOFORK (names, by spaces) run their tests
# in one process, CK_FORK=no (the Makefile's NOFORK_SUITES, under ASan).
set -u
failed=''
for t in "$@"; do
  if [ -n "${ATTND_TEST_REPLIES_DIR:-}" ]; then
    ATTND_TEST_REPLIES=$ATTND_TEST_REPLIES_DIR/$(basename "$t").jsonl
    export ATTND_TEST_REPLIES
  fi
  case " ${ATTND_TEST_NOFORK:-} " in
  *" $(basename "$t") "*) run() { CK_FORK=no "$@"; } ;;
  *) run() { "$@"; } ;;
  esac
  if ! run "$t"; then
    failed="$failed $(basename "$t")"
  fi
done
if [ -n "$failed" ]; then
  echo "FAILED:$failed" >&2
  exit 1
fi
echo "all test suites passed ($#)"
