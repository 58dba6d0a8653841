#!/usr/bin/env bash
# Real DeepSpeed judges the mounts, as CI runs it (after the test suite).
#
# usage: tests/deepspeed/ci_checks.sh UCFS_BIN
#
# Sets up DeepSpeed 0.14.5 from ../shared/oracle (setup_env.sh: Debian's packages and the vendored
# sources, nothing else), then runs run_load_checks.sh:
#   - MODE=universal and MODE=native: every ZeRO-3 fixture at every other world size 1-5 (22 checks
#     each), every ZeRO-1/2 fixture at one other world size (5 checks each);
#   - MODE=save: every ZeRO-3 fixture at N=1 and N=3 where N is not its own world size (11 checks; the
#     full 22 take 12-15 minutes and are run by hand, see README.md), two ZeRO-1/2 fixtures at one N;
#   - the fixtures re-written as newer writers would (tests/tools/torch_variants.py): torch 2.7 with
#     4096-byte alignment and the archive/ prefix, and torch's legacy format from torch 2.4, each
#     through the universal and the native view of two fixtures at N=3.
# Exits 1 if any check failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ $# -eq 1 ] || { echo "usage: $0 UCFS_BIN" >&2; exit 2; }
export UCFS_BIN=$1
export ORACLE_DIR=${ORACLE_DIR:-$(cd "$repo/.." && pwd)/shared/oracle}
[ -x "$ORACLE_DIR/setup_env.sh" ] || [ -f "$ORACLE_DIR/setup_env.sh" ] ||
  { echo "ci_checks: no setup_env.sh in ORACLE_DIR=$ORACLE_DIR" >&2; exit 2; }
bash "$ORACLE_DIR/setup_env.sh" || { echo "ci_checks: setup_env.sh failed" >&2; exit 2; }

failed=0
run() {  # run DESCRIPTION ENV... -- FIXTURE...
  local what=$1 start=$SECONDS
  shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo "== DeepSpeed checks: $what"
  if ! env "${envs[@]}" "$here/run_load_checks.sh" "$@"; then failed=1; fi
  echo "ci_checks: $what took $((SECONDS - start)) s"
}
# ZeRO-3: every fixture at every other world size.
zero3=()
for d in "$repo"/tests/data/fixtures/z3_*/; do zero3+=("$(basename "$d")"); done
run "universal view" MODE=universal -- "${zero3[@]}"
run "native view (--world-size N)" MODE=native -- "${zero3[@]}"
run "writable view (--upper DIR), N=1 and 3" MODE=save "WORLD_SIZES=1 3" -- "${zero3[@]}"
# ZeRO-1/2: every fixture at one other world size (3, or 2 for the one saved at 3), the writable view
# of two (BF16_Optimizer; fp16 with its loss scaler). All world sizes take 12 more minutes: by hand.
zero12_at3=(z1_tricky_bf16opt_ws2 z1_tricky_fp32_ws4 z2_tricky_bf16_ws4 z2_tricky_fp32_ws2)
for mode in universal native; do
  run "ZeRO-1/2, $mode view, N=3" MODE=$mode "WORLD_SIZES=3" -- "${zero12_at3[@]}"
  run "ZeRO-1/2, $mode view, N=2" MODE=$mode "WORLD_SIZES=2" -- z2_tricky_fp16_ws3
done
run "ZeRO-1/2, writable view, N=3" MODE=save "WORLD_SIZES=3" -- z1_tricky_bf16opt_ws2
run "ZeRO-1/2, writable view, N=2" MODE=save "WORLD_SIZES=2" -- z2_tricky_fp16_ws3
for variant in "--torch 2.7 --alignment 4096 --archive-prefix" "--torch 2.4 --legacy"; do
  for mode in universal native; do
    run "$mode view of the fixtures as written by: $variant" MODE=$mode "VARIANT=$variant" "WORLD_SIZES=3" -- \
      z3_bf16_ws2 z3_tricky_fp32_ws4
  done
done
exit $failed
