#!/usr/bin/env bash
# Builds, once, a Debian sid root in which ucfs is built against libfuse 3.18 (FUSE passthrough, io_uring, larger
# requests), the Debian 12 build staying as it is, as tests/lib/sid_root.sh builds sid roots (tests/ecosystem/setup.sh
# builds its own the same way). See tests/fuse_next/README.md.
#
#   sudo tests/fuse_next/setup.sh          # root, on a Debian 12 host; idempotent
#
# Environment:
#   UCFS_FUSE_NEXT_DIR     where the root and the download caches live (default /var/cache/ucfs-fuse-next); the root
#                          is $UCFS_FUSE_NEXT_DIR/sid, the caches $UCFS_FUSE_NEXT_DIR/cache/.
#   UCFS_FUSE_NEXT_MIRROR  Debian mirror URI (default: the one the host's apt sources use for Debian itself).
#   UCFS_FUSE_NEXT_FORCE=1 rebuild even when the stamp matches.
#
# A run whose stamp (the packages below + this script's recipe) matches the root's does nothing; any other builds
# the root afresh, replacing the old one only when every phase passed (tests/lib/sid_root.sh).
set -euo pipefail

# ---- packages ---------------------------------------------------------------------------------------------------
# libfuse at exactly this version (the archive reached here is a dated snapshot): what the passthrough code is
# written and tested against.
DEB_PINNED=(
  libfuse3-dev=3.18.3-1
  libfuse3-4=3.18.3-1
  fuse3=3.18.3-1
)
# What ucfs needs to build and run its kernel-free tests and the FUSE tests that need no torch (packaging/
# install-deps.sh has the Debian 12 list; no LibTorch, no clang, no sanitizers: a lean Release build). python3 runs
# the test scripts; the tests that need torch run on the host (run.sh says which).
DEB_OTHER=(
  cmake ninja-build g++ pkgconf
  liblmdb-dev libspdlog-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libgtest-dev libgmock-dev
  python3 mount attr procps ca-certificates
)
SUITE=sid
RECIPE=1   # bump when the build steps below change in a way that needs a rebuild

# ---- the root ----------------------------------------------------------------------------------------------------
NAME=ucfs-fuse-next
VAR=UCFS_FUSE_NEXT
BASE=${UCFS_FUSE_NEXT_DIR:-/var/cache/ucfs-fuse-next}
FORCE=${UCFS_FUSE_NEXT_FORCE:-0}
MIRROR=${UCFS_FUSE_NEXT_MIRROR:-}
STAMP_TEXT="recipe=$RECIPE suite=$SUITE
deb: ${DEB_PINNED[*]}
deb-other: ${DEB_OTHER[*]}"
# shellcheck source-path=SCRIPTDIR source=../lib/sid_root.sh
. "$(dirname "$0")/../lib/sid_root.sh"

sid_root_begin
BUILD_ROOT_BINDS=()
BUILD_ROOT_ENV=()
sid_root_bootstrap
sid_root_apt DEB_PINNED DEB_OTHER "pkg-config --modversion fuse3 >/opt-fuse-version"
echo "[setup]   libfuse $(cat "$BUILD/opt-fuse-version")"
rm -f "$BUILD/opt-fuse-version"
sid_root_install
