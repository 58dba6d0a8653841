# Sourced by the shell tests: `check DESCRIPTION COMMAND...` runs COMMAND,
# prints "ok: ..." or "FAILED: ...", and remembers a failure in $fail (the
# test ends with `exit $fail`).
fail=0
check() {
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
