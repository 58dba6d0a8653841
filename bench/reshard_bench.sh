#!/usr/bin/env bash
# The reshard view's benchmark (`ucfs mount --world-size N [--upper DIR]`):
# every figure next to a baseline measured in the same run, alternating,
# median of ROUNDS rounds (these machines are noisy).
#
#   bench/reshard_bench.sh UCFS_BIN CKPT PASSTHROUGH_LL
#
# CKPT: a checkpoint root (bench/make_checkpoint.py makes one) of world size
# W. For N = 1, W and 4W it times the mount (N = 4096 too), reads the whole
# tag directory of rank files cold, as DeepSpeed's N ranks together read
# it, and compares with libfuse's passthrough_ll reading the source shards
# (and with reading them without FUSE);
# then writes a checkpoint-sized file through a writable mount and through
# passthrough_ll into the same file system. Needs root and /dev/fuse.
set -euo pipefail
ucfs=$(readlink -f "$1")
ckpt=$(readlink -f "$2")
ptll=$(readlink -f "$3")
rounds=${ROUNDS:-3}
work=$(mktemp -d /tmp/ucfs_rbench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
tag=$(cat "$ckpt/latest")
source "$(dirname "$(readlink -f "$0")")/bench_lib.sh"
trap cleanup EXIT

mount_reshard() {  # mount_reshard N EXTRA...; sets pid and mount_s
  local t0 t1 n=$1
  shift
  t0=$(now)
  "$ucfs" mount -f "$ckpt" "$mnt" --no-cache --world-size "$n" "$@" 2>"$work/mount.err" &
  pid=$!
  until [ -e "$mnt/latest" ]; do sleep 0.002; done
  t1=$(now)
  mount_s=$(elapsed "$t0" "$t1")
}

shards=("$ckpt/$tag"/*_optim_states.pt)
w=${#shards[@]}
shard_bytes=$(du -cb "$ckpt/$tag"/*.pt | tail -1 | cut -f1)
sizes=(1 "$w" $((4 * w)))
write_mb=${WRITE_MB:-2048}
head -c $((write_mb << 20)) /dev/urandom > "$work/payload"

declare -A read_s mount_t tag_bytes
declare -a pt_s src_s mount_4096 write_ucfs write_pt rss_4096
for ((r = 0; r < rounds; r++)); do
  for n in "${sizes[@]}"; do
    drop_caches
    mount_reshard "$n"
    mount_t[$n]+=" $mount_s"
    tag_bytes[$n]=$(du -cb "$mnt/$tag"/*.pt | tail -1 | cut -f1)
    drop_caches
    read_s[$n]+=" $(read_all "$mnt/$tag"/*.pt)"
    unmount
  done
  mount_ptll "$ckpt/$tag"
  drop_caches
  pt_s+=("$(read_all "$mnt"/*.pt)")
  unmount
  drop_caches
  src_s+=("$(read_all "$ckpt/$tag"/*.pt)")
  mount_reshard 4096
  t_ls=$(now)
  ls -l "$mnt/$tag" > /dev/null  # every rank file sized
  mount_4096+=("$(echo "$mount_s + $(elapsed "$t_ls" "$(now)")" | bc -l)")
  rss_4096+=("$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")")
  unmount
  # Writes: a checkpoint-sized file, fsync'd, through each.
  cat "$work/payload" > /dev/null
  rm -rf "$work/upper" && mount_reshard "$w" --upper "$work/upper"
  t0=$(now)
  dd if="$work/payload" of="$mnt/written.pt" bs=4M conv=fsync status=none
  write_ucfs+=("$(elapsed "$t0" "$(now)")")
  unmount
  rm -rf "$work/ptdir" && mkdir "$work/ptdir"
  mount_ptll "$work/ptdir"
  t0=$(now)
  dd if="$work/payload" of="$mnt/written.pt" bs=4M conv=fsync status=none
  write_pt+=("$(elapsed "$t0" "$(now)")")
  unmount
done

m_pt=$(mbps "$shard_bytes" "$(median "${pt_s[@]}")")
m_src=$(mbps "$shard_bytes" "$(median "${src_s[@]}")")
echo "checkpoint: $ckpt (world size $w, $((shard_bytes / 1000000)) MB of rank files); median of $rounds rounds"
echo
echo "| what | ucfs | baseline | ratio |"
echo "|---|---|---|---|"
for n in "${sizes[@]}"; do
  # shellcheck disable=SC2086
  echo "| mount at N=$n, cold cache, no index | $(median ${mount_t[$n]}) s | | |"
done
echo "| mount at N=4096, then \`ls -l\` of its 8192 rank files | $(median "${mount_4096[@]}") s, peak RSS $(( $(median "${rss_4096[@]}") / 1024 )) MB | | |"
for n in "${sizes[@]}"; do
  # shellcheck disable=SC2086
  m=$(mbps "${tag_bytes[$n]}" "$(median ${read_s[$n]})")
  echo "| read every rank file at N=$n, cold ($((tag_bytes[$n] / 1000000)) MB) | $m MB/s | passthrough_ll over the source's rank files: $m_pt MB/s | $(ratio "$m" "$m_pt")x |"
  echo "| read every rank file at N=$n, cold | $m MB/s | the source's rank files, no FUSE: $m_src MB/s | $(ratio "$m" "$m_src")x |"
done
m_wu=$(mbps $((write_mb << 20)) "$(median "${write_ucfs[@]}")")
m_wp=$(mbps $((write_mb << 20)) "$(median "${write_pt[@]}")")
echo "| write ${write_mb} MiB + fsync through a writable mount | $m_wu MB/s | passthrough_ll into the same file system: $m_wp MB/s | $(ratio "$m_wu" "$m_wp")x |"
