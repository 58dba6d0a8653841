#!/usr/bin/env bash
# first_tensor.sh UCFS_BIN CKPT: the first tensor through ucfs against a cold read of the same file from
# `ucfs export` output (issue 38, point 4). Needs root (it drops the page cache) and /dev/fuse.
#
# The largest `fp32.pt` of the universal view is read whole, page cache dropped before each side, ROUNDS (5)
# rounds alternating, medians:
#   cold mount   the daemon started (its binary and libraries dropped too), the mount, then stat, open, the
#                first 4 KiB and the rest of the file: what a job pays when it mounts and reads at once;
#   made ahead   the same read through a mount made before the caches were dropped (a job's prolog mounts
#                while the nodes boot): the daemon's start and the mount out of the path;
#   export       the same stat, open and read of the exported file: the plain file's speed.
# Each step's milliseconds are printed so that the fixed costs show apart from the bytes.
set -euo pipefail
ucfs=$(realpath "$1")
ckpt=$(realpath "$2")
ROUNDS=${ROUNDS:-5}
WORK=${WORK:-/var/tmp}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
work=$(mktemp -d "$WORK/ucfs_first.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
trap cleanup EXIT
export_dir=$WORK/ucfs_first_export.$(basename "$ckpt")
if [ ! -d "$export_dir" ]; then
  "$ucfs" export --no-cache "$ckpt" "$export_dir.tmp" > /dev/null
  mv "$export_dir.tmp" "$export_dir"
fi
rel=$(cd "$export_dir" && find . -name fp32.pt -printf '%s %P\n' | sort -n | tail -1 | cut -d' ' -f2)
echo "file: $rel ($(stat -c %s "$export_dir/$rel") bytes)"

# Prints "stat open first4k rest" in ms for one read of $1, then their sum in s (timed inside the reader, so
# that Python's start is on neither side).
timed_read() {
  /usr/bin/python3 - "$1" <<'EOF'
import os, sys, time
p = sys.argv[1]
t0 = time.perf_counter(); os.stat(p)
t1 = time.perf_counter(); fd = os.open(p, os.O_RDONLY)
t2 = time.perf_counter(); os.read(fd, 4096)
t3 = time.perf_counter()
while os.read(fd, 1 << 20):
    pass
t4 = time.perf_counter(); os.close(fd)
steps = [(b - a) * 1000 for a, b in ((t0, t1), (t1, t2), (t2, t3), (t3, t4))]
print(" ".join(f"{ms:.1f}" for ms in steps), f"{(t4 - t0):.6f}")
EOF
}
start_mount() {
  "$ucfs" mount -f --no-cache "$ckpt" "$mnt" 2>> "$work/daemon.log" &
  pid=$!
  until mountpoint -q "$mnt"; do sleep 0.002; done
}

declare -a cold ahead plain cold_mount
for round in $(seq "$ROUNDS"); do
  # cold mount
  drop_caches
  t0=$(now)
  start_mount
  t1=$(now)
  steps=$(timed_read "$mnt/$rel")
  cold+=("$(echo "$(elapsed "$t0" "$t1") + ${steps##* }" | bc -l)")
  cold_mount+=("$(elapsed "$t0" "$t1")")
  echo "round $round cold mount: mount $(elapsed "$t0" "$t1") s; stat/open/4k/rest ms, s: $steps"
  unmount
  # made ahead
  start_mount
  drop_caches
  steps=$(timed_read "$mnt/$rel")
  ahead+=("${steps##* }")
  echo "round $round made ahead: stat/open/4k/rest ms, s: $steps"
  unmount
  # the exported file
  drop_caches
  steps=$(timed_read "$export_dir/$rel")
  plain+=("${steps##* }")
  echo "round $round export: stat/open/4k/rest ms, s: $steps"
done
c=$(median "${cold[@]}"); a=$(median "${ahead[@]}"); p=$(median "${plain[@]}")
echo "median: cold mount $c s (mount $(median "${cold_mount[@]}") s), made ahead $a s, export $p s"
echo "ratios to the export: cold mount $(ratio "$c" "$p")x, made ahead $(ratio "$a" "$p")x"
