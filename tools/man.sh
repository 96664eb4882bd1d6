#!/bin/sh
# tools/man.sh: a man page (troff, man(7) macros) from a program's --help
# text, so that the page follows the option tables the text comes from
# (server/config.c for attnd, tools/load/main.c for attnd-load).
#
# usage: sh tools/man.sh PROGRAM VERSION "WHAT IT IS" < help.txt > PROGRAM.1
#
# The --help text: a "usage: ..." line (the synopsis), lines of prose (the
# description), option lines "  --name [ARG]  help" (the help may go on
# the next line, indented, when the left column is full), and prose after
# them (exit status and the like).
set -eu
prog=$1 version=$2 what=$3
awk -v prog="$prog" -v version="$version" -v what="$what" '
# troff: a backslash is \e, a leading . or '"'"' is escaped, - is \-
function esc(s) {
  gsub(/\\/, "\\e", s)
  gsub(/-/, "\\-", s)
  if (s ~ /^[.'"'"']/) s = "\\&" s
  return s
}
function opt(left, help,   name, arg) {
  name = left; arg = ""
  if (index(left, " ")) {
    name = substr(left, 1, index(left, " ") - 1)
    arg = substr(left, index(left, " ") + 1)
  }
  print ".TP"
  if (arg != "") print ".BI \"" esc(name) " \" \"" esc(arg) "\""
  else print ".B " esc(name)
  print esc(help)
}
BEGIN {
  print ".\\\" Made by tools/man.sh from `" prog " --help`; do not edit."
  print ".TH " toupper(prog) " 1 \"\" \"" prog " " version "\" \"User Commands\""
  print ".SH NAME"
  print prog " \\- " esc(what)
  state = "head"; pending = ""
}
/^usage: / {
  sub(/^usage: /, "")
  print ".SH SYNOPSIS"
  print esc($0)
  print ".SH DESCRIPTION"
  next
}
/^  -/ {
  if (state != "opts") { print ".SH OPTIONS"; state = "opts" }
  line = substr($0, 3)
  if (match(line, /  +/)) {
    opt(substr(line, 1, RSTART - 1), substr(line, RSTART + RLENGTH))
    pending = ""
  } else {
    pending = line
  }
  next
}
pending != "" && /^      / {
  sub(/^ +/, "")
  opt(pending, $0)
  pending = ""
  next
}
/^$/ { if (state != "opts") print ".PP"; next }
/^exit status: / {
  sub(/^exit status: /, "")
  print ".SH EXIT STATUS"
  print esc($0)
  state = "tail"
  next
}
{
  if (state == "opts") { print ".SH NOTES"; state = "tail" }
  print esc($0)
}
END {
  print ".SH SEE ALSO"
  print "The documents in the source tree: README.md, docs/api.md, docs/operations.md, docs/load-testing.md."
}
'
