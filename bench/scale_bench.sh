#!/usr/bin/env bash
# The reshard view at the scale of real runs (issue 23), in one run: a
# 70B-class layout (LLaMA-70B's 723 parameter names) at N = 64, 1,000 and
# 4,096 ranks against the same checkpoint exported at N; then saves through
# a writable mount (write_bench.sh) and the read path with the shards in
# the page cache.
#
#   bench/scale_bench.sh UCFS_BIN [CKPT]
#
# CKPT defaults to $WORK/ck70b_w256 (WORK: /var/tmp), made once with
# bench/make_checkpoint.py --layers 80 --hidden 64 --vocab 32000
# --world-size 256 --sub-group-size 100000 (SUB_GROUP_SIZE=0 makes one
# sub-group per parameter, axolotl's sub_group_size: 0, into
# $WORK/ck70b_flat instead). For each N of NS ("64 1000 4096"), page cache
# dropped before each side:
#   - ucfs: `mount --world-size N` without the index until it shows the
#     tag; `ls -l` of the tag directory (every rank file sized: READDIRPLUS
#     stats each entry; OpenRLHF sums every size before each save, du and
#     rsync stat everything), its wall time and the daemon's CPU time
#     (utime + stime from /proc/PID/stat) per rank file; the first read of
#     one rank file (the middle rank's optimizer file); the daemon's CPU
#     for reading 16 more rank files whole, per file; its peak RSS (VmHWM)
#     after all that;
#   - the baseline: `ucfs export --world-size N` of the same (the time the
#     conversion takes), then the same `ls -l` and first read of its files.
# Then, unless SKIP_WRITES=1, bench/write_bench.sh (ROUNDS=3); and, given
# READ_CKPT (default $WORK/ck4 when it exists: make_checkpoint.py --layers
# 12 --hidden 1024 --vocab 32000 --world-size 4 --dtype fp32 --one-group,
# 220M parameters), the universal tree read through a fresh mount with the
# shards in the page cache against the same tree exported and read from
# the page cache (median of ROUNDS, 3, after one uncounted), with
# bench/read_files.
# Needs root (drop_caches, tmpfs) and /dev/fuse.
set -euo pipefail
ucfs=$(readlink -f "$1")
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
work_root=${WORK:-/var/tmp}
sub_group_size=${SUB_GROUP_SIZE:-100000}
default_ckpt=$work_root/ck70b_w256
[ "$sub_group_size" = 0 ] && default_ckpt=$work_root/ck70b_flat
ckpt=${2:-$default_ckpt}
ns=${NS:-64 1000 4096}
if [ ! -e "$ckpt/latest" ]; then
  /usr/bin/python3 "$here/make_checkpoint.py" --out "$ckpt" --layers 80 --hidden 64 --vocab 32000 \
    --world-size 256 --sub-group-size "$sub_group_size" >/dev/null
