#!/usr/bin/env bash
# One change to the daemon, A against B, alternating in the same run (these
# machines are noisy), median of ROUNDS rounds, with every sample:
#   - the cold read of the whole universal tree (page cache dropped);
#   - the same read with the shards in the page cache, through a fresh
#     mount (whose own page cache starts empty): the daemon's path for
#     pieces that need no disk;
#   - N rank readers at once in the reshard view, read-only and writable,
#     page cache dropped.
#
#   A_ENV="VAR=1" A_FLAGS="--no-prefetch" B_ENV=... B_FLAGS=... \
#     bench/ab_bench.sh UCFS_BIN CKPT
#
# *_ENV are VAR=VALUE words set in the daemon's environment, *_FLAGS extra
# `ucfs mount` options. NS (default "16") are the reader counts; NS="" reads
# only the tree. Needs root (to drop the page cache) and /dev/fuse.
set -euo pipefail
ucfs=$(readlink -f "$1")
ckpt=$(readlink -f "$2")
rounds=${ROUNDS:-5}
read -r -a sizes <<<"${NS-16}"
source "$(dirname "$(readlink -f "$0")")/bench_lib.sh"
setup_reads "$ucfs" "$ckpt" abbench
trap cleanup EXIT

mount_side() {  # mount_side A|B EXTRA...: the daemon in $pid
  local side=$1 env_var=${1}_ENV flags_var=${1}_FLAGS
  shift
  # shellcheck disable=SC2086  # word lists
  env ${!env_var:-} "$ucfs" mount -f "$ckpt" "$mnt" --no-cache ${!flags_var:-} "$@" 2>"$work/mount.$side.err" &
  pid=$!
  until mountpoint -q "$mnt"; do sleep 0.01; done
}

mount_side A
(cd "$mnt/${tag}_universal" && find zero -name '*.pt' ! -name optimizer_state.pt | sort) |
  sed "s|^|$mnt/${tag}_universal/|" > "$work/uni"
unmount
for n in "${sizes[@]}"; do  # a ZeRO-3 rank's files, as DeepSpeed reads them at N
  for ((s = 0; s < n; s++)); do
    printf "$mnt/$tag/zero_pp_rank_${s}_mp_rank_00_%s_states.pt\n" optim model > "$work/rank$n.$s"
  done
done
# Every source once from the host's disk first (see README.md: the first read of a file is slower).
"$rf" "$ckpt/$tag"/*.pt > /dev/null

declare -A tree warm rs rw
for ((r = 0; r < rounds; r++)); do
  for side in A B; do
    mount_side $side
    drop_caches
    tree[$side]+=" $("$rf" - < "$work/uni" | mb_s)"
    unmount
    "$rf" "$ckpt/$tag"/*.pt > /dev/null
    mount_side $side
    warm[$side]+=" $("$rf" - < "$work/uni" | mb_s)"
    unmount
    for n in "${sizes[@]}"; do
      lists=()
      for ((s = 0; s < n; s++)); do lists+=("$work/rank$n.$s"); done
      mount_side $side --world-size "$n"
      drop_caches
      rs[$side.$n]+=" $(together "${lists[@]}")"
      unmount
      rm -rf "$work/upper"
      mount_side $side --world-size "$n" --upper "$work/upper"
      drop_caches
      rw[$side.$n]+=" $(together "${lists[@]}")"
      unmount
    done
  done
done

m() { median "$@"; }
echo "A: ${A_ENV:-} ${A_FLAGS:-}   B: ${B_ENV:-} ${B_FLAGS:-}   ($rounds rounds, alternating; medians)"
# shellcheck disable=SC2086
echo "cold tree, MB/s: A $(m ${tree[A]})  B $(m ${tree[B]})  B/A $(ratio "$(m ${tree[B]})" "$(m ${tree[A]})")x  | A${tree[A]} | B${tree[B]}"
# shellcheck disable=SC2086
echo "tree, shards cached, MB/s: A $(m ${warm[A]})  B $(m ${warm[B]})  B/A $(ratio "$(m ${warm[B]})" "$(m ${warm[A]})")x  | A${warm[A]} | B${warm[B]}"
for n in "${sizes[@]}"; do
  # shellcheck disable=SC2086
  echo "N=$n reshard read-only, s: A $(m ${rs[A.$n]})  B $(m ${rs[B.$n]})  A/B $(ratio "$(m ${rs[A.$n]})" "$(m ${rs[B.$n]})")x  | A${rs[A.$n]} | B${rs[B.$n]}"
  # shellcheck disable=SC2086
  echo "N=$n reshard writable, s:  A $(m ${rw[A.$n]})  B $(m ${rw[B.$n]})  A/B $(ratio "$(m ${rw[A.$n]})" "$(m ${rw[B.$n]})")x  | A${rw[A.$n]} | B${rw[B.$n]}"
done
