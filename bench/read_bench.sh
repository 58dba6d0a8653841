#!/usr/bin/env bash
# Reads at the machine's limits: every figure next to the limit it is held
# to, measured in the same run, alternating, median of ROUNDS rounds (these
# machines are noisy). Every reader is bench/read_files (one reused 1 MiB
# buffer: cat's per-file buffer costs more than the reads on a cached tree).
#
#   bench/read_bench.sh UCFS_BIN CKPT [PASSTHROUGH_LL]
#
# 1. cold read of the whole universal tree (every per-parameter file, name
#    order) against the disk (the optimizer shards read by one 16 MiB
#    O_DIRECT reader each, all at once) and against the same tree exported
#    to plain files;
# 2. re-read of the tree (best of 3 after a first) against the shards read
#    from the page cache, the exported tree from the page cache, and, with
#    PASSTHROUGH_LL, the exported tree through libfuse's passthrough_ll
#    (a FUSE file system's own page cache);
# 3. N ranks resuming at once (N in NS, default "1 2 4 8 16"), cold: in the
#    universal view every rank reads every parameter's files, as DeepSpeed's
#    universal loader does; in the reshard view at N rank s reads its own
#    optimizer and model-states files. Against the same N readers over the
#    same files exported (`ucfs export`), on the same disk.
# The daemon's peak RSS is taken for each.
#
# Needs root (to drop the page cache) and /dev/fuse, and room in WORK
# (default /var/tmp) for the exports: about (1 + number of NS) times the
# checkpoint's optimizer state.
set -euo pipefail
ucfs=$(readlink -f "$1")
ckpt=$(readlink -f "$2")
ptll=${3:+$(readlink -f "$3")}
rounds=${ROUNDS:-5}
read -r -a sizes <<<"${NS:-1 2 4 8 16}"
source "$(dirname "$(readlink -f "$0")")/bench_lib.sh"
setup_reads "$ucfs" "$ckpt" readbench
trap cleanup EXIT

mount_ucfs() {  # mount_ucfs EXTRA...: the daemon in $pid
  "$ucfs" mount -f "$ckpt" "$mnt" --no-cache "$@" 2>"$work/mount.err" &
  pid=$!
  until mountpoint -q "$mnt"; do sleep 0.01; done
}
rss_kb() { awk '/VmHWM/ {print $2}' "/proc/$pid/status"; }
best3() {  # best3 LIST: a first read of the files LIST names, then the best of three, in MB/s
  "$rf" - < "$1" > /dev/null
  for _ in 1 2 3; do "$rf" - < "$1"; done | sort -k2 -g | head -1 | mb_s
}

