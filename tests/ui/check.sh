#!/bin/sh
# The page's test in a real browser (tests/ui/ui.mjs), from the Makefile:
#
#   check.sh [ATTND_BIN]    drive Debian's chromium over the page of a real
#                           attnd (build/attnd by default); screenshots and
#                           the render timings go to build/ui/
#
# Chromium comes from tools/deps.sh ui. The npm packages pinned by
# tests/ui/package-lock.json (puppeteer-core, axe-core) are installed with
# `npm ci` into build/ui-node (ATTND_UI_NODE), once: again only when the
# lock file changes, as tests/openapi/check.sh does. puppeteer-core
# downloads no browser.
set -eu
cd "$(dirname "$0")/../.."
BIN=${1:-build/attnd}
NODE_DIR=${ATTND_UI_NODE:-build/ui-node}

sh tools/deps.sh ui
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
  { echo "ui: node and npm are needed (tools/deps.sh installs them)" >&2; exit 1; }

mkdir -p "$NODE_DIR"
if ! cmp -s tests/ui/package-lock.json "$NODE_DIR/package-lock.json" ||
  [ ! -d "$NODE_DIR/node_modules" ]; then
  echo "ui: npm ci in $NODE_DIR (log: $NODE_DIR/npm.log)"
  rm -rf "$NODE_DIR/node_modules" "$NODE_DIR/package-lock.json"
  cp tests/ui/package.json tests/ui/package-lock.json "$NODE_DIR/"
  if ! (cd "$NODE_DIR" && npm ci --no-audit --no-fund --prefer-offline) >"$NODE_DIR/npm.log" 2>&1; then
    cat "$NODE_DIR/npm.log" >&2
    rm -f "$NODE_DIR/package-lock.json" # so that the next run tries again
    echo "ui: npm ci failed" >&2
    exit 1
  fi
fi
cp tests/ui/ui.mjs "$NODE_DIR/"
exec node "$NODE_DIR/ui.mjs" --attnd "$BIN" --layer build/demo/demo.safetensors \
  --readme README.md --out build/ui
