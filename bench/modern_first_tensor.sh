#!/usr/bin/env bash
# Time to the first tensor on DeepSpeed 0.19.8's checkpoints (tests/data/modern): a cold `ucfs mount` and
# torch.load of the first param's fp32.pt in the universal view, against DeepSpeed 0.19.8's own
# ds_to_universal.py on the same tag (with --inject_missing_state where the fixture's converter needed it), both
# run in the modern root (torch 2.14: both pay its import), alternating, median of ROUNDS rounds. Where the
# converter fails (Muon, native MoE), its column is the time it took to fail, marked "!", and there is no ratio.
#
#   bench/modern_first_tensor.sh UCFS_BIN [FIXTURE...]   (default: every fixture with a plain save dir)
#
# Needs root (FUSE, the page cache dropped between runs) and the modern root (tests/ecosystem/setup.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
ucfs=$(readlink -f "$1")
shift
rounds=${ROUNDS:-3}
modern=$repo/tests/data/modern
run=$repo/tests/ecosystem/run.sh
work=$(mktemp -d /tmp/ucfs_modern_bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }

fixtures=("$@")
if [ ${#fixtures[@]} -eq 0 ]; then
  for d in "$modern"/*/; do
    f=$(basename "$d")
    [ -f "$d/checkpoint/latest" ] && fixtures+=("$f")
  done
fi

# floor: the same python starting in the root and importing torch, loading nothing (what both pay);
# bytes: the mount and `cat` of that fp32.pt on the host (no python).
printf '%-28s %10s %10s %8s %8s %8s\n' fixture converter ucfs ratio floor bytes
for f in "${fixtures[@]}"; do
  src=$modern/$f/checkpoint
  tag=$(cat "$src/latest")
  inject=$(/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['roots'][0]['converter'][0]; \
print('--inject_missing_state' if r['attempts'][-1]['inject_missing_state'] else '')" "$modern/$f/MODERN.json")
  # the first param folder, as ls sorts them (the converter's and the view's hold the same names)
  "$ucfs" mount --no-cache "$src" "$mnt"
  first=$(ls "$mnt/${tag}_universal/zero" | grep -v optimizer_state.pt | head -1)
  fusermount3 -u "$mnt"
  conv=() ours=() floor=() bytes=() failed=""
  for _ in $(seq "$rounds"); do
    drop_caches
    t0=$(now)
    "$run" python3 -m deepspeed.checkpoint.ds_to_universal --input_folder "$src/$tag" \
      --output_folder "$work/out/${tag}_universal" $inject >"$work/ds.log" 2>&1 || failed="$(tail -1 "$work/ds.log")"
    conv+=("$(echo "$(now) - $t0" | bc)")
    rm -rf "$work/out"
    drop_caches
    t0=$(now)
    "$ucfs" mount --no-cache "$src" "$mnt"
    UCFS_ECOSYSTEM_MOUNTS=$mnt "$run" python3 -c \
      "import sys, torch; torch.load(sys.argv[1], weights_only=False)" \
      "$mnt/${tag}_universal/zero/$first/fp32.pt"
    ours+=("$(echo "$(now) - $t0" | bc)")
    fusermount3 -u "$mnt"
    t0=$(now)
    "$run" python3 -c "import torch"
    floor+=("$(echo "$(now) - $t0" | bc)")
    drop_caches
    t0=$(now)
    "$ucfs" mount --no-cache "$src" "$mnt"
    cat "$mnt/${tag}_universal/zero/$first/fp32.pt" >/dev/null
    bytes+=("$(echo "$(now) - $t0" | bc)")
    fusermount3 -u "$mnt"
  done
  c=$(printf '%s\n' "${conv[@]}" | median)
  o=$(printf '%s\n' "${ours[@]}" | median)
  fl=$(printf '%s\n' "${floor[@]}" | median)
  b=$(printf '%s\n' "${bytes[@]}" | median)
  if [ -n "$failed" ]; then
    printf '%-28s %8.2fs! %9.2fs %8s %7.2fs %7.3fs  (converter: %s)\n' "$f" "$c" "$o" - "$fl" "$b" "${failed:0:80}"
  else
    printf '%-28s %9.2fs %9.2fs %7.1fx %7.2fs %7.3fs\n' "$f" "$c" "$o" "$(echo "$c / $o" | bc -l)" "$fl" "$b"
  fi
done
