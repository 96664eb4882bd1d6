#!/bin/sh
# tests/install/syscalls.sh: the installed attnd.service's confinement
# against what attnd really calls. The unit's ExecStart runs under strace
# through a short life: its layers loaded, systemd's notifications sent,
# /v1/attention requests small (computed on the HTTP thread) and large (a
# worker's OpenMP team and OpenBLAS), KV-cache sessions, Open Inference
# Protocol requests, the page and /metrics, a SIGHUP reload sent by the
# unit's own ExecReload (itself traced: it runs under the same filter),
# then SIGTERM's drain. It fails, naming the call and its first line in
# the trace, on
# - a system call outside the unit's SystemCallFilter lines (systemd kills
#   the service with SIGSYS), the allowed set read from systemd-analyze
#   syscall-filter's groups, not copied here;
# - what MemoryDenyWriteExecute refuses: mmap with PROT_WRITE and
#   PROT_EXEC, mprotect or pkey_mprotect adding PROT_EXEC, shmat with
#   SHM_EXEC (a library that needs one fails to load, or its code fails);
# - a socket of a family RestrictAddressFamilies leaves out (EAFNOSUPPORT);
# - personality(), which LockPersonality refuses.
# Systemd's other settings (ProtectSystem, PrivateDevices, ProtectProc)
# hide or freeze files: docs/deployment.md, systemd, says what attnd reads.
#
# usage: sh tests/install/syscalls.sh UNIT ATTND_LOAD LAYER  (check.sh runs
# it with the installed unit and attnd-load and the demo layer); exit 0
# with a line saying so where strace or systemd-analyze is missing, or
# strace may not trace.
set -eu
unit=$1 load=$2 layer=$3
fail() { echo "install-check: FAIL: $*" >&2; exit 1; }
for t in strace systemd-analyze; do
  if ! command -v $t >/dev/null; then
    echo "install-check: no $t here: attnd.service's system call filter is not checked"
    exit 0
  fi
done
# (a container may forbid ptrace: then this machine cannot tell)
if ! strace -qq -o /dev/null true 2>/dev/null; then
  echo "install-check: strace cannot trace here: attnd.service's system call filter is not checked"
  exit 0
fi
tmp=$(mktemp -d /tmp/attn-syscalls-XXXXXX)
spid="" pid=""
# (strace, killed, would leave attnd running)
trap '[ -z "$spid" ] || kill $pid $spid 2>/dev/null || true; rm -rf "$tmp"' EXIT INT TERM

