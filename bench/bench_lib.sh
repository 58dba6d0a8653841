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
