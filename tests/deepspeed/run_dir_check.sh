#!/usr/bin/env bash
# Real DeepSpeed resumes from the roots of a mounted training run (the run
# view, src/design/run-directories.md): the fixtures laid out as HF Trainer
# (checkpoint-4/ ZeRO-3, checkpoint-8/ ZeRO-2), Lightning
# (epoch=0-step=4.ckpt/, tag `checkpoint`) and verl (global_step_4/actor/step_4/,
# tag `4`) write them, `ucfs mount RUN MNT`, then load_check.py
# (MODE=universal, N=3) from each root inside the mount; then
# `ucfs mount --world-size N --upper U RUN MNT` and a plain native
# load_checkpoint at N from each root (N below, at and above the saved W),
# with HF's rng_state_{r}.pth shown at N and the run's bytes unchanged; then
# a checkpoint saved at 3 ranks through one mount, resumed (native at 2,
# universal at 4) through mounts that lay its --upper under them (--layer).
#
# usage: tests/deepspeed/run_dir_check.sh UCFS_BIN   (ORACLE_DIR as ci_checks.sh sets it)
# Exits 1 if any load failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fixtures=$(cd "$here/../data/fixtures" && pwd)
ucfs=$(readlink -f "$1")
oracle=${ORACLE_DIR:-$(cd "$here/../../.." && pwd)/shared/oracle}
work=$(mktemp -d "${TMPDIR:-/tmp}/ucfs_run_dir_check.XXXXXX")
run=$work/run
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() {
  if mountpoint -q "$mnt"; then "$ucfs" umount "$mnt" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# root (relative to the run) : fixture : tag
layout=("checkpoint-4:z3_bf16_ws2:global_step4" "checkpoint-8:z2_tricky_fp32_ws2:global_step8"
        "checkpoints/epoch=0-step=4.ckpt:z3_fp32_ws2:checkpoint" "global_step_4/actor/step_4:z3_bf16_ws3:4")
for entry in "${layout[@]}"; do
  IFS=: read -r root fixture tag <<< "$entry"
  mkdir -p "$run/$root"
  cp -r "$fixtures/$fixture/checkpoint/global_step4" "$run/$root/$tag"
  printf '%s' "$tag" > "$run/$root/latest"
done
echo '{}' > "$run/checkpoint-4/config.json"
for r in 0 1; do echo "rng $r" > "$run/checkpoint-4/rng_state_$r.pth"; done

failed=0 passed=0
# load_check FIXTURE DIR MODE N: real DeepSpeed resumes from DIR at N ranks; counted.
load_check() {
  local last
  last=$(/usr/bin/python3 "$oracle/load_check.py" --fixture "$fixtures/$1" --ckpt "$2" --mode "$3" \
           --world-size "$4" --quiet 2>&1 | tail -1)
  echo "$last"
  if [[ $last == PASS* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
}
"$ucfs" mount --no-cache "$run" "$mnt" || { echo "run_dir_check: mount failed" >&2; exit 1; }
for entry in "${layout[@]}"; do
  IFS=: read -r root fixture tag <<< "$entry"
  echo "== DeepSpeed resumes (universal, N=3) from the run's $root (tag $tag, $fixture)"
  load_check "$fixture" "$mnt/$root" universal 3
done
"$ucfs" umount "$mnt" || { echo "run_dir_check: umount failed" >&2; exit 1; }

before=$(cd "$run" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
# root : new world size (the saved one is 2, 2, 2, 3)
native=("checkpoint-4:3" "checkpoint-8:1" "checkpoints/epoch=0-step=4.ckpt:2" "global_step_4/actor/step_4:2")
for entry in "${native[@]}"; do
  IFS=: read -r root n <<< "$entry"
  fixture=
  for l in "${layout[@]}"; do
    IFS=: read -r r f t <<< "$l"
    [ "$r" = "$root" ] && fixture=$f
  done
  upper=$work/upper_${n}_${fixture}
  "$ucfs" mount --no-cache --world-size "$n" --upper "$upper" "$run" "$mnt" ||
    { echo "run_dir_check: mount --world-size $n failed" >&2; exit 1; }
  if [ "$root" = checkpoint-4 ]; then
    shown=$(cd "$mnt/checkpoint-4" && ls -d rng_state_* | tr '\n' ' ')
    echo "checkpoint-4 at N=$n shows: $shown"
    if [ "$shown" != "rng_state_0.pth rng_state_1.pth rng_state_2.pth " ] ||
       ! cmp -s "$mnt/checkpoint-4/rng_state_2.pth" "$run/checkpoint-4/rng_state_0.pth"; then
      echo "FAIL: rng_state_{r}.pth not shown at N=$n"
      failed=$((failed + 1))
    fi
    if ls "$mnt/checkpoint-4" | grep -q _universal; then
      echo "FAIL: a writable mount shows the extra views"
      failed=$((failed + 1))
    fi
  fi
  echo "== DeepSpeed resumes (native, N=$n) from the run's $root ($fixture)"
  load_check "$fixture" "$mnt/$root" native "$n"
  "$ucfs" umount "$mnt" || { echo "run_dir_check: umount failed" >&2; exit 1; }
done
# Elastic twice over: a job at 3 ranks saves checkpoint-12 through its mount
# (a real 3-rank save) and rotates checkpoint-4 away; the next job, at 2,
# lays the first's --upper under its own and resumes from checkpoint-12.
first=$work/upper_first
"$ucfs" mount --no-cache --world-size 3 --upper "$first" "$run" "$mnt" ||
  { echo "run_dir_check: mount --world-size 3 failed" >&2; exit 1; }
mkdir -p "$mnt/checkpoint-12"
cp -r "$fixtures/z3_bf16_ws3/checkpoint/global_step4" "$mnt/checkpoint-12/global_step12"
printf 'global_step12' > "$mnt/checkpoint-12/latest"
rm -rf "$mnt/checkpoint-4"
"$ucfs" umount "$mnt" || { echo "run_dir_check: umount failed" >&2; exit 1; }
layer_before=$(cd "$first" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
for mode in native universal; do
  if [ "$mode" = native ]; then
    n=2
    "$ucfs" mount --no-cache --layer "$first" --world-size 2 --upper "$work/upper_second" "$run" "$mnt"
  else
    n=4
    "$ucfs" mount --no-cache --layer "$first" "$run" "$mnt"
  fi || { echo "run_dir_check: mount --layer failed" >&2; exit 1; }
  echo "== DeepSpeed resumes ($mode, N=$n) from checkpoint-12, saved at 3 through an earlier mount (--layer)"
  load_check z3_bf16_ws3 "$mnt/checkpoint-12" "$mode" "$n"
  "$ucfs" umount "$mnt" || { echo "run_dir_check: umount failed" >&2; exit 1; }
done
layer_after=$(cd "$first" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
if [ "$layer_before" != "$layer_after" ]; then
  echo "FAIL: the layer's files changed under the mounts over it"
  failed=$((failed + 1))
fi
after=$(cd "$run" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
if [ "$before" != "$after" ]; then
  echo "FAIL: the run's files changed under the writable mounts"
  failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
