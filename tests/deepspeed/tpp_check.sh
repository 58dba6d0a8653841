#!/usr/bin/env bash
# Real DeepSpeed 0.14.5 resumes from the universal view of tensor- and
# pipeline-parallel checkpoints (the TP/PP fixtures, tests/data/tp_fixtures):
# `ucfs mount CKPT MNT`, then ../shared/oracle/tpp/load_check_tpp.py loads
# MNT with load_universal at another (P, T, D) and checks every value exactly.
# ZeRO-3 with TP is checked at a new D only: DeepSpeed 0.14.5 itself cannot
# load a ZeRO-3 + TP universal checkpoint at a new T (its README).
#
# usage: tests/deepspeed/tpp_check.sh [--full] UCFS_BIN   (ORACLE_DIR as ci_checks.sh sets it)
# Exits 1 if any load failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
full=0
if [ "${1:-}" = --full ]; then full=1; shift; fi
fixtures=$(cd "$here/../data/tp_fixtures" && pwd)
ucfs=$(readlink -f "$1")
oracle=${ORACLE_DIR:-$(cd "$here/../../.." && pwd)/shared/oracle}
mnt=$(mktemp -d "${TMPDIR:-/tmp}/ucfs_tpp_check.XXXXXX")
cleanup() {
  if mountpoint -q "$mnt"; then "$ucfs" umount "$mnt" || true; fi
  rmdir "$mnt"
}
trap cleanup EXIT

# fixture : target topology P,T,D (the saved ones: 1,2,2  2,2,2  1,2,2)
checks=("tp_z1_fp32_t2d2:1,4,1" "pp_bf16opt_p2t2d2:2,1,3" "z3_tp_fp32_t2d2:1,2,3")
if [ "$full" = 1 ]; then
  checks+=("tp_z1_fp32_t2d2:1,1,2" "tp_z1_fp32_t2d2:1,2,3" "pp_bf16opt_p2t2d2:1,2,3"
           "pp_bf16opt_p2t2d2:2,2,1" "z3_tp_fp32_t2d2:1,2,1")
fi
passed=0 failed=0
for entry in "${checks[@]}"; do
  fixture=${entry%%:*} topology=${entry##*:}
  "$ucfs" mount --no-cache "$fixtures/$fixture/checkpoint" "$mnt" ||
    { echo "tpp_check: mount of $fixture failed" >&2; exit 1; }
  echo "== DeepSpeed resumes (universal, P,T,D=$topology) from the mounted $fixture"
  last=$(cd "$oracle/tpp" && /usr/bin/python3 load_check_tpp.py --fixture "$fixtures/$fixture" \
           --ckpt "$mnt" --mode universal --topology "$topology" --quiet 2>&1 | tail -1)
  echo "$last"
  if [[ $last == PASS* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  "$ucfs" umount "$mnt" || { echo "tpp_check: umount failed" >&2; exit 1; }
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
