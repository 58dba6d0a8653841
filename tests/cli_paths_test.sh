#!/usr/bin/env bash
# The source is never written and a mount never waits on itself: `ucfs
# export` and `ucfs mount` refuse outputs, upper directories and
# mountpoints that are, hold or lie inside the checkpoint — however the
# checkpoint is named (root, tag directory, through a symlink) — and
# mountpoints that are not empty directories. Each refusal exits 2 before
# anything is written or mounted; the checkpoint's bytes never change.
set -u
ucfs=$1
fixtures=$2
source "$(dirname "$0")/tools/checks.sh"
refused() {  # refused COMMAND...: exits 2 within 20 s
  timeout 20 "$@" >/dev/null 2>"$tmp/err"
  [ $? -eq 2 ] || { cat "$tmp/err"; return 1; }
}
tmp=$(mktemp -d)
trap 'mountpoint -q "$tmp/mnt" && "$ucfs" umount "$tmp/mnt"; rm -rf "$tmp"' EXIT
cp -r "$fixtures/z3_fp32_ws2/checkpoint" "$tmp/run7"
ln -s "$tmp/run7" "$tmp/alias"
sum() { (cd "$tmp/run7" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum; }
before=$(sum)

check "export into the checkpoint is refused" \
  refused "$ucfs" export --no-cache "$tmp/run7" "$tmp/run7/out"
check "export of a tag dir into its root is refused" \
  refused "$ucfs" export --no-cache --world-size 3 "$tmp/run7/global_step4" "$tmp/run7"
check "export through a symlink into the checkpoint is refused" \
  refused "$ucfs" export --no-cache "$tmp/run7" "$tmp/alias/out"
check "export --fp32 with --world-size is refused" \
  refused "$ucfs" export --no-cache --fp32 --world-size 3 "$tmp/run7" "$tmp/out"
mkdir -p "$tmp/mnt" "$tmp/full"
touch "$tmp/full/x"
check "a mount on the checkpoint itself is refused, not hung" \
  refused "$ucfs" mount -f --no-cache "$tmp/run7" "$tmp/run7"
check "a mount on a directory holding the checkpoint is refused" \
  refused "$ucfs" mount -f --no-cache "$tmp/run7/global_step4" "$tmp/run7"
check "a mount on a non-empty directory is refused" \
  refused "$ucfs" mount -f --no-cache "$tmp/run7" "$tmp/full"
check "a mount on a file is refused" \
  refused "$ucfs" mount -f --no-cache "$tmp/run7" "$tmp/run7/latest"
check "--upper inside the checkpoint (named by its tag dir) is refused" \
  refused "$ucfs" mount -f --no-cache --world-size 3 --upper "$tmp/run7/up" "$tmp/run7/global_step4" "$tmp/mnt"
check "the checkpoint is unchanged" test "$(sum)" = "$before"
check "nothing was created in it" test ! -e "$tmp/run7/out" -a ! -e "$tmp/run7/up"

"$ucfs" export --no-cache "$tmp/run7/global_step4" "$tmp/out" >/dev/null 2>"$tmp/err"
check "export of a tag dir elsewhere works" test $? -eq 0
check "it wrote the universal layout" test -s "$tmp/out/global_step4_universal/zero/fc1.weight/fp32.pt"
"$ucfs" export --no-cache "$tmp/run7/global_step4" "$tmp/out" >/dev/null 2>"$tmp/err"
check "a second run finds every file there" grep -q "0 files .*were already there" "$tmp/err"
exit $fail
