#!/usr/bin/env bash
# Real DeepSpeed 0.14.5 resumes from tensor- and pipeline-parallel checkpoints
# (the TP/PP fixtures, tests/data/tp_fixtures) mounted by ucfs:
# ../shared/oracle/tpp/load_check_tpp.py loads `ucfs mount CKPT MNT` with
# load_universal at another (P, T, D), and `ucfs mount --world-size D' CKPT
# MNT` with a plain load_checkpoint at (P, T, D'), and checks every value
# exactly.
# ZeRO-3 with TP is checked at a new D only: DeepSpeed 0.14.5 itself cannot
# load a ZeRO-3 + TP universal checkpoint at a new T (its README).
#
# usage: tests/deepspeed/tpp_check.sh [--full] UCFS_BIN [MODE:FIXTURE:P,T,D ...]
#        (ORACLE_DIR as ci_checks.sh sets it; checks given run instead of the list below)
# Exits 1 if any load failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
full=0
if [ "${1:-}" = --full ]; then full=1; shift; fi
fixtures=$(cd "$here/../data/tp_fixtures" && pwd)
ucfs=$(readlink -f "$1")
shift
oracle=${ORACLE_DIR:-$(cd "$here/../../.." && pwd)/shared/oracle}
mnt=$(mktemp -d "${TMPDIR:-/tmp}/ucfs_tpp_check.XXXXXX")
run=$(mktemp -d "${TMPDIR:-/tmp}/ucfs_tpp_run.XXXXXX")
cleanup() {
  if mountpoint -q "$mnt"; then "$ucfs" umount "$mnt" || true; fi
  rmdir "$mnt"
  rm -rf "$run"
}
trap cleanup EXIT

# mode : fixture : target topology P,T,D [: extra], the saved P,T,D in the
# fixture's name. Native loads keep P and T: the mount is --world-size D.
# extra: a file of the fixture passed as --universal-info, or FAIL where
# DeepSpeed must not resume right (a T = 1 run's patterns without the
# row-parallel ones, loaded at T = 2: what ucfs warns of), or RUN: the
# checkpoint as a root inside a run directory, the run directory mounted.
checks=("universal:tp_z1_fp32_t2d2:1,1,2" "universal:pp_bf16opt_p2t2d2:2,1,3"
        "universal:z3_tp_fp32_t2d2:1,2,3" "native:tp_z1_fp32_t2d2:1,2,1"
        "native:pp_bf16opt_p2t2d2:2,2,1" "native:z3_tp_fp32_t2d2:1,2,3"
        "universal:tp_z1_swiglu_t4d1:1,2,2" "universal:z3_tp_bf16_t2d3:1,2,2"
        "universal:tp1_z1_megatron_d2:1,2,1:universal_info_rows.json"
        "universal:tp_z1_fp32_t2d2:1,1,2:RUN" "native:pp_bf16opt_p2t2d2:2,2,1:RUN")
if [ "$full" = 1 ]; then
  checks+=("universal:tp_z1_fp32_t2d2:1,4,1" "universal:tp_z1_fp32_t2d2:1,2,3"
           "universal:pp_bf16opt_p2t2d2:1,2,3" "universal:pp_bf16opt_p2t2d2:2,2,1"
           "universal:z3_tp_fp32_t2d2:1,2,1" "native:tp_z1_fp32_t2d2:1,2,3"
           "native:z3_tp_fp32_t2d2:1,2,1" "universal:tp_z1_swiglu_t4d1:1,1,1"
           "native:tp_z1_swiglu_t4d1:1,4,2" "universal:pp_z1_fp32_p2d2_nomodelaxis:1,1,2"
           "universal:pp_z1_fp32_p2d2_nomodelaxis:2,1,3" "native:pp_z1_fp32_p2d2_nomodelaxis:2,1,3"
           "universal:tp_z2_bf16_t2d3:1,1,2" "native:tp_z2_bf16_t2d3:1,2,2"
           "native:z3_tp_bf16_t2d3:1,2,2" "universal:tp1_z1_megatron_d2:1,1,3"
           "native:tp1_z1_megatron_d2:1,1,3" "universal:tp1_z1_megatron_d2:1,2,1:FAIL")
fi
[ $# -gt 0 ] && checks=("$@")
passed=0 failed=0
for entry in "${checks[@]}"; do
  IFS=: read -r mode fixture topology more <<< "$entry"
  extra=()
  [ "$mode" = native ] && extra=(--world-size "${topology##*,}")
  source=$fixtures/$fixture/checkpoint ckpt=$mnt
  if [ "$more" = RUN ]; then
    # A run directory: the checkpoint one level down, beside a log.
    rm -rf "${run:?}"/* && mkdir -p "$run/logs" && cp -r "$source" "$run/ckpt" &&
      printf 'step 4\n' >"$run/logs/train.log" || exit 1
    source=$run ckpt=$mnt/ckpt
  elif [ -n "$more" ] && [ "$more" != FAIL ]; then
    extra+=(--universal-info "$fixtures/$fixture/$more")
  fi
  "$ucfs" mount --no-cache "${extra[@]}" "$source" "$mnt" ||
    { echo "tpp_check: mount of $fixture failed" >&2; exit 1; }
  echo "== DeepSpeed resumes ($mode, P,T,D=$topology) from the mounted $fixture ${extra[*]}${more:+ ($more)}"
  for attempt in 1 2; do
    last=$(cd "$oracle/tpp" && /usr/bin/python3 load_check_tpp.py --fixture "$fixtures/$fixture" \
             --ckpt "$ckpt" --mode "$mode" --topology "$topology" --quiet 2>&1 | tail -1)
    # A rank of the harness that crashed (gloo on a loaded 2-core machine,
    # about 1 run in 20) judged nothing: run it once more. A value that
    # differs is never run again.
    [[ $last == *"ranks did not finish cleanly"* && $attempt == 1 ]] || break
    echo "$last (a rank crashed: once more)"
  done
  echo "$last"
  if [ "$more" = FAIL ]; then
    # The harness judged and found values that differ: as it must.
    [[ $last == FAIL*mismatches* ]] && last="PASS (expected: $last)" || last="FAIL (expected a mismatch): $last"
    echo "$last"
  fi
  if [[ $last == PASS* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  "$ucfs" umount "$mnt" || { echo "tpp_check: umount failed" >&2; exit 1; }
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
