#!/usr/bin/env bash
# Real DeepSpeed judges the mounts, as CI runs it (after the test suite).
#
# usage: tests/deepspeed/ci_checks.sh [--full] UCFS_BIN
#
# Sets up DeepSpeed 0.14.5 with ../shared/oracle/setup_env.sh (Debian's packages, then DeepSpeed and
# hjson from PyPI by name; nothing of DeepSpeed is kept in the tree), then runs run_load_checks.sh. Each check launches N DeepSpeed ranks, about
# 5 s plus 3.5 s a rank on 2 cores, and a writable-view check five launches: the whole matrix took
# 41 minutes there, so CI runs a subset that still covers every fixture and every kind of check:
#   - every fixture's reshard view (MODE=native) at one world size it was not saved at (N = 1 to 5,
#     below and above its own), and z3_tricky_fp32_ws4 (two param groups, sub-groups, frozen and tied
#     params) at every N;
#   - the universal view (MODE=universal, whose files do not depend on N) of one fixture of each
#     kind: ZeRO-3 bf16, the tricky ZeRO-3 one (DeepSpeed's loader with its fix), ZeRO-1 with
#     BF16_Optimizer, ZeRO-2 fp16;
#   - the writable view (MODE=save: load, save through the mount, reload the upper directory alone,
#     mount it again) at ZeRO-3, ZeRO-1 with BF16_Optimizer and ZeRO-2 fp16 with its loss scaler;
#   - the fixtures re-written as newer writers would (tests/tools/torch_variants.py): torch 2.7 with
#     4096-byte alignment and the archive/ prefix, and torch's legacy format from torch 2.4, each in
#     the universal view of one fixture and the reshard view of the tricky one, at N=3.
# --full runs the whole matrix instead (by hand, before a release): every fixture in the universal
# and reshard views at every other N, the writable view of every fixture at N=1 and 3, the variants
# of two fixtures in both views.
#
# A ucfs built with sanitizers (the test preset) writes its reports to $UCFS_SANITIZER_REPORTS
# (default: a fresh temp dir); any report fails the run, as in ctest.
# Exits 1 if any check failed or any sanitizer report was written.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
full=0
if [ "${1:-}" = --full ]; then full=1; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [--full] UCFS_BIN" >&2; exit 2; }
export UCFS_BIN=$1
export ORACLE_DIR=${ORACLE_DIR:-$(cd "$repo/.." && pwd)/shared/oracle}
[ -x "$ORACLE_DIR/setup_env.sh" ] || [ -f "$ORACLE_DIR/setup_env.sh" ] ||
  { echo "ci_checks: no setup_env.sh in ORACLE_DIR=$ORACLE_DIR" >&2; exit 2; }
bash "$ORACLE_DIR/setup_env.sh" || { echo "ci_checks: setup_env.sh failed" >&2; exit 2; }
export DS_IMPORT_CHECKED=1  # setup_env.sh ends by importing torch and deepspeed

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
zero3=()
for d in "$repo"/tests/data/fixtures/z3_*/; do zero3+=("$(basename "$d")"); done
zero12=()
for d in "$repo"/tests/data/fixtures/z[12]_*/; do zero12+=("$(basename "$d")"); done
variants=("--torch 2.7 --alignment 4096 --archive-prefix" "--torch 2.4 --legacy")

# Sanitizer reports of every ucfs process (the options ctest gives the test preset's tests).
reports=${UCFS_SANITIZER_REPORTS:-$(mktemp -d "${TMPDIR:-/tmp}/ucfs_ds_sanitizer.XXXXXX")}
mkdir -p "$reports"
export ASAN_OPTIONS="log_path=$reports/ucfs:log_exe_name=1:abort_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="log_path=$reports/ucfs:log_exe_name=1:abort_on_error=1:print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

if [ $full = 1 ]; then
  run "universal view" MODE=universal -- "${zero3[@]}"
  run "native view (--world-size N)" MODE=native -- "${zero3[@]}"
  run "writable view (--upper DIR), N=1 and 3" MODE=save "WORLD_SIZES=1 3" -- "${zero3[@]}" "${zero12[@]}"
  run "ZeRO-1/2, universal view" MODE=universal -- "${zero12[@]}"
  run "ZeRO-1/2, native view" MODE=native -- "${zero12[@]}"
  for variant in "${variants[@]}"; do
    for mode in universal native; do
      run "$mode view of the fixtures as written by: $variant" MODE=$mode "VARIANT=$variant" "WORLD_SIZES=3" -- \
        z3_bf16_ws2 z3_tricky_fp32_ws4
    done
  done
else
  # FIXTURE:N pairs: every fixture once, N < W and N > W both, N = 1 to 5. N must divide the global
  # batch: 12 for the plain ZeRO-3 fixtures, 120 for the others.
  for pair in z3_bf16_ws2:3 z3_bf16_ws3:4 z3_bf16_ws4:1 z3_fp32_ws2:4 z3_fp32_ws3:2 z3_fp32_ws4:3 \
    z1_tricky_bf16opt_ws2:3 z1_tricky_fp32_ws4:2 z2_tricky_bf16_ws4:1 z2_tricky_fp16_ws3:2 z2_tricky_fp32_ws2:5; do
    run "native view (--world-size N), ${pair%%:*} at N=${pair##*:}" MODE=native "WORLD_SIZES=${pair##*:}" -- "${pair%%:*}"
  done
  run "native view (--world-size N), z3_tricky_fp32_ws4 at every N" MODE=native -- z3_tricky_fp32_ws4
  for pair in z3_bf16_ws4:2 z3_tricky_fp32_ws4:3 z1_tricky_bf16opt_ws2:3 z2_tricky_fp16_ws3:2; do
    run "universal view, ${pair%%:*} at N=${pair##*:}" MODE=universal "WORLD_SIZES=${pair##*:}" -- "${pair%%:*}"
  done
  for pair in z3_tricky_fp32_ws4:3 z1_tricky_bf16opt_ws2:3 z2_tricky_fp16_ws3:2; do
    run "writable view (--upper DIR), ${pair%%:*} at N=${pair##*:}" MODE=save "WORLD_SIZES=${pair##*:}" -- "${pair%%:*}"
  done
  for variant in "${variants[@]}"; do
    run "universal view of z3_bf16_ws2 as written by: $variant" MODE=universal "VARIANT=$variant" "WORLD_SIZES=3" -- z3_bf16_ws2
    run "native view of z3_tricky_fp32_ws4 as written by: $variant" MODE=native "VARIANT=$variant" "WORLD_SIZES=3" -- \
      z3_tricky_fp32_ws4
  done
fi

# Every run: DeepSpeed resuming from the roots of a mounted training run.
start=$SECONDS
echo "== DeepSpeed checks: roots of a mounted run directory (HF Trainer, Lightning, verl layouts)"
if ! "$here/run_dir_check.sh" "$UCFS_BIN"; then failed=1; fi
echo "ci_checks: run directory roots took $((SECONDS - start)) s"

# Every run: DeepSpeed resuming from the universal view of TP/PP checkpoints.
start=$SECONDS
echo "== DeepSpeed checks: tensor- and pipeline-parallel checkpoints' universal view"
if ! "$here/tpp_check.sh" $([ "$full" = 1 ] && echo --full) "$UCFS_BIN"; then failed=1; fi
echo "ci_checks: tensor- and pipeline-parallel checkpoints took $((SECONDS - start)) s"

if [ -n "$(ls -A "$reports")" ]; then
  echo "ci_checks: sanitizer reports from ucfs in $reports:" >&2
  cat "$reports"/* >&2
  failed=1
fi
exit $failed
