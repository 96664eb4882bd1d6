# tools/device/deadline.sh: sourced by the device scripts (check.sh,
# cores.sh) after setting `me` (their name, for messages). It gives each
# step its share of the time left, so that tools/device/session.sh can run
# both scripts in one call of the device tool.
#
# DEVICE_DEADLINE (seconds since the epoch; unset or empty: none) is when
# the script must be done.

skipped=""

# secs N [MIN]: prints N, or the seconds left before DEVICE_DEADLINE where
# fewer are left; returns 1, printing nothing, when fewer than MIN (20)
# are left. A step runs with `timeout "$(secs N)"`, or is skipped.
secs() {
  [ -n "${DEVICE_DEADLINE:-}" ] || {
    echo "$1"
    return 0
  }
  left=$((DEVICE_DEADLINE - $(date +%s)))
  [ "$left" -ge "${2:-20}" ] || return 1
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# skip STEP: the step did not run for want of time; said now, and again
# in the script's last line ($skipped).
skip() {
  skipped="$skipped $1"
  echo "$me: $1 SKIPPED: out of time (DEVICE_DEADLINE)"
}
