#!/usr/bin/env bash
# Mounting a training run's directory: a run of 1 checkpoint against one of
# N (default 100), as HF Trainer lays them out (output_dir/checkpoint-K/ with
# latest, global_stepK/ and the per-rank rng files), alternating, median of
# ROUNDS rounds. For each run:
#   mount      `ucfs mount` until the run's first entry shows
#   ls -l      of the run and of every root in it (every view directory
#              stat'ed, none looked into)
#   first      then a read of one tag's largest fp32.pt (that tag opened)
# and, as a baseline in the same round, `ls -l` of the same directories in
# the source run itself.
#
#   bench/run_dir_bench.sh UCFS_BIN TAG_DIR [N]
#   WORLD_SIZE=3 bench/run_dir_bench.sh ...   # the writable mount at N:
#       --world-size 3 --upper DIR; the read is then of rank 0's optimizer
#       file of the first checkpoint's tag
#
# TAG_DIR: a tag directory to copy into every checkpoint (a fixture's
# checkpoint/global_step4). Needs /dev/fuse.
set -euo pipefail
ucfs=$(readlink -f "$1")
tag_src=$(readlink -f "$2")
n=${3:-100}
rounds=${ROUNDS:-5}
work=$(mktemp -d /tmp/ucfs_run_bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
# shellcheck source=bench_lib.sh
source "$(dirname "$(readlink -f "$0")")/bench_lib.sh"
trap cleanup EXIT

make_run() {  # make_run DIR COUNT
  local k
  for k in $(seq 1 "$2"); do
    mkdir -p "$1/checkpoint-$k"
    cp -r "$tag_src" "$1/checkpoint-$k/global_step$k"
    printf 'global_step%s' "$k" > "$1/checkpoint-$k/latest"
    for r in 0 1; do echo "rng $r" > "$1/checkpoint-$k/rng_state_$r.pth"; done
    echo '{}' > "$1/checkpoint-$k/trainer_state.json"
  done
}
make_run "$work/run1" 1
make_run "$work/run$n" "$n"

ls_roots() {  # ls_roots DIR: ls -l of the run and of each root in it
  local t0 t1
  t0=$(now)
  ls -l "$1" > /dev/null
  for d in "$1"/checkpoint-*; do ls -l "$d" > /dev/null; done
  t1=$(now)
  elapsed "$t0" "$t1"
}

declare -A mount_t ls_t first_t base_t
for round in $(seq 1 "$rounds"); do
  for run in 1 "$n"; do
    src=$work/run$run
    base_t[$run]+="$(ls_roots "$src") "
    t0=$(now)
    extra=()
    if [ -n "${WORLD_SIZE:-}" ]; then extra=(--world-size "$WORLD_SIZE" --upper "$work/upper$run"); fi
    "$ucfs" mount -f "$src" "$mnt" --no-cache "${extra[@]}" 2>"$work/mount.err" &
    pid=$!  # bench_lib.sh's unmount and cleanup wait for it
    export pid
    until [ -e "$mnt/checkpoint-1" ]; do sleep 0.002; done
    t1=$(now)
    mount_t[$run]+="$(elapsed "$t0" "$t1") "
    ls_t[$run]+="$(ls_roots "$mnt") "
    if [ -n "${WORLD_SIZE:-}" ]; then
      biggest=$(ls "$mnt"/checkpoint-1/global_step1/*zero_pp_rank_0_mp_rank_00_optim_states.pt)
    else
      biggest=$(find "$mnt/checkpoint-1/global_step1_universal/zero" -name fp32.pt -printf '%s %p\n' |
                sort -n | tail -1 | cut -d' ' -f2)
    fi
    t0=$(now)
    cat "$biggest" > /dev/null
    t1=$(now)
    first_t[$run]+="$(elapsed "$t0" "$t1") "
    unmount
  done
  echo "round $round done" >&2
done

row() {  # row LABEL ARRAY
  local -n a=$2
  local one many
  # shellcheck disable=SC2086  # the rounds' seconds, one word each
  one=$(median ${a[1]})
  # shellcheck disable=SC2086
  many=$(median ${a[$n]})
  printf '| %-44s | %8.4f s | %8.4f s | %5.2f |\n' "$1" "$one" "$many" "$(ratio "$many" "$one")"
}
echo "| run of 1 checkpoint vs $n, median of $rounds | 1 | $n | ratio |"
echo "|---|---|---|---|"
row "mount, until the run shows" mount_t
row "ls -l of the run and every root (views stat'ed)" ls_t
row "the same ls -l of the source run (baseline)" base_t
if [ -n "${WORLD_SIZE:-}" ]; then read_what="rank 0's optimizer file at N=$WORLD_SIZE"; else read_what="the largest fp32.pt"; fi
row "then a read of $read_what" first_t