fi
tag=$(cat "$ckpt/latest")
work=$(mktemp -d "$work_root/ucfs_scale.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
source "$here/bench_lib.sh"
trap cleanup EXIT

ticks=$(getconf CLK_TCK)
cpu_s() {  # cpu_s PID: the process's utime + stime, in seconds
  awk -v hz="$ticks" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}
hwm_mb() { awk '/^VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
ms() { echo "$1 * 1000" | bc -l | awk '{printf "%.0f", $1}'; }
timed() {  # timed CMD...: runs it, prints its wall seconds
  local t0
  t0=$(now)
  "$@" > /dev/null
  elapsed "$t0" "$(now)"
}

echo "checkpoint: $ckpt ($(du -sh "$ckpt" | cut -f1), $(find "$ckpt/$tag" -maxdepth 1 -type f | wc -l) files in its tag)"
echo
echo "| N | rank files | mount / export | \`ls -l\`: ucfs / export (wall) | \`ls -l\`: daemon CPU, per rank file | first read of a rank file: ucfs / export | 16 more reads: daemon CPU per file | daemon peak RSS |"
echo "|---|---|---|---|---|---|---|---|"
for n in $ns; do
  drop_caches
  t0=$(now)
  "$ucfs" mount -f --no-cache --world-size "$n" "$ckpt" "$mnt" 2>"$work/mount.err" &
  pid=$!
  until [ -e "$mnt/latest" ]; do sleep 0.005; done
  mount_s=$(elapsed "$t0" "$(now)")
  c0=$(cpu_s "$pid")
  ls_s=$(timed ls -l "$mnt/$tag")
  c1=$(cpu_s "$pid")
  ls -l "$mnt/$tag" > "$work/ls"
  middle=$(awk '{print $NF}' "$work/ls" | grep "_rank_$((n / 2))_mp_rank_00_optim_states.pt")
  files=$(grep -c '_states.pt$' "$work/ls")
  read_s=$(timed cat "$mnt/$tag/$middle")
  c2=$(cpu_s "$pid")
  picks=$(awk 'NR > 1 {print $NF}' "$work/ls" | grep '_states.pt$' | awk -v n="$files" \
    'NR % int(n / 16 + 1) == 1' | head -16)
  for f in $picks; do cat "$mnt/$tag/$f" > /dev/null; done
  c3=$(cpu_s "$pid")
  rss=$(hwm_mb "$pid")
  read_count=$(echo "$picks" | wc -w)
  unmount

  rm -rf "$work/export"
  export_s=$(timed "$ucfs" export --no-cache --world-size "$n" "$ckpt" "$work/export" 2>/dev/null)
  drop_caches
  export_ls_s=$(timed ls -l "$work/export/$tag")
  export_read_s=$(timed cat "$work/export/$tag/$middle")
  rm -rf "$work/export"

  printf '| %d | %d | %.2f s / %.1f s | %.2f s / %.2f s | %.2f s, %.2f ms | %s ms / %s ms | %.2f ms | %d MB |\n' \
    "$n" "$files" "$mount_s" "$export_s" "$ls_s" "$export_ls_s" "$(echo "$c1 - $c0" | bc -l)" \
    "$(echo "($c1 - $c0) * 1000 / $files" | bc -l)" "$(ms "$read_s")" "$(ms "$export_read_s")" \
    "$(echo "($c3 - $c2) * 1000 / $read_count" | bc -l)" "$rss"
done
echo "(CPU times are in the kernel's ticks of $((1000 / ticks)) ms, summed.)"

if [ "${SKIP_WRITES:-0}" != 1 ]; then
  echo
  ROUNDS=${WRITE_ROUNDS:-3} "$here/write_bench.sh" "$ucfs" 2>/dev/null
fi

read_ckpt=${READ_CKPT:-$work_root/ck4}
if [ -e "$read_ckpt/latest" ]; then
  rf=${READ_FILES:-$(dirname "$ucfs")/bench/read_files}
  rtag=$(cat "$read_ckpt/latest")
  "$ucfs" export --no-cache "$read_ckpt" "$work/uexport" > /dev/null 2>&1
  (cd "$work/uexport/${rtag}_universal" && find zero -name '*.pt' ! -name optimizer_state.pt | sort) \
    > "$work/unames"
  sed "s|^|$mnt/${rtag}_universal/|" "$work/unames" > "$work/uni_mnt"
  sed "s|^|$work/uexport/${rtag}_universal/|" "$work/unames" > "$work/uni_exp"
  bytes=$(xargs -a "$work/uni_exp" -d '\n' du -cb | tail -1 | cut -f1)
  declare -a through cached
  # Round 0 is not counted: on this VM, memory the guest has not touched
  # for a while costs the host's faults on first use, and a fresh mount's
  # page cache is all new pages (one such round ran at a third of the others).
  for ((r = -1; r < ${ROUNDS:-3}; r++)); do
    "$rf" "$read_ckpt/$rtag"/*.pt > /dev/null  # the shards in the page cache
    "$ucfs" mount -f --no-cache "$read_ckpt" "$mnt" 2>"$work/mount.err" &
    pid=$!
    until mountpoint -q "$mnt"; do sleep 0.005; done
    sample=$("$rf" - < "$work/uni_mnt" | mb_s)
    unmount
    "$rf" - < "$work/uni_exp" > /dev/null
    ((r < 0)) && continue
    through+=("$sample")
    cached+=("$("$rf" - < "$work/uni_exp" | mb_s)")
  done
  rm -rf "$work/uexport"
  u=$(median "${through[@]}")
  c=$(median "${cached[@]}")
  echo
  echo "| the universal tree of $read_ckpt ($((bytes / 1000000)) MB), shards in the page cache | ucfs, fresh mount | the tree exported, from the page cache | ratio |"
  echo "|---|---|---|---|"
  echo "| median of ${ROUNDS:-3} rounds (${through[*]} / ${cached[*]} MB/s) | $u MB/s | $c MB/s | $(ratio "$u" "$c")x |"
fi