# ---- what the unit allows ---------------------------------------------------
# systemd-analyze lists each group's members, some of them groups. The
# unit's SystemCallFilter lines apply in order: the first decides whether
# the list allows (and then @default, which systemd always allows, is in)
# or denies; each later line adds to it or, with ~, takes away.
systemd-analyze syscall-filter 2>/dev/null | awk '
  FNR == NR {
    if (/^@/) group = $1
    else if (/^$/) group = ""
    else if (group != "" && /^    [^#]/) members[group] = members[group] " " $1
    next
  }
  function apply(name, on,   n, list, i) {
    sub(/:.*/, "", name)
    if (name ~ /^@/) {
      if (!(name in members)) { print "unknown group " name; bad = 1 }
      n = split(members[name], list, " ")
      for (i = 1; i <= n; i++) apply(list[i], on)
    } else if (on) set[name] = 1
    else delete set[name]
  }
  /^SystemCallFilter=/ {
    v = substr($0, 18); inverted = sub(/^~/, "", v)
    if (v == "") { split("", set); mode = ""; next }
    if (mode == "") { mode = inverted ? "deny" : "allow"; if (!inverted) apply("@default", 1) }
    n = split(v, names, " ")
    for (i = 1; i <= n; i++) apply(names[i], (mode == "allow") != inverted)
  }
  END { print "mode " mode; for (s in set) print s; exit bad }
' - "$unit" >"$tmp/filter" || fail "attnd.service's SystemCallFilter: $(grep unknown "$tmp/filter")"
mode=$(sed -n 's/^mode //p' "$tmp/filter")
[ "$mode" = allow ] || fail "attnd.service has no SystemCallFilter allow list (mode '$mode')"
grep -v '^mode ' "$tmp/filter" | LC_ALL=C sort >"$tmp/allowed"
families=$(sed -n 's/^RestrictAddressFamilies=//p' "$unit")
case $families in ''|'~'*) fail "attnd.service's RestrictAddressFamilies is no allow list: '$families'" ;; esac

# ---- a short life under strace ---------------------------------------------
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
exec_reload=$(sed -n 's/^ExecReload=//p' "$unit")
# (NOTIFY_SOCKET names no listener: sending still makes the same calls;
# the log exists before the first look at it)
: >"$tmp/attnd.log"
env ATTND_LAYERS="$layer" ATTND_PORT=0 NOTIFY_SOCKET="$tmp/notify" \
  strace -f -qq -e signal=none -o "$tmp/trace" $exec_start 2>>"$tmp/attnd.log" &
spid=$!
# wait_for EVENT: the log line of that event, within a minute
wait_for() {
  i=0
  while ! grep -q "\"event\":\"$1\"" "$tmp/attnd.log"; do
    kill -0 "$spid" 2>/dev/null || fail "attnd under strace exited before $1: $(tail -5 "$tmp/attnd.log")"
    i=$((i + 1))
    [ $i -lt 600 ] || fail "attnd under strace: no $1 in a minute: $(tail -5 "$tmp/attnd.log")"
    sleep 0.1
  done
}
wait_for listening
port=$(sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' "$tmp/attnd.log")
pid=$(sed -n '1s/ .*//p' "$tmp/trace")
[ -n "$port" ] && [ -n "$pid" ] || fail "no port ($port) or pid ($pid): $(grep listening "$tmp/attnd.log")"
url=http://127.0.0.1:$port
run_load() {
  "$load" --url "$url" --concurrency 2 --quiet --out "$tmp" "$@" \
    >>"$tmp/load.log" 2>&1 || fail "attnd-load $*: $(tail -3 "$tmp/load.log")"
}
# 2 MFLOP on the HTTP thread; 2 GFLOP on a worker, all CPUs' threads
run_load --lengths 32 --warmup 0 --requests 4
run_load --lengths 512 --warmup 0 --requests 4
run_load --mode decode --model demo --embed 64 --heads 4 --lengths 64 --sessions 2 --steps 3
run_load --protocol v2 --model demo --embed 64 --heads 4 --lengths 64 --warmup 0 --requests 4
for p in / /metrics /v1/layers; do
  curl -sf -o /dev/null "$url$p" || fail "GET $p"
done
# (systemd fills in $MAINPID, then runs the line without a shell)
reload=$(printf '%s\n' "$exec_reload" | sed "s/\\\$MAINPID/$pid/g")
strace -f -qq -e signal=none -o "$tmp/trace-reload" $reload ||
  fail "ExecReload=$exec_reload: $reload"
wait_for layers_reloaded
run_load --lengths 512 --warmup 0 --requests 4
kill -TERM "$pid"
status=0
wait "$spid" || status=$?
spid=""
[ $status = 0 ] || fail "attnd exited $status after SIGTERM: $(tail -5 "$tmp/attnd.log")"
grep -q '"event":"stopped","exit_code":0' "$tmp/attnd.log" ||
  fail "attnd did not stop: $(tail -5 "$tmp/attnd.log")"

# ---- what it called ------------------------------------------------------------
# Each trace line starts with the thread's id, then the call's name, or
# "<... NAME resumed>" for the end of one another thread interrupted.
cat "$tmp/trace" "$tmp/trace-reload" >"$tmp/all"
sed -n 's/^[0-9]\{1,\} \{1,\}\(<\.\.\. \)\{0,1\}\([a-z0-9_]\{1,\}\)[( ].*/\2/p' "$tmp/all" |
  LC_ALL=C sort -u >"$tmp/called"
[ -s "$tmp/called" ] || fail "strace's trace has no system call: $(head -3 "$tmp/all")"
killed=$(LC_ALL=C comm -23 "$tmp/called" "$tmp/allowed")
if [ -n "$killed" ]; then
  for c in $killed; do
    printf "  %s: %s\n" "$c" "$(grep -m1 -E "^[0-9]+ +(<\.\.\. )?$c[( ]" "$tmp/all")" >&2
  done
  fail "attnd.service's SystemCallFilter would kill attnd (SIGSYS) at:" $killed
fi
wx=$(grep -E '^[0-9]+ +(mmap\(.*PROT_WRITE\|PROT_EXEC|mmap\(.*PROT_EXEC\|.*PROT_WRITE|(pkey_)?mprotect\(.*PROT_EXEC|shmat\(.*SHM_EXEC)' "$tmp/all" | head -3 || true)
[ -z "$wx" ] || fail "MemoryDenyWriteExecute refuses:
$wx"
grep -oE '^[0-9]+ +socket(pair)?\(AF_[A-Z0-9]+' "$tmp/all" | sed 's/.*(//' | sort -u >"$tmp/families"
for f in $(cat "$tmp/families"); do
  case " $families " in *" $f "*) ;; *)
    fail "RestrictAddressFamilies=$families refuses $f: $(grep -m1 -E "socket(pair)?\($f" "$tmp/all")" ;;
  esac
done
! grep -qE '^[0-9]+ +personality\(' "$tmp/all" ||
  fail "LockPersonality: $(grep -m1 -E '^[0-9]+ +personality\(' "$tmp/all")"
echo "install-check: attnd.service's confinement: $(wc -l <"$tmp/called") system calls, all in its SystemCallFilter, no W+X, families $(echo $(cat "$tmp/families"))"
