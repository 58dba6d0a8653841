#!/usr/bin/env bash
# pjdfstest (tests/posix/pjdfstest, vendored) in a writable ucfs mount, shared
# with other users (-o allow_other; every ucfs mount has default_permissions),
# as root: the tests switch to other uids themselves.
#
#   pjdfstest_test.sh UCFS_BIN PJDFSTEST_BIN FIXTURES_DIR [TEST...]
#
# Runs every test (8798 in 238 files; two minutes with two jobs), or the
# TESTs named: a group (rename) or a file (rename/09.t). Ends with prove's
# summary; exits non-zero if any test failed or the daemon did not exit
# cleanly after the unmount.
set -euo pipefail

UCFS=$(realpath "$1")
PJDFSTEST=$(realpath "$2")
FIXTURES=$(realpath "$3")
shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
SOURCE="$FIXTURES/z3_tricky_fp32_ws4/checkpoint"

work=$(mktemp -d /tmp/ucfs_pjdfstest.XXXXXX)
mnt="$work/mnt"
mkdir -p "$mnt" "$work/suite"
# pjdfstest finds its binary by walking up from the test files.
cp "$PJDFSTEST" "$work/suite/pjdfstest"
cp -r "$HERE/pjdfstest/tests" "$work/suite/tests"

daemon=""
cleanup() {
  cd /
  if mountpoint -q "$mnt"; then "$UCFS" umount "$mnt" || fusermount3 -uz "$mnt" || true; fi
  if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$UCFS" mount -f --no-cache --world-size 4 --upper "$work/upper" -o allow_other \
  --log-file "$work/ucfs.log" "$SOURCE" "$mnt" &
daemon=$!
for _ in $(seq 200); do
  [ -e "$mnt/latest" ] && break
  kill -0 "$daemon" 2>/dev/null || { echo "ucfs mount exited"; exit 1; }
  sleep 0.05
done
[ -e "$mnt/latest" ] || { echo "the mount did not appear"; exit 1; }

files=("$work/suite/tests")
if [ $# -gt 0 ]; then
  files=()
  for t in "$@"; do files+=("$work/suite/tests/$t"); done
fi

mkdir "$mnt/pjd"
chmod 0755 "$mnt/pjd"
status=0
(cd "$mnt/pjd" && prove -r -j2 "${files[@]}") || status=1

cd /
"$UCFS" umount "$mnt"
wait "$daemon" || { echo "ucfs mount exited with $? after the unmount"; status=1; }
daemon=""
exit $status
