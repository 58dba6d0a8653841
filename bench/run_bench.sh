#!/usr/bin/env bash
# The universal view's benchmark: every figure next to a baseline measured in
# the same run on the same checkpoint (these machines are noisy).
#
#   bench/run_bench.sh UCFS_BIN CKPT [PASSTHROUGH_LL]
#
# CKPT: a checkpoint root (bench/make_checkpoint.py makes one). PASSTHROUGH_LL:
# libfuse's example/passthrough_ll built against the installed libfuse, for
# the FUSE baseline. With DeepSpeed set up as tests/deepspeed/README.md says
# ($ORACLE_WORK/deepspeed-src), ds_to_universal.py is timed too. Needs root
# (to drop the page cache between cold runs) and /dev/fuse.
set -euo pipefail
ucfs=$(readlink -f "$1")
ckpt=$(readlink -f "$2")
ptll=${3:+$(readlink -f "$3")}
oracle=${ORACLE_WORK:-$HOME/ucfs-oracle}
work=$(mktemp -d /tmp/ucfs_bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
tag=$(cat "$ckpt/latest")
pid=""
cleanup() {
  mountpoint -q "$mnt" && fusermount3 -u "$mnt" || true
  [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l; }
ratio() { echo "scale=2; $1 / $2" | bc -l; }

mount_ucfs() {  # mount_ucfs EXTRA...; sets pid and mount_s
  local t0 t1
  t0=$(now)
  "$ucfs" mount -f "$ckpt" "$mnt" --cache-dir "$work/index" "$@" 2>"$work/mount.err" &
  pid=$!
  until [ -e "$mnt/latest_universal" ]; do sleep 0.002; done
  t1=$(now)
  mount_s=$(elapsed "$t0" "$t1")
}
umount_ucfs() { fusermount3 -u "$mnt"; wait "$pid"; pid=""; }

read_all() {  # read_all FILE...; prints seconds to cat them
  local t0 t1
  t0=$(now)
  cat "$@" > /dev/null
  t1=$(now)
  elapsed "$t0" "$t1"
}

shards=("$ckpt/$tag"/*_optim_states.pt)
shard_bytes=$(du -cb "${shards[@]}" | tail -1 | cut -f1)

# --- mount: cold (empty index, cold cache), then warm (index) -------------
drop_caches
mount_ucfs
cold_mount=$mount_s
umount_ucfs
drop_caches
mount_ucfs
warm_mount=$mount_s

# --- time to first tensor: a cold mount, then torch.load of one fp32.pt ----
first_param=$(ls "$mnt/${tag}_universal/zero" | grep -v optimizer_state | head -1)
umount_ucfs
rm -rf "$work/index"
drop_caches
mount_ucfs
first_tensor=$(/usr/bin/python3 -c "
import time, torch
t = time.time()
x = torch.load('$mnt/${tag}_universal/zero/$first_param/fp32.pt')
print(time.time() - t)")
first_tensor_s=$(echo "$mount_s + $first_tensor" | bc -l)

# --- sequential read of the whole universal tree, cold then re-read --------
mapfile -t uni_files < <(find "$mnt/${tag}_universal/zero" -name '*.pt' ! -name optimizer_state.pt | sort)
uni_bytes=$(du -cb "${uni_files[@]}" | tail -1 | cut -f1)
drop_caches
uni_cold=$(read_all "${uni_files[@]}")
uni_warm=$(read_all "${uni_files[@]}")
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
umount_ucfs

# --- baselines: the shards read directly, and through passthrough_ll -------
drop_caches
src_cold=$(read_all "${shards[@]}")
src_warm=$(read_all "${shards[@]}")
if [ -n "$ptll" ]; then
  "$ptll" -f -o source="$ckpt/$tag" "$mnt" &
  pid=$!
  until mountpoint -q "$mnt"; do sleep 0.01; done
  pt_shards=()
  for s in "${shards[@]}"; do pt_shards+=("$mnt/$(basename "$s")"); done
  drop_caches
  pt_cold=$(read_all "${pt_shards[@]}")
  fusermount3 -u "$mnt"
  wait "$pid"
  pid=""
fi

# --- ds_to_universal.py on the same checkpoint -----------------------------
if [ -d "$oracle/deepspeed-src" ]; then
  drop_caches
  t0=$(now)
  if PYTHONPATH="$oracle/deepspeed-src:$oracle/pydeps" DS_ACCELERATOR=cpu \
      /usr/bin/time -f '%M' -o "$work/ds.rss" \
      /usr/bin/python3 "$oracle/deepspeed-src/deepspeed/checkpoint/ds_to_universal.py" \
      --input_folder "$ckpt/$tag" --output_folder "$work/out/${tag}_universal" --keep_temp_folder \
      > "$work/ds.log" 2>&1; then
    t1=$(now)
    ds_s=$(elapsed "$t0" "$t1")
    ds_rss_mb=$(( $(tail -1 "$work/ds.rss") / 1024 ))
    ds_disk=$(du -sb "$work/out" | cut -f1)
    # The same files, materialised by ds_to_universal, read in the same
    # order through passthrough_ll: FUSE against FUSE over the same bytes.
    if [ -n "$ptll" ]; then
      "$ptll" -f -o source="$work/out/${tag}_universal" "$mnt" &
      pid=$!
      until mountpoint -q "$mnt"; do sleep 0.01; done
      mat_files=()
      for f in "${uni_files[@]}"; do mat_files+=("$mnt/zero/${f#*/zero/}"); done
      drop_caches
      mat_cold=$(read_all "${mat_files[@]}")
      fusermount3 -u "$mnt"
      wait "$pid"
      pid=""
    fi
  else
    echo "ds_to_universal.py failed on this checkpoint:"
    tail -3 "$work/ds.log"
  fi
fi

mbps() { echo "scale=0; $1 / $2 / 1000000" | bc -l; }
cat <<EOF2
checkpoint: $ckpt ($(ls "${shards[@]}" | wc -l) optimizer shards, $((shard_bytes / 1000000)) MB; universal tree $((uni_bytes / 1000000)) MB)

| what | ucfs | baseline | ratio |
|---|---|---|---|
| mount, cold (empty index, cold cache) | ${cold_mount} s | | |
| mount, warm index | ${warm_mount} s | cold mount ${cold_mount} s | $(ratio "$cold_mount" "$warm_mount")x faster |
| first tensor (cold mount + torch.load of $first_param/fp32.pt) | ${first_tensor_s} s | ds_to_universal ${ds_s:-n/a} s | $( [ -n "${ds_s:-}" ] && ratio "$ds_s" "$first_tensor_s" || echo n/a )x sooner |
| sequential read, cold cache | $(mbps "$uni_bytes" "$uni_cold") MB/s | passthrough_ll over ds_to_universal's files, same order $( [ -n "${mat_cold:-}" ] && mbps "$uni_bytes" "$mat_cold" || echo n/a ) MB/s | $( [ -n "${mat_cold:-}" ] && ratio "$(mbps "$uni_bytes" "$uni_cold")" "$(mbps "$uni_bytes" "$mat_cold")" || echo n/a )x |
| sequential read, cold cache | $(mbps "$uni_bytes" "$uni_cold") MB/s | passthrough_ll over the shards $( [ -n "$ptll" ] && mbps "$shard_bytes" "$pt_cold" || echo n/a ) MB/s | $( [ -n "$ptll" ] && ratio "$(mbps "$uni_bytes" "$uni_cold")" "$(mbps "$shard_bytes" "$pt_cold")" || echo n/a )x |
| sequential read, cold cache | $(mbps "$uni_bytes" "$uni_cold") MB/s | shards read directly $(mbps "$shard_bytes" "$src_cold") MB/s | $(ratio "$(mbps "$uni_bytes" "$uni_cold")" "$(mbps "$shard_bytes" "$src_cold")")x |
| re-read (page cache) | $(mbps "$uni_bytes" "$uni_warm") MB/s | shards from page cache $(mbps "$shard_bytes" "$src_warm") MB/s | $(ratio "$(mbps "$uni_bytes" "$uni_warm")" "$(mbps "$shard_bytes" "$src_warm")")x |
| daemon peak RSS | $((rss_kb / 1024)) MB | ds_to_universal ${ds_rss_mb:-n/a} MB | |
| extra disk | 0 | ds_to_universal $( [ -n "${ds_disk:-}" ] && echo $((ds_disk / 1000000)) MB || echo n/a ) | |
EOF2
