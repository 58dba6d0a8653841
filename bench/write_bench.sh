#!/usr/bin/env bash
# Saves through a writable mount against the same saves straight into the
# upper directory's file system (issue 23, point 3), alternated round by
# round, median of ROUNDS (5):
#   - a 1 GiB file written with dd (bs=4M) and fsync'd;
#   - a real torch.save of a rank-file-sized state dict (SAVE_MB, 256 MB of
#     fp32 in a few tensors, as DeepSpeed's optimizer files hold them),
#     flushed and fsync'd.
# Each for the upper directory on tmpfs (so the figure is the write path,
# not this machine's disk) and on disk (WORK, default /var/tmp).
#
#   bench/write_bench.sh UCFS_BIN [CKPT]
#
# CKPT (any checkpoint ucfs serves; default the bundled sample) is only the
# mount's source: nothing is read from it. A_FLAGS adds `ucfs mount`
# options, to try one against the default (--no-direct-writes). On disk
# each write waits SETTLE (3) seconds first: this machine's virtual disk
# is cached by its host, which otherwise is still writing the previous
# side's GiB when the next starts. Needs /dev/fuse and root (for
# the tmpfs mount).
set -euo pipefail
ucfs=$(readlink -f "$1")
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
ckpt=${2:-$here/../tests/data/fixtures/z3_tricky_fp32_ws4/checkpoint}
rounds=${ROUNDS:-5}
save_mb=${SAVE_MB:-256}
work=$(mktemp -d "${WORK:-/var/tmp}/ucfs_write.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt" "$work/tmpfs"
source "$here/bench_lib.sh"
cleanup_write() {
  cleanup_mount_only || true
  umount "$work/tmpfs" 2>/dev/null || true
  rm -rf "$work"
}
cleanup_mount_only() { if mountpoint -q "$mnt"; then fusermount3 -u "$mnt"; fi; }
trap cleanup_write EXIT
mount -t tmpfs -o size=6g tmpfs "$work/tmpfs"

# The saver: torch.save of a dict like an optimizer rank file, then fsync.
cat > "$work/save.py" <<'EOF'
import os, sys, time, torch
path, mb = sys.argv[1], int(sys.argv[2])
n = mb * (1 << 20) // 4
state = {'optimizer_state_dict': {'fp32_flat_groups': [torch.ones(n // 2), torch.ones(n - n // 2)],
                                  'state': {0: {'exp_avg': torch.zeros(4), 'step': 7}}},
         'ds_version': '0.14.5'}
t0 = time.monotonic()
with open(path, 'wb') as f:
    torch.save(state, f)
    f.flush()
    os.fsync(f.fileno())
print(time.monotonic() - t0)
EOF

dd_s() {  # dd_s FILE: seconds to write 1 GiB into FILE and fsync it
  local t0
  t0=$(now)
  dd if=/dev/zero of="$1" bs=4M count=256 conv=fsync status=none
  elapsed "$t0" "$(now)"
}
save_s() { /usr/bin/python3 "$work/save.py" "$1" "$save_mb"; }

mount_upper() {  # mount_upper UPPER: the writable reshard view over UPPER
  # shellcheck disable=SC2086
  "$ucfs" mount -f --no-cache --world-size 2 --upper "$1" ${A_FLAGS:-} "$ckpt" "$mnt" 2>>"$work/mount.err" &
  pid=$!
  until mountpoint -q "$mnt"; do sleep 0.01; done
}

declare -A t
settle() {  # the host's cache of the virtual disk drains what the last fsync sent it
  [ "$1" = tmpfs ] || sleep "${SETTLE:-3}"
}
through_ucfs() {  # through_ucfs LABEL BASE
  mount_upper "$2/upper"
  settle "$1"
  t[$1.dd.ucfs]+=" $(dd_s "$mnt/big")"
  settle "$1"
  t[$1.save.ucfs]+=" $(save_s "$mnt/rank.pt")"
  unmount
}
straight() {  # straight LABEL BASE
  settle "$1"
  t[$1.dd.direct]+=" $(dd_s "$2/direct/big")"
  settle "$1"
  t[$1.save.direct]+=" $(save_s "$2/direct/rank.pt")"
}
for r in $(seq "$rounds"); do
  for where in tmpfs disk; do
    if [ "$where" = tmpfs ]; then base=$work/tmpfs; else base=$work/disk; fi
    rm -rf "$base/upper" "$base/direct" && mkdir -p "$base/upper" "$base/direct"
    # Which side goes first alternates: a disk still writing back the
    # other side's fsync'd GiB must not always slow the same one.
    if ((r % 2)); then
      straight "$where" "$base"
      through_ucfs "$where" "$base"
    else
      through_ucfs "$where" "$base"
      straight "$where" "$base"
    fi
    rm -rf "$base/upper" "$base/direct"
  done
done
for k in $(printf '%s\n' "${!t[@]}" | sort); do echo "samples $k:${t[$k]}" >&2; done

echo "writes through --upper against the same written straight into its file system; median of $rounds rounds"
echo
echo "| write, fsync'd | upper on | through ucfs | straight | ratio |"
echo "|---|---|---|---|---|"
for where in tmpfs disk; do
  for what in dd save; do
    # shellcheck disable=SC2086
    u=$(median ${t[$where.$what.ucfs]})
    # shellcheck disable=SC2086
    d=$(median ${t[$where.$what.direct]})
    if [ "$what" = dd ]; then label="1 GiB, dd bs=4M"; bytes=$((1 << 30)); else
      label="torch.save of a ${save_mb} MiB state dict"; bytes=$((save_mb << 20)); fi
    printf '| %s | %s | %s MB/s (%.3f s) | %s MB/s (%.3f s) | %sx |\n' "$label" "$where" \
      "$(mbps "$bytes" "$u")" "$u" "$(mbps "$bytes" "$d")" "$d" "$(ratio "$d" "$u")"
  done
done
