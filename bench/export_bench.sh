#!/usr/bin/env bash
# `ucfs export` against DeepSpeed's ds_to_universal.py, the conversion it
# replaces, on the same checkpoint in the same run: wall time, peak RSS and
# peak disk, cold page cache, alternating, median of ROUNDS rounds.
#
#   bench/export_bench.sh UCFS_BIN CKPT
#
# CKPT: a checkpoint root (bench/make_checkpoint.py --one-group makes one
# ds_to_universal.py can convert). Needs DeepSpeed set up as
# tests/deepspeed/README.md says ($ORACLE_WORK/deepspeed-src) and root (to
# drop the page cache).
set -euo pipefail
ucfs=$(readlink -f "$1")
ckpt=$(readlink -f "$2")
rounds=${ROUNDS:-3}
oracle=${ORACLE_WORK:-$HOME/ucfs-oracle}
work=$(mktemp -d /tmp/ucfs_xbench.XXXXXX)
mnt=$work/mnt
tag=$(cat "$ckpt/latest")
source "$(dirname "$(readlink -f "$0")")/bench_lib.sh"
trap cleanup EXIT

declare -a ds_s ds_rss ds_disk ux_s ux_rss ux_disk
for ((r = 0; r < rounds; r++)); do
  rm -rf "$work/ds" "$work/ux"
  drop_caches
  t0=$(now)
  PYTHONPATH="$oracle/deepspeed-src:$oracle/pydeps" DS_ACCELERATOR=cpu \
    /usr/bin/time -f '%M' -o "$work/ds.rss" \
    /usr/bin/python3 "$oracle/deepspeed-src/deepspeed/checkpoint/ds_to_universal.py" \
    --input_folder "$ckpt/$tag" --output_folder "$work/ds/${tag}_universal" --keep_temp_folder \
    > "$work/ds.log" 2>&1
  ds_s+=("$(elapsed "$t0" "$(now)")")
  ds_rss+=("$(tail -1 "$work/ds.rss")")
  # Its peak: the temporary slices and the output exist together at the end.
  ds_disk+=("$(du -sb "$work/ds" | cut -f1)")
  rm -rf "$work/ds"

  drop_caches
  t0=$(now)
  /usr/bin/time -f '%M' -o "$work/ux.rss" "$ucfs" export --no-cache "$ckpt" "$work/ux" 2>"$work/ux.log"
  ux_s+=("$(elapsed "$t0" "$(now)")")
  ux_rss+=("$(tail -1 "$work/ux.rss")")
  ux_disk+=("$(du -sb "$work/ux" | cut -f1)")
done

m_ds=$(median "${ds_s[@]}")
m_ux=$(median "${ux_s[@]}")
echo "checkpoint: $ckpt ($(du -sh "$ckpt/$tag" | cut -f1)); median of $rounds rounds, cold page cache"
echo
echo "| | ucfs export | ds_to_universal.py | ratio |"
echo "|---|---|---|---|"
echo "| wall time | $m_ux s | $m_ds s | $(ratio "$m_ds" "$m_ux")x faster |"
echo "| peak RSS | $(( $(median "${ux_rss[@]}") / 1024 )) MB | $(( $(median "${ds_rss[@]}") / 1024 )) MB | $(ratio "$(median "${ds_rss[@]}")" "$(median "${ux_rss[@]}")")x less |"
echo "| peak disk | $(( $(median "${ux_disk[@]}") / 1000000 )) MB | $(( $(median "${ds_disk[@]}") / 1000000 )) MB | $(ratio "$(median "${ds_disk[@]}")" "$(median "${ux_disk[@]}")")x less |"
echo
echo "samples (s): ucfs ${ux_s[*]} | ds_to_universal ${ds_s[*]}"
