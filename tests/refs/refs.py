#!/usr/bin/python3 -S
"""tests/refs/refs.py: names in the docs and the comments that the tree no
longer has.

Reads the Markdown files and the comments of the C, CUDA and C++ sources,
the Makefile and the shell scripts under ROOT (default: .), and reports:
  - a path that starts at a top-level folder of the tree (core/..., docs/...)
    and is not there: a file moved or renamed, its mentions left behind;
  - `make X` (in backquotes) where the Makefile has no target X;
  - an identifier of the tree's prefixes (attnd_, attn_, ATTND_, ATTN_ and
    their internal __ forms; attnd-load's load_, LOAD_; the tests' sh_, SH_,
    tu_) that no code defines or uses: a function, macro or metric renamed.
    tests/README.md, a log of past bugs, may name what was there then, and
    is read for paths and targets only.
A path or name written as a pattern (followed by *, <, {, $ or %) is read
as a prefix. Exits 1 with one line per miss, FILE:LINE: what; 0 silent.
usage: refs.py [ROOT]
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
SKIP_DIRS = {".git", "build", "node_modules", "corpus", "invalid", ".device-bundle"}
TOP = ("bench", "codec", "config", "core", "docker", "docs", "include",
       "server", "tests", "tools", "ui")
C_EXT = (".c", ".h", ".cu", ".cuh", ".cc")
CODE_EXT = C_EXT + (".sh", ".py", ".mjs", ".js", ".lua", ".yaml", ".conf")
# Names that are not attnd's though they carry its prefix: podman-compose's
# containers (docs/deployment.md) and the variables of a Kubernetes service
# link (server/config.c leaves them alone).
NOT_OURS = {"attnd_attnd1_1", "attnd_attnd2_1", "attnd_attnd3_1",
            "ATTND_PORT_8080_TCP", "ATTND_SERVICE_HOST"}

C_TOKENS = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'
                      r"'(?:\\.|[^'\\\n])*'", re.S)
PATH = re.compile(r"(?<![\w./~$-])((?:%s)/[\w./+-]*)" % "|".join(TOP))
MAKE = re.compile(r"`make((?: -\S+| [A-Z_]+=[^\s`]*)*) ([a-z][\w.-]*)")
IDENT = re.compile(r"(?<![\w$])((?:attnd|attn|ATTND|ATTN|load|LOAD|sh|SH|tu)_\w*)")
PATTERN = "*<{$%"


def walk():
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        for f in sorted(files):
            yield os.path.relpath(os.path.join(d, f), ROOT)


def read(rel):
    try:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None


def split_c(text):
    """(code, [(line, comment)]): the code keeps its strings, and each
    comment is blanked out of it."""
    code, comments, at, line, counted = [], [], 0, 1, 0
    for m in C_TOKENS.finditer(text):
        code.append(text[at:m.start()])
        if m.group(0)[0] == "/":
            line += text.count("\n", counted, m.start())
            counted = m.start()
            comments.append((line, m.group(0)))
            code.append("\n" * m.group(0).count("\n"))
        else:
            code.append(m.group(0))
        at = m.end()
    code.append(text[at:])
    return "".join(code), comments


def split_hash(text):
    code, comments = [], []
    for n, line in enumerate(text.split("\n"), 1):
        m = re.search(r"(?:^|\s)#(?![!{])", line)
        if m:
            comments.append((n, line[m.start():]))
            line = line[:m.start()]
        code.append(line)
    return "\n".join(code), comments


def targets():
    text = read("Makefile") or ""
    text = text.replace("\\\n", " ")
    out = set()
    for m in re.finditer(r"^([^\s#=:][^=:]*?):(?![=])", text, re.M):
        out.update(t for t in m.group(1).split() if "$" not in t)
    for m in re.finditer(r"^\.PHONY:(.*)$", text, re.M):
        out.update(m.group(1).split())
    return out


def main():
    code, docs, notes = [], [], []  # notes: (file, line, text, names too)
    for rel in walk():
        base = os.path.basename(rel)
        if not (rel.endswith(CODE_EXT + (".md",)) or base == "Makefile"):
            continue
        text = read(rel)
        if text is None:
            continue
        if rel.endswith(".md"):
            names = rel != os.path.join("tests", "README.md")
            for n, line in enumerate(text.split("\n"), 1):
                notes.append((rel, n, line, names))
            continue
        if rel.endswith(C_EXT):
            c, comments = split_c(text)
        elif rel.endswith((".sh", ".py", ".yaml", ".conf")) or base == "Makefile":
            c, comments = split_hash(text)
        else:
            c, comments = text, []
        code.append(c)
        names = rel.endswith(C_EXT)
        for n, comment in comments:
            for k, line in enumerate(comment.split("\n")):
                notes.append((rel, n + k, line, names))
    code = "\n".join(code)
    known = set(re.findall(r"\b(?:attnd|attn|ATTND|ATTN|load|LOAD|sh|SH|tu)_\w*", code))
    make = targets()
    misses = []
    for rel, n, line, names in notes:
        for m in PATH.finditer(line):
            p = m.group(1).rstrip(".:,")
            after = line[m.start(1) + len(p):m.start(1) + len(p) + 1]
            if after and after in PATTERN or re.search(r"[A-Z]{2,}", p):
                continue  # a pattern, or a placeholder (tests/fuzz/fuzz_NAME.c)
            full = os.path.join(ROOT, p)
            if not os.path.exists(full) and not any(
                    os.path.exists(full + x) for x in (".c", ".h")):
                misses.append("%s:%d: no such path %s" % (rel, n, p))
        for m in MAKE.finditer(line):
            if m.group(2) not in make:
                misses.append("%s:%d: no make target %s" % (rel, n, m.group(2)))
        if not names:
            continue
        for m in IDENT.finditer(line):
            w = m.group(1)
            after = line[m.end():m.end() + 1]
            if w in known or w in NOT_OURS:
                continue
            if after and after in PATTERN or w.endswith("_"):
                stem = w.rstrip("_")
                if any(k.startswith(stem) for k in known):
                    continue
            elif w.startswith("ATTND_") and '"%s"' % w[6:].lower() in code:
                continue  # a key's variable (server/config.c: ATTND_<KEY>)
            misses.append("%s:%d: no code names %s" % (rel, n, w))
    for line in misses:
        print(line)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
