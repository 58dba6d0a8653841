# shellcheck shell=bash
# Helpers shared by the benchmark scripts (sourced).
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l; }
ratio() { echo "scale=2; $1 / $2" | bc -l | awk '{printf "%.2f", $1}'; }  # 0.81, not bc's .81
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mbps() { echo "scale=0; $1 / $2 / 1000000" | bc -l; }

read_all() {  # read_all FILE...; prints seconds to cat them
  local t0 t1
  t0=$(now)
  cat "$@" > /dev/null
  t1=$(now)
  elapsed "$t0" "$t1"
}

best_read() {  # best_read FILE...: one read, then the fastest of three more
  read_all "$@" > /dev/null
  local a b c
  a=$(read_all "$@")
  b=$(read_all "$@")
  c=$(read_all "$@")
  printf '%s\n' "$a" "$b" "$c" | sort -g | head -1
}


# The FUSE mounts: $mnt, with the daemon's pid in $pid; scratch space in $work.
pid=""
cleanup() {  # for `trap cleanup EXIT`
  if mountpoint -q "$mnt"; then fusermount3 -u "$mnt" || true; fi
  if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
mount_ptll() {  # mount_ptll SOURCE_DIR [OPTIONS]: libfuse's passthrough_ll ($ptll)
  "$ptll" -f -o source="$1"${2:+,$2} "$mnt" 2>/dev/null &
  pid=$!
  until mountpoint -q "$mnt"; do sleep 0.01; done
}
unmount() { fusermount3 -u "$mnt"; wait "$pid"; pid=""; }

# The read benchmarks (read_bench.sh, ab_bench.sh): their reader, read_files beside UCFS_BIN unless
# READ_FILES says otherwise, in $rf; a fresh scratch dir in WORK (default /var/tmp) in $work, the
# mount point $mnt in it; the checkpoint's tag in $tag.
# shellcheck disable=SC2034  # set for the caller
setup_reads() {  # setup_reads UCFS_BIN CKPT NAME
  rf=${READ_FILES:-$(dirname "$1")/bench/read_files}
  [ -x "$rf" ] || { echo "no read_files at $rf (build the bench targets, or set READ_FILES)" >&2; exit 2; }
  work=$(mktemp -d "${WORK:-/var/tmp}/ucfs_$3.XXXXXX")
  mnt=$work/mnt
  mkdir -p "$mnt"
  tag=$(cat "$2/latest")
}
mb_s() { awk '{printf "%d", $1 / $2 / 1e6}'; }  # "BYTES SECONDS" -> MB/s
together() {  # together LIST...: one $rf reader per file list (a file of paths), all at once; prints seconds
  local t0 t1 list
  t0=$(now)
  for list in "$@"; do "$rf" - < "$list" > /dev/null & done
  wait
  t1=$(now)
  elapsed "$t0" "$t1" | awk '{printf "%.2f", $1}'
}
