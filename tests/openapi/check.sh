#!/bin/sh
# The API document's checks (tests/openapi/openapi.mjs), from the Makefile:
#
#   check.sh lint               redocly lint, and the document against
#                               server/errors.h and server/config.c
#   check.sh validate DIR...    every reply recorded in DIR/*.jsonl (the
#                               suites' ATTND_TEST_REPLIES files) against it
#
# The npm packages pinned by tests/openapi/package-lock.json are installed
# with `npm ci` into build/openapi-node (ATTND_OPENAPI_NODE), once: again
# only when the lock file changes, as docker/container-test.sh does for
# docker/k8s-check. npm's cache makes a reinstall work offline.
set -eu
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
NODE_DIR=${ATTND_OPENAPI_NODE:-build/openapi-node}
DOC=$ROOT/docs/openapi.json

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
  { echo "openapi: node and npm are needed (tools/deps.sh installs them)" >&2; exit 1; }

mkdir -p "$NODE_DIR"
if ! cmp -s tests/openapi/package-lock.json "$NODE_DIR/package-lock.json" ||
  [ ! -d "$NODE_DIR/node_modules" ]; then
  echo "openapi: npm ci in $NODE_DIR (log: $NODE_DIR/npm.log)"
  rm -rf "$NODE_DIR/node_modules" "$NODE_DIR/package-lock.json"
  cp tests/openapi/package.json tests/openapi/package-lock.json "$NODE_DIR/"
  if ! (cd "$NODE_DIR" && npm ci --no-audit --no-fund --prefer-offline) >"$NODE_DIR/npm.log" 2>&1; then
    cat "$NODE_DIR/npm.log" >&2
    rm -f "$NODE_DIR/package-lock.json" # so that the next run tries again
    echo "openapi: npm ci failed" >&2
    exit 1
  fi
fi
cp tests/openapi/openapi.mjs "$NODE_DIR/"

case ${1:-} in
lint)
  node "$NODE_DIR/openapi.mjs" lint "$DOC" "$ROOT" ;;
validate)
  shift
  [ $# -gt 0 ] || { echo "usage: check.sh validate DIR..." >&2; exit 2; }
  node "$NODE_DIR/openapi.mjs" validate "$DOC" "$@" ;;
*)
  echo "usage: check.sh lint | validate DIR..." >&2
  exit 2 ;;
esac
