#!/usr/bin/env bash
# Many nodes mounting one checkpoint at once, simulated (issue 38, point 3): NODES (16) `ucfs mount` daemons started
# together on one machine, each on its own mount point as nodes would (its own --upper; no per-node cache, a node's
# first mount: --no-cache, or a fresh --cache-dir each with CACHE=cold), against one W = 4096 checkpoint made by
# make_checkpoint.py, without and with the shared index `ucfs index` writes, with no delay and with each metadata
# operation on the source delayed by 1 ms (UCFS_BENCH_METADATA_DELAY_MS: a loaded metadata server). The cases:
#   universal  the checkpoint's root, universal view; each node lists <tag>_universal/zero/ once mounted;
#   reshard    the root at --world-size 1024, writable (--upper per node); each node lists <tag>/ and reads the
#              first 4 KiB of rank 0's optimizer file ("first bytes");
#   run        a run directory RUN/output/checkpoint-100 holding the checkpoint (hard links), universal view;
#              each node lists output/checkpoint-100/<tag>_universal/zero/; "with" is after `ucfs index RUN`.
# ROUNDS (3) rounds of each, without and with the index alternating, and the same with 1 daemon alone (a node with
# the machine to itself: the 16 share its CPUs), medians. Per case: the source's metadata operations (opens + stats
# + listings + path walks, as each daemon's -v log counts them "until mounted" and "until unmounted", the latter
# with the node's listing or read) summed over the nodes and per node, the bytes each read at mount, the slowest
# node's mount time (the daemon's own "(X ms)": its start to the view built; and the wall clock from its launch to
# its mount point being a mount) and the slowest node's first listing / first bytes (from its launch). Needs root
# (or FUSE for the user) and fusermount3; bench/many_nodes.py does each round.
#
#   bench/many_nodes.sh UCFS_BIN [CKPT]   (CKPT made at /tmp/ucfs_w4096 when not given)
#
# Environment: NODES (16), ROUNDS (3), DELAYS ("0 1", ms), TIMEOUT (180 s for a round's mounts and steps),
# CACHE (none: --no-cache; cold: a fresh --cache-dir per node, a real node's first mount with the default cache),
# ALONE (1: each round also with 1 daemon alone, the figures without the other nodes' CPU; empty: not).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ucfs=$(readlink -f "$1")
ckpt=${2:-/tmp/ucfs_w4096}
NODES=${NODES:-16}
ROUNDS=${ROUNDS:-3}
DELAYS=${DELAYS:-0 1}
TIMEOUT=${TIMEOUT:-180}
CACHE=${CACHE:-none}
ALONE=${ALONE-1}
if [ ! -f "$ckpt/latest" ]; then
  /usr/bin/python3 "$here/make_checkpoint.py" --out "$ckpt" --layers 2 --hidden 64 --vocab 512 \
    --world-size 4096 --dtype bf16
fi
ckpt=$(readlink -f "$ckpt")
tag=$(cat "$ckpt/latest")
index=$ckpt/$tag.ucfs-index
saved=$ckpt/.$tag.ucfs-index.saved-by-many_nodes
work=$(mktemp -d /tmp/ucfs_many_nodes.XXXXXX)
run=$work/run
run_index=$run/output/checkpoint-100/$tag.ucfs-index

helper=""
cleanup() {
  local f p m left=0
  # An interrupted round's helper unmounts and stops its daemons on SIGTERM.
  if [ -n "$helper" ]; then kill "$helper" 2>/dev/null || true; wait "$helper" 2>/dev/null || true; fi
  # Daemons of an interrupted round, by the pids many_nodes.py wrote (those still ucfs): they unmount on SIGTERM.
  for f in "$work"/pid*; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    if grep -qa ucfs "/proc/$p/cmdline" 2>/dev/null; then kill "$p" 2>/dev/null || true; fi
  done
  sleep 0.5
  for m in "$work"/mnt*; do
    [ -d "$m" ] || continue
    if mountpoint -q "$m"; then fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null || true; fi
    if mountpoint -q "$m"; then left=1; echo "still mounted: $m" >&2; fi
  done
  rm -f "$index"
  if [ -f "$saved" ]; then mv "$saved" "$index"; fi
  if [ "$left" = 0 ]; then rm -rf "$work"; else echo "$work kept: mounts left in it" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# "Without" needs the checkpoint without its shared index: one already there is put back at the end.
if [ -f "$index" ]; then mv "$index" "$saved"; fi
mkdir -p "$run/output"
cp -al "$ckpt" "$run/output/checkpoint-100"
rm -f "$run"/output/checkpoint-100/*.ucfs-index "$run"/output/checkpoint-100/.*.ucfs-index.saved-by-many_nodes

t0=$(date +%s.%N)
"$ucfs" index "$ckpt" >/dev/null
t1=$(date +%s.%N)
echo "ucfs index $ckpt: $(echo "$t1 - $t0" | bc -l | awk '{printf "%.2f", $1}') s, $(stat -c %s "$index") bytes"
rm -f "$index"
echo "$NODES daemons a round on $(nproc) CPUs, $ROUNDS rounds, cache: $CACHE; $(uname -r)"

results=$work/results.jsonl
# one_round CASE INDEX DELAY NODES: one round of NODES daemons; its JSON line appended to $results.
one_round() {
  local case=$1 with=$2 delay=$3 nodes=$4 src args=()
  case $case in
    universal) src=$ckpt args=(--list "${tag}_universal/zero") ;;
    reshard) src=$ckpt args=(--upper --first "$tag" -- --world-size 1024) ;;
    run) src=$run args=(--list "output/checkpoint-100/${tag}_universal/zero") ;;
  esac
  if [ "$with" = shared ]; then
    if [ "$case" = run ]; then "$ucfs" index "$run" >/dev/null; else "$ucfs" index "$ckpt" >/dev/null; fi
  fi
  # In the background, so that a signal reaches the trap at once (bash waits for a foreground child first).
  /usr/bin/python3 "$here/many_nodes.py" round --ucfs "$ucfs" --source "$src" --work "$work" \
    --label "$case|$with|$delay ms" --nodes "$nodes" --delay-ms "$delay" --timeout "$TIMEOUT" --cache "$CACHE" \
    "${args[@]}" >> "$results" &
  helper=$!
  if ! wait "$helper"; then
    echo "  (failed daemons' logs, last lines:)" >&2
    tail -n 3 "$work"/failed.* >&2 || true
    rm -f "$work"/failed.*
  fi
  helper=""
  rm -f "$index" "$run_index"
}

for delay in $DELAYS; do
  for case in universal reshard run; do
    for _ in $(seq "$ROUNDS"); do
      for nodes in "$NODES" ${ALONE:+1}; do
        one_round "$case" none "$delay" "$nodes"
        one_round "$case" shared "$delay" "$nodes"
      done
    done
  done
done
echo
echo "Medians of $ROUNDS rounds; metadata = opens + stats + listings + path walks on the source; times of the slowest"
echo "node (mount: the daemon's own, and its launch to its mount point; first listing / bytes: from its launch):"
/usr/bin/python3 "$here/many_nodes.py" table "$results"
