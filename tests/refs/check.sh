#!/bin/sh
# tests/refs/check.sh: tests/refs/refs.py on a small tree with stale
# references planted in it, then on this tree, which must have none.
#   - the planted tree: a path, a make target and a name of each kind that
#     is gone, in a doc and in a C comment, each reported at its line, and
#     nothing else: not what is there (a file, a folder, a module named
#     without its .c, a target, a name in code, a name in a string, a
#     pattern such as attnd_here_*, a key's ATTND_ variable), nor a name
#     only tests/README.md keeps, nor a name inside a string of the code;
#   - this tree: no miss (each is printed as FILE:LINE: what).
# usage: sh tests/refs/check.sh (from the repository root)
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() {
  echo "refs: $*" >&2
  exit 1
}
t=$tmp/tree
mkdir -p "$t/core" "$t/docs" "$t/tests" "$t/server"
printf 'all: build\nbuild:\n\t@true\n.PHONY: all build tidy\n' >"$t/Makefile"
cat >"$t/core/here.c" <<'EOF'
/* core/here.c: attnd_here and attn__here_avx2; not core/gone.c. */
int attnd_here(void) { return 0; }
int attn__here_avx2(void) { return 1; }
/* Calls attnd_gone_too (renamed), see server/old.h and tests/here. */
static const char *key = "max_things"; /* ATTND_MAX_THINGS sets it */
static const char *s = "/* attnd_in_a_string */";
EOF
printf 'int main(void) { return 0; }\n' >"$t/tests/here.c"
cat >"$t/docs/a.md" <<'EOF'
# A doc

`make build`, `make CUDA=1 tidy`, `make CUDA=1` and `make gone`.
[core/here.c](../core/here.c), core/, docs/a.md, and docs/b.md.
`attnd_here()`, `attn__here_*`, `ATTND_MAX_THINGS`, `attnd_gone()`.
A pattern: tests/check_<module>.c and tests/fuzz/fuzz_NAME.c.
EOF
printf '| bug | `attnd_was` in core/here.c |\n' >"$t/tests/README.md"

/usr/bin/python3 -S tests/refs/refs.py "$t" >"$tmp/out" && fail "no miss found in the planted tree"
cat >"$tmp/want" <<'EOF'
core/here.c:1: no such path core/gone.c
core/here.c:4: no code names attnd_gone_too
core/here.c:4: no such path server/old.h
docs/a.md:3: no make target gone
docs/a.md:4: no such path docs/b.md
docs/a.md:5: no code names attnd_gone
EOF
sort "$tmp/out" | cmp -s - "$tmp/want" ||
  fail "the planted tree's misses are not those planted:
$(sort "$tmp/out" | diff "$tmp/want" -)"

/usr/bin/python3 -S tests/refs/refs.py . >"$tmp/out" ||
  fail "stale references (a path, make target or name no longer there):
$(cat "$tmp/out")"
echo "refs: paths, make targets and names in the docs and comments: ok"
