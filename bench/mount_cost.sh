#!/usr/bin/env bash
# What a mount costs the source file system (issue 38, point 1), on a checkpoint of W = 4096 ranks made by
# make_checkpoint.py: bench/mount_cost (the daemon's mount without the kernel, every operation on the source counted
# at the Env) for the universal view and the reshard view at N = 64, 1024 and 4096, each with no index, with a cold
# per-node index (its first mount), with a warm one, and with the shared index `ucfs index` writes beside the tag
# (removed again at the end); then the same with each metadata operation delayed by 1 ms (a loaded metadata
# server); then a run directory holding the checkpoint, without and with `ucfs index RUN`; then `strace -c` of one
# real `ucfs mount` in the foreground, an `ls -l` of the view's tag directory and a `cat` of its rank 0 optimizer
# file, to check the Env's counts against the system calls.
#
#   bench/mount_cost.sh UCFS_BIN MOUNT_COST_BIN [CKPT]   (CKPT made at /tmp/ucfs_w4096 when not given)
#
# Columns: opens, stats, listings, other path walks (realpath, confine, readlink), read calls and bytes read on the
# source, cumulative over the steps mount, list, first; seconds since the mount began.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ucfs=$(readlink -f "$1")
cost=$(readlink -f "$2")
ckpt=${3:-/tmp/ucfs_w4096}
if [ ! -f "$ckpt/latest" ]; then
  /usr/bin/python3 "$here/make_checkpoint.py" --out "$ckpt" --layers 2 --hidden 64 --vocab 512 \
    --world-size 4096 --dtype bf16
fi
work=$(mktemp -d /tmp/ucfs_mount_cost.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
tag=$(cat "$ckpt/latest")
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work" "$ckpt/$tag.ucfs-index"; }
trap cleanup EXIT

printf '%-36s %-6s %8s %8s %8s %8s %8s %12s %9s\n' view step opens stats listings others reads bytes seconds
for delay in 0 1; do
  for n in "" 64 1024 4096; do
    args=() name=universal
    [ -n "$n" ] && args=(--world-size "$n") && name="reshard N=$n"
    "$cost" "$ckpt" "${args[@]}" --no-cache --delay-ms "$delay" --label "$name, no index, ${delay}ms" 2>/dev/null
    rm -rf "$work/index"
    "$cost" "$ckpt" "${args[@]}" --cache-dir "$work/index" --delay-ms "$delay" \
      --label "$name, cold index, ${delay}ms" 2>/dev/null
    "$cost" "$ckpt" "${args[@]}" --cache-dir "$work/index" --delay-ms "$delay" \
      --label "$name, warm index, ${delay}ms" 2>/dev/null
    "$ucfs" index "$ckpt" >/dev/null
    "$cost" "$ckpt" "${args[@]}" --no-cache --delay-ms "$delay" --label "$name, shared index, ${delay}ms" \
      2>/dev/null
    rm -f "$ckpt/$tag.ucfs-index"
  done
done

# A run directory (an HF Trainer output_dir holding the checkpoint as output/checkpoint-100, hard links of its
# files): the run view opens a root's tag when it is first looked into, from the tag's shared index where
# `ucfs index RUN` wrote one. Steps as above, the `list` step also listing the root (mount_cost --root).
run=$work/run
mkdir -p "$run/output"
cp -al "$ckpt" "$run/output/checkpoint-100"
rm -f "$run/output/checkpoint-100/"*.ucfs-index
for delay in 0 1; do
  for n in "" 1024; do
    args=(--root output/checkpoint-100) name="run, universal"
    [ -n "$n" ] && args+=(--world-size "$n") && name="run, N=$n"
    "$cost" "$run" "${args[@]}" --no-cache --delay-ms "$delay" --label "$name, no index, ${delay}ms" 2>/dev/null
    "$ucfs" index "$run" >/dev/null
    "$cost" "$run" "${args[@]}" --no-cache --delay-ms "$delay" --label "$name, shared index, ${delay}ms" \
      2>/dev/null
    rm -f "$run/output/checkpoint-100/"*.ucfs-index
  done
done

# The system calls of a real mount at N = 1024 (no index): ls -l of the tag, cat of rank 0's optimizer file.
strace -f -c -o "$work/strace" "$ucfs" mount -f --no-cache --world-size 1024 "$ckpt" "$mnt" 2>/dev/null &
for _ in $(seq 200); do mountpoint -q "$mnt" && break; sleep 0.05; done
ls -l "$mnt/$tag" >/dev/null
cat "$mnt/$tag/"*zero_pp_rank_0_mp_rank_00_optim_states.pt >/dev/null
fusermount3 -u "$mnt"
wait || true
echo
echo "strace -c of ucfs mount --world-size 1024 (no index), ls -l of the tag, cat of rank 0's optimizer file:"
grep -E 'syscall|openat|statx|newfstatat|fstat|getdents64|pread64|read$|splice' "$work/strace" || true
