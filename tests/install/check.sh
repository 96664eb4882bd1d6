#!/bin/sh
# tests/install/check.sh: `make install` into a temporary prefix, then
# docs/api.md's example built against it through pkg-config and run, as
# the document says, shared and static; the programs and their man pages;
# the systemd unit and the config file; a DESTDIR install; `make uninstall`.
#
# usage: MAKE=make sh tests/install/check.sh BUILD   (from the repository root;
# the Makefile's install-check target runs it after building what it needs)
#
# Checked: the installed file list; attn.pc's values (pkg-config --cflags,
# --libs, --static --libs, --modversion = ATTN_VERSION); the example's
# output is the block after its build command in docs/api.md; the shared
# build needs libattn.so.MAJOR (readelf), which holds that soname, and
# the static one no libattn.so; a C++ program includes the headers and
# links; every option of each program's --help is
# in its man page, which groff reads without a warning; the unit's
# ExecStart names the installed attnd and config file, and runs
# (--print-config), and systemd-analyze verify finds nothing in the unit
# (where systemd-analyze is; else the line says it was skipped), and
# attnd's system calls in a short life are all ones the unit's filter and
# confinement allow (tests/install/syscalls.sh, where strace and
# systemd-analyze are; else its line says it was skipped); an edited
# attnd.conf survives an install and an uninstall; DESTDIR puts the same
# files under DESTDIR/PREFIX with attn.pc and the unit naming PREFIX;
# uninstall leaves no file behind but the edited attnd.conf.
set -eu
build=${1:-build}
make=${MAKE:-make}
root=$(pwd)
tmp=$(mktemp -d /tmp/attn-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "install-check: FAIL: $*" >&2; exit 1; }

version=$(sed -n 's/^#define ATTN_VERSION "\(.*\)"/\1/p' include/attn/attn.h)
major=${version%%.*}
prefix=$tmp/prefix
$make --no-print-directory -s install BUILD="$build" PREFIX="$prefix" >/dev/null

# ---- the files ------------------------------------------------------------
expect="bin/attnd
bin/attnd-load
etc/attnd/attnd.conf
include/attn/attn.h
include/attn/error.h
lib/libattn.a
lib/libattn.so
lib/libattn.so.$major
lib/libattn.so.$version
lib/pkgconfig/attn.pc
lib/systemd/system/attnd.service
share/man/man1/attnd-load.1
share/man/man1/attnd.1"
got=$(cd "$prefix" && find . ! -type d | sed 's|^\./||' | LC_ALL=C sort)
[ "$got" = "$(printf '%s\n' "$expect" | LC_ALL=C sort)" ] ||
  fail "installed files:
$got
expected:
$expect"
[ "$(readlink "$prefix/lib/libattn.so")" = "libattn.so.$major" ] &&
  [ "$(readlink "$prefix/lib/libattn.so.$major")" = "libattn.so.$version" ] ||
  fail "libattn.so links: $(ls -l "$prefix/lib")"
readelf -d "$prefix/lib/libattn.so.$version" | grep -q "(SONAME).*\[libattn.so.$major\]" ||
  fail "libattn.so.$version has no soname libattn.so.$major"

# ---- pkg-config -----------------------------------------------------------
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion attn)" = "$version" ] || fail "attn.pc's version"
# (pkg-config adds Requires.private's cflags too: OpenBLAS's)
case "$(pkg-config --cflags attn) " in "-I$prefix/include "*) ;; *)
  fail "pkg-config --cflags attn: $(pkg-config --cflags attn)" ;; esac
[ "$(pkg-config --libs attn | sed 's/ *$//')" = "-L$prefix/lib -lattn" ] ||
  fail "pkg-config --libs attn: $(pkg-config --libs attn)"
static_libs=$(pkg-config --static --libs attn)
for l in -lattn -lopenblas -lm -fopenmp; do
  case " $static_libs " in *" $l "*) ;; *) fail "pkg-config --static --libs attn lacks $l: $static_libs" ;; esac
done

