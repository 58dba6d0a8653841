#!/usr/bin/env bash
# FUSE passthrough (issue 38, point 5): files that are one real file whole, read and written through
# three daemons, each figure against its baseline in the same round, alternating, median of ROUNDS (5):
#   deb12     the Debian 12 build (libfuse 3.14: no passthrough; every read reaches the daemon)
#   next      the libfuse 3.18 build (tests/fuse_next), passthrough on
#   next-off  the same with --no-passthrough
#
#   bench/passthrough_bench.sh UCFS_DEB12 UCFS_NEXT CKPT
#
# UCFS_NEXT is the sid root's build (UCFS_FUSE_NEXT_DIR/build/ucfs): run on this host through the root's own
# loader and libraries (NEXT_ROOT, default /var/cache/ucfs-fuse-next/sid), so that its mounts are this
# namespace's. What is measured (bench/read_files, one 1 MiB buffer, best of 3 after a first read):
#   1. re-reads of a source rank file the universal view passes through whole (rank 0's optimizer
#      shard), against the same file read from the page cache directly;
#   2. re-reads of rank 0's optimizer file of the reshard view at N = W (assembled: served by the
#      daemon either way), against the same source shard from the page cache;
#   3. re-reads of a 1 GiB upper file through a writable mount, against the upper file read directly;
#   4. 1 GiB written with dd (bs=4M, fsync'd) through --upper, against the same written straight into
#      the upper directory, on tmpfs (the write path alone) and on disk (WORK).
# Needs root and /dev/fuse; reads only from the page cache (the files are read once first).
set -euo pipefail
deb12=$(readlink -f "$1")
next_bin=$(readlink -f "$2")
ckpt=$(readlink -f "$3")
next_root=${NEXT_ROOT:-/var/cache/ucfs-fuse-next/sid}
rounds=${ROUNDS:-5}
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
source "$here/bench_lib.sh"
setup_reads "$deb12" "$ckpt" passthrough
mkdir -p "$work/tmpfs"
mount -t tmpfs -o size=3g tmpfs "$work/tmpfs"
cleanup_pt() {
  cleanup_mount_only || true
  umount "$work/tmpfs" 2>/dev/null || true
  rm -rf "$work"
}
cleanup_mount_only() { if mountpoint -q "$mnt"; then fusermount3 -u "$mnt"; fi; }
trap cleanup_pt EXIT

run_ucfs() {  # run_ucfs KIND ARGS...: one of the three daemons' binaries
  case "$1" in
    deb12) shift; "$deb12" "$@" ;;
    *) shift
       "$next_root/lib64/ld-linux-x86-64.so.2" \
         --library-path "$next_root/lib/x86_64-linux-gnu:$next_root/usr/lib/x86_64-linux-gnu" "$next_bin" "$@" ;;
  esac
}
mount_kind() {  # mount_kind KIND EXTRA...: mounts CKPT on $mnt
  local kind=$1 flags=()
  shift
  [ "$kind" = next-off ] && flags=(--no-passthrough)
  run_ucfs "$kind" mount -f --no-cache "${flags[@]}" "$@" "$ckpt" "$mnt" 2>>"$work/mount.$kind.err" &
  pid=$!
  until mountpoint -q "$mnt"; do sleep 0.01; done
}
best3_file() {  # best3_file FILE: a first read, then the best of three, in MB/s
  echo "$1" > "$work/one"
  "$rf" - < "$work/one" > /dev/null
  for _ in 1 2 3; do "$rf" - < "$work/one"; done | sort -k2 -g | head -1 | mb_s
}
dd_s() {  # dd_s FILE: seconds to write 1 GiB into FILE and fsync it
  local t0
  t0=$(now)
  dd if=/dev/zero of="$1" bs=4M count=256 conv=fsync status=none
  elapsed "$t0" "$(now)"
}

shard=$tag/zero_pp_rank_0_mp_rank_00_optim_states.pt
ws=$(find "$ckpt/$tag" -name '*_optim_states.pt' | wc -l)
kinds=(deb12 next next-off)
declare -A t
for r in $(seq "$rounds"); do
  # Which daemon goes first rotates from round to round.
  mapfile -t order < <(printf '%s\n' "${kinds[@]}" | awk -v r="$r" '{a[NR]=$0} END {for (i = 0; i < NR; i++) print a[(i + r) % NR + 1]}')
  for kind in "${order[@]}"; do
    mount_kind "$kind"
    t[whole.$kind]+=" $(best3_file "$mnt/$shard")"
    t[whole.direct]+=" $(best3_file "$ckpt/$shard")"
    unmount
    mount_kind "$kind" --world-size "$ws"
    t[reshard.$kind]+=" $(best3_file "$mnt/$shard")"
    unmount
    for where in tmpfs disk; do
      if [ "$where" = tmpfs ]; then base=$work/tmpfs; else base=$work/disk; fi
      rm -rf "$base/upper" "$base/direct" && mkdir -p "$base/upper" "$base/direct"
      mount_kind "$kind" --upper "$base/upper"
      [ "$where" = disk ] && sleep "${SETTLE:-3}"
      t[dd.$where.$kind]+=" $(dd_s "$mnt/big")"
      [ "$where" = disk ] && sleep "${SETTLE:-3}"
      t[dd.$where.direct]+=" $(dd_s "$base/direct/big")"
      if [ "$where" = tmpfs ]; then
        t[upper.$kind]+=" $(best3_file "$mnt/big")"
        t[upper.direct]+=" $(best3_file "$base/upper/big")"
      fi
      unmount
      rm -rf "$base/upper" "$base/direct"
    done
  done
done
for k in $(printf '%s\n' "${!t[@]}" | sort); do echo "samples $k:${t[$k]}" >&2; done
for kind in "${kinds[@]}"; do
  grep -h "passthrough" "$work/mount.$kind.err" 2>/dev/null | sort -u | sed "s/^/$kind: /" >&2 || true
done

med() { local k=$1; shift; median ${t[$k]}; }  # shellcheck disable=SC2086
echo "re-reads (page cache, MB/s) and 1 GiB writes (s), median of $rounds rounds; ratios against the baseline of the same rounds"
echo
echo "| | baseline | deb12 (3.14) | next (3.18, passthrough) | next --no-passthrough |"
echo "|---|---|---|---|---|"
row() {  # row LABEL KEY BASELINE_KEY UNIT: higher is better for MB/s, lower for s
  local label=$1 key=$2 base=$3 unit=$4 b line
  b=$(med "$base")
  line="| $label | $b $unit |"
  for kind in "${kinds[@]}"; do
    local v
    v=$(med "$key.$kind")
    if [ "$unit" = MB/s ]; then line+=" $v $unit ($(ratio "$v" "$b")x) |"; else
      line+=" $v $unit ($(ratio "$b" "$v")x) |"; fi
  done
  echo "$line"
}
row "re-read, a source rank file passed through whole (universal view)" whole whole.direct MB/s
row "re-read, rank 0's optimizer file of the reshard view at N = W (assembled)" reshard whole.direct MB/s
row "re-read, a 1 GiB upper file (--upper on tmpfs)" upper upper.direct MB/s
row "1 GiB dd bs=4M + fsync through --upper, tmpfs" dd.tmpfs dd.tmpfs.direct s
row "1 GiB dd bs=4M + fsync through --upper, disk" dd.disk dd.disk.direct s
