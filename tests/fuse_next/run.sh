#!/usr/bin/env bash
# Builds ucfs against libfuse 3.18 in the Debian sid root of setup.sh and tests it there: the unit tests, every FUSE
# test that needs no torch, and the FUSE passthrough test, which must find passthrough used. See README.md here.
#
#   sudo tests/fuse_next/run.sh [UCFS_REPO]     # default: this repository
#
# The repository is bound read-only at /ucfs/src inside the root and the build lives in $UCFS_FUSE_NEXT_DIR/build
# (bound at /ucfs/build): fixed paths, so a second run rebuilds only what changed, whichever checkout it is given.
# Everything is mounted in a private mount namespace that goes with the command. The reference tensors the unit tests
# compare with are dumped by the host's torch (Debian 12's python3-torch, as packaging/install-deps.sh installs it):
# the root holds no torch, and the tests that need one run on the host build only (EXCLUDED below).
#
# Environment:
#   UCFS_FUSE_NEXT_DIR     as for setup.sh (default /var/cache/ucfs-fuse-next)
#   UCFS_FUSE_NEXT_JOBS    build jobs (default 2)
#   UCFS_FUSE_NEXT_CTEST   extra ctest arguments (e.g. "-R fuse_passthrough")
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "${1:-$HERE/../..}" && pwd)
BASE=${UCFS_FUSE_NEXT_DIR:-/var/cache/ucfs-fuse-next}
ROOT=$BASE/sid
BUILD=$BASE/build
JOBS=${UCFS_FUSE_NEXT_JOBS:-2}

# Tests that need torch (the root has none; they run on the host build), clang-format or the .deb tools, and
# fuse_mount_helper, whose private namespace (unshare --propagation) needs / to be a mount point, which a chroot's is
# not.
EXCLUDED=(
  reference_tensors bench_generator_matches_deepspeed generated_checkpoints torch_variants_writer format_variants
  hostile_corpus fuse_universal_mount fuse_reshard_mount fuse_flat_group_mount fuse_writable_mount fuse_run_mount
  fuse_framework_replay fuse_consolidated_mount fuse_hf_weights fuse_mmap format packaging_deb man_pages
  fuse_mount_helper
)

PHASE_TAG=fuse_next
# shellcheck source-path=SCRIPTDIR source=../lib/phases.sh
. "$(dirname "$0")/../lib/phases.sh"

[ "$(id -u)" = 0 ] || die "must run as root"
[ -f "$REPO/CMakeLists.txt" ] || die "$REPO is not a ucfs checkout"
case "$BASE/" in "$REPO"/*) die "UCFS_FUSE_NEXT_DIR must be outside the source tree ($REPO)" ;; esac

phase "setup (the sid root)"
"$HERE/setup.sh" | sed 's/^/  /'

phase "reference tensors (host torch)"
REF=$BUILD/tests/reference
mkdir -p "$BUILD/tests"
if [ ! -f "$REF/manifest.json" ] ||
   [ -n "$(find "$REPO/tests/data/fixtures" "$REPO/tests/tools/dump_reference.py" -newer "$REF/manifest.json" -print -quit)" ]; then
  /usr/bin/python3 -c 'import torch' 2>/dev/null || die "the host's /usr/bin/python3 has no torch (packaging/install-deps.sh)"
  rm -rf "$REF"
  /usr/bin/python3 "$REPO/tests/tools/dump_reference.py" "$REPO/tests/data/fixtures" "$REF" >/dev/null
fi

phase "build and test in the root"
EXCLUDE_RE="^($(IFS='|'; echo "${EXCLUDED[*]}"))\$"
INNER='
  cd /ucfs/build
  echo "libfuse $(pkg-config --modversion fuse3), $(g++ --version | head -n1), kernel $(uname -r)"
  # Release at -O2 with asserts (the flags replace NDEBUG): the daemon as it is benchmarked, the checks as tested.
  # Warnings are not errors here: g++ 16 finds new ones in the tests (gtest macros under if/else, dangling-reference
  # guesses); the clang build on the host holds every file to -Werror.
  cmake -S /ucfs/src -B /ucfs/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O2 \
    -DCMAKE_C_FLAGS_RELEASE=-O2 -DUCFS_WERROR=OFF -DUCFS_BUILD_TESTS=ON -DUCFS_LIBTORCH_TESTS=OFF -DUCFS_FUZZ=OFF \
    >cmake.log || { cat cmake.log; exit 1; }
  start=$(date +%s)
  cmake --build /ucfs/build -j "$JOBS" >build.log 2>&1 || { tail -n 60 build.log; exit 1; }
  echo "build: $(( $(date +%s) - start ))s"
  start=$(date +%s)
  UCFS_EXPECT_PASSTHROUGH=1 ctest --test-dir /ucfs/build -j 2 --output-on-failure --timeout 600 \
    -E "$EXCLUDE_RE" --fixture-exclude-setup reference $EXTRA_CTEST
  echo "ctest: $(( $(date +%s) - start ))s"
'
unshare --mount --propagation private -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin ROOT="$ROOT" REPO="$REPO" \
  BUILD="$BUILD" INNER="$INNER" JOBS="$JOBS" EXCLUDE_RE="$EXCLUDE_RE" EXTRA_CTEST="${UCFS_FUSE_NEXT_CTEST:-}" \
  bash -euc '
    mount -t proc proc "$ROOT/proc"
    mount --rbind /sys "$ROOT/sys"
    mount --bind /dev "$ROOT/dev"
    mount --bind /dev/pts "$ROOT/dev/pts"
    mount -t tmpfs tmpfs "$ROOT/dev/shm"
    mount -t tmpfs -o mode=1777 tmpfs "$ROOT/tmp"
    mkdir -p "$ROOT/ucfs/src" "$ROOT/ucfs/build"
    mount --bind "$REPO" "$ROOT/ucfs/src"
    mount -o remount,bind,ro "$ROOT/ucfs/src"
    mount --bind "$BUILD" "$ROOT/ucfs/build"
    exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 JOBS="$JOBS" EXCLUDE_RE="$EXCLUDE_RE" \
      EXTRA_CTEST="$EXTRA_CTEST" /bin/bash -euc "$INNER"'
phase ""
echo "[fuse_next] all done in $(( $(date +%s) - T0 ))s"