# ---- docs/api.md's example, as written ------------------------------------
# The first ```c block is example.c; the first ```sh block after it that
# starts with "cc example.c" builds and runs it; the plain ``` block after
# that is its output.
awk -v dir="$tmp" '
  /^```c$/ && !c { c = 1; next }
  c == 1 && /^```$/ { c = 2; next }
  c == 1 { print > (dir "/example.c"); next }
  c == 2 && /^```sh$/ { s = 1; next }
  s == 1 && /^```$/ { s = 2; next }
  s == 1 { print > (dir "/build.sh"); next }
  s == 2 && /^```$/ { o = o ? 2 : 1; next }
  o == 1 { print > (dir "/expected.txt") }
' docs/api.md
for f in example.c build.sh expected.txt; do
  [ -s "$tmp/$f" ] || fail "docs/api.md: no $f for the core library's example"
done
grep -q '^cc example.c \$(pkg-config --cflags --libs attn)' "$tmp/build.sh" ||
  fail "docs/api.md's build command is not cc example.c \$(pkg-config --cflags --libs attn): $(cat "$tmp/build.sh")"

# shared, exactly as the document says: no LD_LIBRARY_PATH, since the
# prefix is one the loader does not search (nor would /usr/local be, before
# ldconfig)
(cd "$tmp" && env -u LD_LIBRARY_PATH sh build.sh > out-shared.txt) ||
  fail "the example, shared: $(cat "$tmp/out-shared.txt" 2>/dev/null)"
readelf -d "$tmp/example" | grep -q "(NEEDED).*\[libattn.so.$major\]" ||
  fail "the shared example does not need libattn.so.$major"
diff -u "$tmp/expected.txt" "$tmp/out-shared.txt" ||
  fail "the example's output (shared) is not docs/api.md's"

# static: the same source, libattn.a and pkg-config --static's libraries
libs=$(echo "$static_libs" | sed "s|-lattn\b|$prefix/lib/libattn.a|")
(cd "$tmp" && cc example.c $(pkg-config --cflags attn) $libs -o example-static &&
  ./example-static > out-static.txt) || fail "the example, static"
! readelf -d "$tmp/example-static" | grep -q 'libattn' ||
  fail "the static example needs a libattn.so"
diff -u "$tmp/expected.txt" "$tmp/out-static.txt" ||
  fail "the example's output (static) is not docs/api.md's"

# ---- C++ --------------------------------------------------------------------
# The headers from a C++ program: they compile, and the library's names
# link (C linkage: without extern "C" each call names a mangled symbol).
cat >"$tmp/cxx.cc" <<'EOF'
#include <attn/attn.h>
#include <cstdio>
int main() {
  attn_backend_t b;
  attn_backend_info(&b);
  std::printf("%s %s\n", attn_errname(ATTN_ESHAPE), attn_isa_name(b.isa));
  return 0;
}
EOF
(cd "$tmp" && ${CXX:-g++} -std=c++11 -Wall -Wextra -pedantic -Werror cxx.cc \
  $(pkg-config --cflags --libs attn) -Wl,-rpath,"$prefix/lib" -o cxx \
  >cxx.log 2>&1 && ./cxx >out-cxx.txt 2>>cxx.log) ||
  fail "a C++ program with attn/attn.h: $(cat "$tmp/cxx.log")"
grep -q '^ESHAPE ' "$tmp/out-cxx.txt" ||
  fail "the C++ program printed: $(cat "$tmp/out-cxx.txt")"

# ---- the programs and their man pages --------------------------------------
"$prefix/bin/attnd" --version | grep -qx "attnd $version" || fail "attnd --version"
for p in attnd attnd-load; do
  page=$prefix/share/man/man1/$p.1
  if groff -man -Tutf8 -z /dev/null >/dev/null 2>&1; then
    warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || true
    [ -z "$warnings" ] || fail "$p.1: $warnings"
    text=$(groff -man -Tascii -P-c -P-b -P-u "$page" 2>/dev/null | col -b 2>/dev/null || true)
  else
    # groff without its macros and fonts: Debian's slim images keep dpkg
    # from installing /usr/share/groff. The page's own text, unescaped.
    echo "install-check: groff cannot run here (no /usr/share/groff): $p.1 read as text"
    text=$(sed -e 's/\\-/-/g' -e 's/^\.[A-Z][A-Z]* *//' -e 's/^"//' "$page")
  fi
  n=0
  for o in $("$prefix/bin/$p" --help | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p'); do
    printf '%s\n' "$text" | grep -q -- "^ *$o\b" || fail "$p.1 lacks $o"
    n=$((n + 1))
  done
  [ "$n" -ge 10 ] || fail "$p --help lists only $n options"
done

# ---- systemd: the unit and the config file --------------------------------
unit=$prefix/lib/systemd/system/attnd.service
conf=$prefix/etc/attnd/attnd.conf
cmp -s config/attnd.conf "$conf" || fail "etc/attnd/attnd.conf is not config/attnd.conf"
! grep -q '@[A-Z]*@' "$unit" || fail "attnd.service: $(grep '@[A-Z]*@' "$unit")"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ "$exec_start" = "$prefix/bin/attnd --config $conf" ] ||
  fail "attnd.service's ExecStart: $exec_start"
$exec_start --print-config >"$tmp/unit-config.txt" 2>&1 &&
  grep -q "from $conf\$" "$tmp/unit-config.txt" ||
  fail "attnd.service's ExecStart with --print-config: $(head -3 "$tmp/unit-config.txt")"
if command -v systemd-analyze >/dev/null; then
  # (its man page is checked too: Documentation=man:attnd(1), from the prefix)
  MANPATH="$prefix/share/man" systemd-analyze verify "$unit" >"$tmp/verify.txt" 2>&1 ||
    fail "systemd-analyze verify attnd.service: $(cat "$tmp/verify.txt")"
  [ ! -s "$tmp/verify.txt" ] || fail "systemd-analyze verify attnd.service: $(cat "$tmp/verify.txt")"
  verified="attnd.service verified"
else
  echo "install-check: no systemd-analyze here (Debian's systemd package): attnd.service is not verified"
  verified="attnd.service not verified (no systemd-analyze)"
fi
# what attnd calls in a short life, against the unit's SystemCallFilter and
# the rest of its confinement (a line of its own says how it went)
sh tests/install/syscalls.sh "$unit" "$prefix/bin/attnd-load" \
  "$root/build/demo/demo.safetensors"
# an edited config is the user's: install leaves it alone
echo "# edited by install-check" >>"$conf"
$make --no-print-directory -s install BUILD="$build" PREFIX="$prefix" >/dev/null
[ "$(tail -n 1 "$conf")" = "# edited by install-check" ] ||
  fail "make install overwrote an edited etc/attnd/attnd.conf"

# ---- DESTDIR, then uninstall -------------------------------------------------
$make --no-print-directory -s install BUILD="$build" PREFIX=/opt/attn \
  DESTDIR="$tmp/stage" >/dev/null
staged=$(cd "$tmp/stage/opt/attn" && find . ! -type d | sed 's|^\./||' | LC_ALL=C sort)
[ "$staged" = "$got" ] || fail "DESTDIR install: $staged"
grep -qx 'prefix=/opt/attn' "$tmp/stage/opt/attn/lib/pkgconfig/attn.pc" ||
  fail "DESTDIR install: attn.pc names $(grep '^prefix=' "$tmp/stage/opt/attn/lib/pkgconfig/attn.pc")"
grep -qx 'ExecStart=/opt/attn/bin/attnd --config /opt/attn/etc/attnd/attnd.conf' \
  "$tmp/stage/opt/attn/lib/systemd/system/attnd.service" ||
  fail "DESTDIR install: attnd.service's $(grep '^ExecStart=' "$tmp/stage/opt/attn/lib/systemd/system/attnd.service")"
for d in "$prefix:" "$tmp/stage/opt/attn:/opt/attn"; do
  where=${d%%:*} p=${d#*:}
  if [ -n "$p" ]; then
    $make --no-print-directory -s uninstall PREFIX="$p" DESTDIR="$tmp/stage" >/dev/null
  else
    $make --no-print-directory -s uninstall PREFIX="$prefix" >/dev/null
  fi
  # (an uninstall that removes the emptied folders too leaves nothing to
  # find; the edited config stays, and only it)
  left=""
  [ ! -d "$where" ] || left=$(find "$where" ! -type d)
  if [ "$where" = "$prefix" ]; then
    [ "$left" = "$conf" ] || fail "uninstall left (the edited attnd.conf alone should stay): $left"
    rm "$conf"
  else
    [ -z "$left" ] || fail "uninstall left: $left"
  fi
done
cd "$root"
echo "install-check: make install, attn.pc, docs/api.md's example (shared and static: $(cat "$tmp/out-static.txt")), man pages, $verified, DESTDIR and uninstall: ok"