shards=("$ckpt/$tag"/*_optim_states.pt)
shard_bytes=$(du -cb "${shards[@]}" | tail -1 | cut -f1)
printf '%s\n' "${shards[@]}" > "$work/shards"

# The exports: the universal tree, and the checkpoint at each N.
"$ucfs" export --no-cache --no-sync "$ckpt" "$work/exp_uni" > /dev/null 2>&1
for n in "${sizes[@]}"; do
  "$ucfs" export --no-cache --no-sync --world-size "$n" "$ckpt" "$work/exp_$n" > /dev/null 2>&1
done
mapfile -t rel < <(cd "$work/exp_uni/${tag}_universal" && find zero -name '*.pt' ! -name optimizer_state.pt | sort)
uni_bytes=$(cd "$work/exp_uni/${tag}_universal" && du -cb "${rel[@]}" | tail -1 | cut -f1)
printf "$mnt/${tag}_universal/%s\n" "${rel[@]}" > "$work/uni.mnt"
printf "$work/exp_uni/${tag}_universal/%s\n" "${rel[@]}" > "$work/uni.exp"
rank_files() {  # rank_files ROOT N S: rank S's files at N under ROOT (named as in exp_N)
  local f
  for f in "$work/exp_$2/$tag"/*zero_pp_rank_"$3"_mp_rank_00_optim_states.pt \
    "$work/exp_$2/$tag/zero_pp_rank_$3_mp_rank_00_model_states.pt"; do
    [ -e "$f" ] && echo "$1/$tag/${f##*/}"
  done
  if [ ! -e "$work/exp_$2/$tag/zero_pp_rank_$3_mp_rank_00_model_states.pt" ]; then
    echo "$1/$tag/mp_rank_00_model_states.pt"  # ZeRO-1/2: one model-states file
  fi
}
declare -A rs_bytes
for n in "${sizes[@]}"; do
  for ((s = 0; s < n; s++)); do
    rank_files "$mnt" "$n" "$s" > "$work/rank$n.$s.mnt"
    rank_files "$work/exp_$n" "$n" "$s" > "$work/rank$n.$s.exp"
  done
  rs_bytes[$n]=$(du -cb "$work/exp_$n/$tag"/*.pt | tail -1 | cut -f1)
done

# This machine's disk is a virtual one, cached by its host: the first read of
# a file comes from the host's disk, later "cold" ones (the guest's page
# cache dropped) from the host's memory. Read every source once first, so
# that ucfs and its limits all read from the same place.
"$rf" "${shards[@]}" "$ckpt/$tag"/*_model_states.pt > /dev/null
"$rf" - < "$work/uni.exp" > /dev/null
for n in "${sizes[@]}"; do "$rf" "$work/exp_$n/$tag"/*.pt > /dev/null; done

declare -a cold disk cold_exp warm warm_src warm_exp warm_pt rss_uni
declare -A uni_n uni_n_exp rs_n rw_n rs_n_exp rss_un rss_rs
for ((r = 0; r < rounds; r++)); do
  # 1 and 2: the tree
  mount_ucfs
  drop_caches
  cold+=("$("$rf" - < "$work/uni.mnt" | mb_s)")
  warm+=("$(best3 "$work/uni.mnt")")
  rss_uni+=("$(rss_kb)")
  unmount
  drop_caches
  disk+=("$("$rf" --direct --parallel --block $((16 << 20)) "${shards[@]}" | mb_s)")
  drop_caches
  cold_exp+=("$("$rf" - < "$work/uni.exp" | mb_s)")
  warm_exp+=("$(best3 "$work/uni.exp")")
  warm_src+=("$(best3 "$work/shards")")
  if [ -n "$ptll" ]; then
    mount_ptll "$work/exp_uni" cache=always  # keep pages across opens, as ucfs does
    warm_pt+=("$(best3 "$work/uni.mnt")")  # the same paths: exp_uni is mounted at $mnt
    unmount
  fi
  # 3: N ranks at once
  for n in "${sizes[@]}"; do
    lists_mnt=() lists_exp=() lists_rs=() lists_rs_exp=()
    for ((s = 0; s < n; s++)); do
      lists_mnt+=("$work/uni.mnt") lists_exp+=("$work/uni.exp")
      lists_rs+=("$work/rank$n.$s.mnt") lists_rs_exp+=("$work/rank$n.$s.exp")
    done
    mount_ucfs
    drop_caches
    uni_n[$n]+=" $(together "${lists_mnt[@]}")"
    rss_un[$n]+=" $(rss_kb)"
    unmount
    drop_caches
    uni_n_exp[$n]+=" $(together "${lists_exp[@]}")"
    mount_ucfs --world-size "$n"
    drop_caches
    rs_n[$n]+=" $(together "${lists_rs[@]}")"
    rss_rs[$n]+=" $(rss_kb)"
    unmount
    rm -rf "$work/upper"
    mount_ucfs --world-size "$n" --upper "$work/upper"  # as a resuming trainer mounts it
    drop_caches
    rw_n[$n]+=" $(together "${lists_rs[@]}")"
    unmount
    drop_caches
    rs_n_exp[$n]+=" $(together "${lists_rs_exp[@]}")"
  done
done

m() { median "$@"; }
echo "checkpoint: $ckpt (${#shards[@]} optimizer shards, $((shard_bytes / 1000000)) MB; universal tree $((uni_bytes / 1000000)) MB in ${#rel[@]} files)"
echo "median of $rounds rounds, each next to its limit; MB/s unless said"
echo
echo "| figure | ucfs | the limit | ratio |"
echo "|---|---|---|---|"
echo "| cold read of the universal tree | $(m "${cold[@]}") | the shards, one 16 MiB O_DIRECT reader each, at once: $(m "${disk[@]}") | $(ratio "$(m "${cold[@]}")" "$(m "${disk[@]}")")x |"
echo "| cold read of the universal tree | $(m "${cold[@]}") | the tree exported, plain files: $(m "${cold_exp[@]}") | $(ratio "$(m "${cold[@]}")" "$(m "${cold_exp[@]}")")x |"
echo "| re-read of the tree (best of 3) | $(m "${warm[@]}") | the shards from the page cache: $(m "${warm_src[@]}") | $(ratio "$(m "${warm[@]}")" "$(m "${warm_src[@]}")")x |"
echo "| re-read of the tree (best of 3) | $(m "${warm[@]}") | the tree exported, from the page cache: $(m "${warm_exp[@]}") | $(ratio "$(m "${warm[@]}")" "$(m "${warm_exp[@]}")")x |"
if [ -n "$ptll" ]; then
  echo "| re-read of the tree (best of 3) | $(m "${warm[@]}") | the exported tree through passthrough_ll (FUSE's page cache): $(m "${warm_pt[@]}") | $(ratio "$(m "${warm[@]}")" "$(m "${warm_pt[@]}")")x |"
fi
for n in "${sizes[@]}"; do
  # shellcheck disable=SC2086
  u=$(m ${uni_n[$n]}) ue=$(m ${uni_n_exp[$n]}) rs=$(m ${rs_n[$n]}) rw=$(m ${rw_n[$n]}) re=$(m ${rs_n_exp[$n]})
  echo "| $n ranks at once, universal view (each reads the tree), cold | $(mbps $((n * uni_bytes)) "$u") ($u s) | the same readers on the exported tree: $(mbps $((n * uni_bytes)) "$ue") ($ue s) | $(ratio "$ue" "$u")x |"
  echo "| $n ranks at once, reshard view at N=$n (each reads its rank files), cold | $(mbps "${rs_bytes[$n]}" "$rs") ($rs s) | the same readers on the export at N=$n: $(mbps "${rs_bytes[$n]}" "$re") ($re s) | $(ratio "$re" "$rs")x |"
  echo "| $n ranks at once, the same, writable mount (--upper) | $(mbps "${rs_bytes[$n]}" "$rw") ($rw s) | the same readers on the export at N=$n: $(mbps "${rs_bytes[$n]}" "$re") ($re s) | $(ratio "$re" "$rw")x |"
done
echo
echo "daemon peak RSS (MB, median): tree $(( $(m "${rss_uni[@]}") / 1024 ))$(for n in "${sizes[@]}"; do
  # shellcheck disable=SC2086
  printf '; universal N=%s %s, reshard N=%s %s' "$n" $(( $(m ${rss_un[$n]}) / 1024 )) "$n" $(( $(m ${rss_rs[$n]}) / 1024 ))
done)"
echo "samples: cold ${cold[*]} | disk ${disk[*]} | cold exported ${cold_exp[*]} | re-read ${warm[*]} | shards cached ${warm_src[*]}"
for n in "${sizes[@]}"; do
  echo "samples at N=$n, seconds: universal${uni_n[$n]} | exported${uni_n_exp[$n]} | reshard${rs_n[$n]} | writable${rw_n[$n]} | export at N${rs_n_exp[$n]}"
done
