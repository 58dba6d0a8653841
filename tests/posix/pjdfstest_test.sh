#!/usr/bin/env bash
# pjdfstest (tests/posix/pjdfstest, vendored) in a writable ucfs mount, shared
# with other users (-o allow_other; every ucfs mount has default_permissions),
# as root: the tests switch to other uids themselves.
#
#   pjdfstest_test.sh UCFS_BIN PJDFSTEST_BIN FIXTURES_DIR [all | TEST...]
#
# Without a selection, the CI subset: every test file of every group except
# the long exhaustive ones listed in SLOW below (run them with `all`, which
# runs all 8799 tests). A TEST is a group (rename) or a file (rename/09.t).
# Ends with prove's summary; exits non-zero if any test failed or the daemon
# did not exit cleanly after the unmount.
set -euo pipefail

UCFS=$(realpath "$1")
PJDFSTEST=$(realpath "$2")
FIXTURES=$(realpath "$3")
shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
SOURCE="$FIXTURES/z3_tricky_fp32_ws4/checkpoint"

# The exhaustive type x type x permission matrices: 3500 of the 8799 tests
# and most of the run's time; every operation they cover is covered by the
# other files of their group.
SLOW=(rename/09.t rename/10.t rename/20.t rename/21.t)

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

files=()
if [ $# -eq 1 ] && [ "$1" = all ]; then
  files=("$work/suite/tests")
elif [ $# -gt 0 ]; then
  for t in "$@"; do files+=("$work/suite/tests/$t"); done
else
  for f in $(cd "$work/suite/tests" && ls -d */*.t | sort); do
    skip=0
    for s in "${SLOW[@]}"; do [ "$f" = "$s" ] && skip=1; done
    [ $skip -eq 0 ] && files+=("$work/suite/tests/$f")
  done
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
