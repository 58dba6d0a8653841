# shellcheck shell=bash
# A script's phases, each timed: `phase NAME` ends the previous one (printing its time) and starts NAME; `phase ""`
# ends the last. Lines are tagged [$PHASE_TAG]. `die MESSAGE` says what failed, naming $PHASE_TAG, and exits 1.
# Sourced by the setup and run scripts of tests/ecosystem and tests/fuse_next.

PHASE_TAG=${PHASE_TAG:-setup}
T0=$(date +%s)
phase_start=$T0
phase() {
  local now; now=$(date +%s)
  [ -n "${PHASE:-}" ] && printf '[%s] %-30s %4ds\n' "$PHASE_TAG" "$PHASE" $((now - phase_start))
  PHASE=$1; phase_start=$now
  [ -n "$PHASE" ] && echo "[$PHASE_TAG] -- $PHASE"
  return 0
}
die() { echo "$PHASE_TAG: $*" >&2; exit 1; }
