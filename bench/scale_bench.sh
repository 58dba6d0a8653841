#!/usr/bin/env bash
# The reshard view at the scale of real runs (issue 23): a 70B-class
# layout (LLaMA-70B's 723 parameter names, thousands of flat sub-groups) at
# N = 64, 1,000 and 4,096 ranks.
#
#   bench/scale_bench.sh UCFS_BIN [CKPT]
#
# CKPT defaults to $WORK/ck70b_w256 (WORK: /var/tmp), made once with
# bench/make_checkpoint.py --layers 80 --hidden 64 --vocab 32000
# --world-size 256 --sub-group-size 100000. For each N of NS ("64 1000
# 4096") it mounts `--world-size N` (no index, so every rank file is built
# from the checkpoint model) and reports, from /proc/PID of the daemon:
#   - the daemon's CPU time (utime + stime) for `ls -l` of the tag directory
#     (every rank file stat'ed: OpenRLHF sums every size before each save,
#     du and rsync stat everything), per rank file;
#   - the same for reading 16 rank files whole, per file;
#   - its peak RSS (VmHWM) after both.
# The baseline in the same run: `ls -l` of the source tag directory's 2W
# files through nothing (a plain directory), wall time per file.
# Needs /dev/fuse (root, or fusermount3).
set -euo pipefail
ucfs=$(readlink -f "$1")
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
work_root=${WORK:-/var/tmp}
ckpt=${2:-$work_root/ck70b_w256}
ns=${NS:-64 1000 4096}
if [ ! -e "$ckpt/latest" ]; then
  /usr/bin/python3 "$here/make_checkpoint.py" --out "$ckpt" --layers 80 --hidden 64 --vocab 32000 \
    --world-size 256 --sub-group-size 100000 >/dev/null
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

# The baseline: stat of every file of a plain directory as large as the tag.
t0=$(now)
ls -l "$ckpt/$tag" > /dev/null
t1=$(now)
src_files=$(find "$ckpt/$tag" -maxdepth 1 -type f | wc -l)
base_ms=$(echo "($t1 - $t0) * 1000 / $src_files" | bc -l)
printf 'baseline: ls -l of the source tag (%d files): %.3f ms of wall time per file\n' \
  "$src_files" "$base_ms"
printf '%6s  %10s  %14s  %14s  %12s  %12s\n' N "rank files" "ls -l CPU" "per file" "16 reads/file" "peak RSS"
for n in $ns; do
  "$ucfs" mount -f --no-cache --world-size "$n" "$ckpt" "$mnt" 2>"$work/mount.err" &
  pid=$!
  until [ -e "$mnt/latest" ]; do sleep 0.01; done
  c0=$(cpu_s "$pid")
  ls -l "$mnt/$tag" > "$work/ls"
  c1=$(cpu_s "$pid")
  files=$(grep -c '_states.pt$' "$work/ls")
  picks=$(awk 'NR > 1 {print $NF}' "$work/ls" | grep '_states.pt$' | awk -v n="$files" \
    'NR % int(n / 16 + 1) == 1' | head -16)
  for f in $picks; do cat "$mnt/$tag/$f" > /dev/null; done
  c2=$(cpu_s "$pid")
  rss=$(hwm_mb "$pid")
  read_count=$(echo "$picks" | wc -w)
  printf '%6d  %10d  %12.2f s  %11.2f ms  %9.2f ms  %9d MB\n' "$n" "$files" \
    "$(echo "$c1 - $c0" | bc -l)" "$(echo "($c1 - $c0) * 1000 / $files" | bc -l)" \
    "$(echo "($c2 - $c1) * 1000 / $read_count" | bc -l)" "$rss"
  unmount
done
