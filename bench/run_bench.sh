#!/usr/bin/env bash
# The universal view's benchmark: every figure next to a baseline measured in
# the same run on the same checkpoint, alternating, median of ROUNDS rounds
# (these machines are noisy).
#
#   bench/run_bench.sh UCFS_BIN CKPT [PASSTHROUGH_LL]
#
# CKPT: a checkpoint root (bench/make_checkpoint.py makes one; use --one-group,
# DeepSpeed 0.14.5's converter cannot handle several sub-groups).
# PASSTHROUGH_LL: libfuse's example/passthrough_ll built against the
# installed libfuse, for the FUSE baselines. With DeepSpeed set up as
# tests/deepspeed/README.md says ($ORACLE_WORK/deepspeed-src),
# ds_to_universal.py is timed too. Needs root (to drop the page cache
# between cold runs) and /dev/fuse.
set -euo pipefail
ucfs=$(readlink -f "$1")
ckpt=$(readlink -f "$2")
ptll=${3:+$(readlink -f "$3")}
rounds=${ROUNDS:-3}
oracle=${ORACLE_WORK:-$HOME/ucfs-oracle}
work=$(mktemp -d /tmp/ucfs_bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
tag=$(cat "$ckpt/latest")

source "$(dirname "$(readlink -f "$0")")/bench_lib.sh"
trap cleanup EXIT

mount_ucfs() {  # mount_ucfs EXTRA...; sets pid and mount_s
  local t0 t1
  t0=$(now)
  "$ucfs" mount -f "$ckpt" "$mnt" --cache-dir "$work/index" "$@" 2>"$work/mount.err" &
  pid=$!
  until [ -e "$mnt/latest_universal" ]; do sleep 0.002; done
  t1=$(now)
  mount_s=$(elapsed "$t0" "$t1")
}

shards=("$ckpt/$tag"/*_optim_states.pt)
shard_bytes=$(du -cb "${shards[@]}" | tail -1 | cut -f1)

# --- ds_to_universal.py: the conversion ucfs replaces ------------------------
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
    rm -rf "$work/out/${tag}_universal/tmp"*  # keep the result only
  else
    echo "ds_to_universal.py failed on this checkpoint:"
    tail -3 "$work/ds.log"
  fi
fi

# The universal tree's files, in the order `cat` reads them.
mount_ucfs
mapfile -t rel < <(cd "$mnt/${tag}_universal" && find zero -name '*.pt' ! -name optimizer_state.pt | sort)
uni_files=("${rel[@]/#/$mnt/${tag}_universal/}")
uni_bytes=$(du -cb "${uni_files[@]}" | tail -1 | cut -f1)
# The first fp32.pt in name order, and one a sixth of the way down the list.
mapfile -t fp32s < <(printf '%s\n' "${rel[@]}" | grep '/fp32\.pt$')
first=${fp32s[0]}
typical=${fp32s[$(( ${#fp32s[@]} / 6 ))]}
unmount

load_s() {  # load_s REL: seconds for torch.load of a file of the mount
  /usr/bin/python3 -c "
import time, torch
t = time.time(); torch.load('$mnt/${tag}_universal/$1'); print(time.time() - t)"
}

declare -a cold_mount warm_mount first_s typical_s uni_cold uni_warm rss src_cold src_warm pt_cold mat_cold
for ((r = 0; r < rounds; r++)); do
  # ucfs: cold mount (no index, cold cache), first tensor, whole tree cold, re-read
  rm -rf "$work/index"
  drop_caches
  mount_ucfs
  cold_mount+=("$mount_s")
  first_s+=("$(echo "$mount_s + $(load_s "$first")" | bc -l)")
  unmount
  drop_caches
  mount_ucfs
  warm_mount+=("$mount_s")
  typical_s+=("$(echo "$mount_s + $(load_s "$typical")" | bc -l)")
  drop_caches
  uni_cold+=("$(read_all "${uni_files[@]}")")
  # Re-reads: the best of three after a first one (which may still find
  # pages the VM reclaimed meanwhile); the baseline below is treated alike.
  uni_warm+=("$(best_read "${uni_files[@]}")")
  rss+=("$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")")
  unmount
  # the shards themselves
  drop_caches
  src_cold+=("$(read_all "${shards[@]}")")
  src_warm+=("$(best_read "${shards[@]}")")
  if [ -n "$ptll" ]; then
    mount_ptll "$ckpt/$tag"
    drop_caches
    pt_shards=()
    for s in "${shards[@]}"; do pt_shards+=("$mnt/${s##*/}"); done
    pt_cold+=("$(read_all "${pt_shards[@]}")")
    unmount
    if [ -n "${ds_s:-}" ]; then
      mount_ptll "$work/out/${tag}_universal"
      drop_caches
      mat_cold+=("$(read_all "${rel[@]/#/$mnt/}")")
      unmount
    fi
  fi
done

m_first=$(median "${first_s[@]}")
m_typical=$(median "${typical_s[@]}")
m_uni_cold=$(mbps "$uni_bytes" "$(median "${uni_cold[@]}")")
m_uni_warm=$(mbps "$uni_bytes" "$(median "${uni_warm[@]}")")
m_src_cold=$(mbps "$shard_bytes" "$(median "${src_cold[@]}")")
m_src_warm=$(mbps "$shard_bytes" "$(median "${src_warm[@]}")")
cat <<EOF2
checkpoint: $ckpt (${#shards[@]} optimizer shards, $((shard_bytes / 1000000)) MB; universal tree $((uni_bytes / 1000000)) MB in ${#rel[@]} files)
median of $rounds rounds, each measurement next to its baseline

| what | ucfs | baseline | ratio |
|---|---|---|---|
| mount, empty index, cold cache | $(median "${cold_mount[@]}") s | | |
| mount, warm index, cold cache | $(median "${warm_mount[@]}") s | | |
| first tensor: mount + torch.load of $first | $m_first s | ds_to_universal.py ${ds_s:-n/a} s | $( [ -n "${ds_s:-}" ] && ratio "$ds_s" "$m_first" || echo n/a )x sooner |
| first tensor: mount + torch.load of $typical | $m_typical s | ds_to_universal.py ${ds_s:-n/a} s | $( [ -n "${ds_s:-}" ] && ratio "$ds_s" "$m_typical" || echo n/a )x sooner |
| read the whole tree, cold cache | $m_uni_cold MB/s | passthrough_ll over ds_to_universal's files, same order: $( [ ${#mat_cold[@]} -gt 0 ] && mbps "$uni_bytes" "$(median "${mat_cold[@]}")" || echo n/a ) MB/s | $( [ ${#mat_cold[@]} -gt 0 ] && ratio "$m_uni_cold" "$(mbps "$uni_bytes" "$(median "${mat_cold[@]}")")" || echo n/a )x |
| read the whole tree, cold cache | $m_uni_cold MB/s | passthrough_ll over the shards: $( [ ${#pt_cold[@]} -gt 0 ] && mbps "$shard_bytes" "$(median "${pt_cold[@]}")" || echo n/a ) MB/s | $( [ ${#pt_cold[@]} -gt 0 ] && ratio "$m_uni_cold" "$(mbps "$shard_bytes" "$(median "${pt_cold[@]}")")" || echo n/a )x |
| read the whole tree, cold cache | $m_uni_cold MB/s | the shards, no FUSE: $m_src_cold MB/s | $(ratio "$m_uni_cold" "$m_src_cold")x |
| re-read (page cache) | $m_uni_warm MB/s | the shards from the page cache: $m_src_warm MB/s | $(ratio "$m_uni_warm" "$m_src_warm")x |
| daemon peak RSS | $(( $(median "${rss[@]}") / 1024 )) MB | ds_to_universal.py ${ds_rss_mb:-n/a} MB | |
| extra disk | 0 | ds_to_universal.py $( [ -n "${ds_disk:-}" ] && echo "$((ds_disk / 1000000)) MB" || echo n/a ) (output + its tmp) | |
EOF2
echo
echo "samples (s): tree cold ${uni_cold[*]} | tree re-read ${uni_warm[*]} | shards cold ${src_cold[*]} | shards re-read ${src_warm[*]}"
