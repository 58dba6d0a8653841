#!/usr/bin/env bash
# Builds, once, a Debian sid root in which ucfs is built against libfuse 3.18 (FUSE passthrough, io_uring, larger
# requests), the Debian 12 build staying as it is. Modelled on tests/ecosystem/setup.sh. See tests/fuse_next/README.md.
#
#   sudo tests/fuse_next/setup.sh          # root, on a Debian 12 host; idempotent
#
# Environment:
#   UCFS_FUSE_NEXT_DIR     where the root and the download caches live (default /var/cache/ucfs-fuse-next); the root
#                          is $UCFS_FUSE_NEXT_DIR/sid, the caches $UCFS_FUSE_NEXT_DIR/cache/.
#   UCFS_FUSE_NEXT_MIRROR  Debian mirror URI (default: the one the host's apt sources use for Debian itself).
#   UCFS_FUSE_NEXT_FORCE=1 rebuild even when the stamp matches.
#
# A run whose stamp (the packages below + this script's recipe) matches the root's does nothing. Any other run builds
# a fresh root in $UCFS_FUSE_NEXT_DIR/sid.build and renames it over the old one only when every phase passed, so a
# failed or interrupted build leaves the old root (if any) in place. Every mount made while building lives in a
# private mount namespace (unshare -m) and disappears with it, also when the build is killed.
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

# ---- paths -----------------------------------------------------------------------------------------------------
BASE=${UCFS_FUSE_NEXT_DIR:-/var/cache/ucfs-fuse-next}
ROOT=$BASE/$SUITE
BUILD=$BASE/$SUITE.build
OLD=$BASE/$SUITE.old
CACHE=$BASE/cache
STAMP_NAME=.ucfs-fuse-next-stamp

STAMP_TEXT="recipe=$RECIPE suite=$SUITE
deb: ${DEB_PINNED[*]}
deb-other: ${DEB_OTHER[*]}"

T0=$(date +%s)
phase_start=$T0
phase() {   # phase NAME: ends the previous phase (printing its time), starts NAME
  local now; now=$(date +%s)
  [ -n "${PHASE:-}" ] && printf '[setup] %-28s %4ds\n' "$PHASE" $((now - phase_start))
  PHASE=$1; phase_start=$now
  [ -n "$PHASE" ] && echo "[setup] -- $PHASE"
  return 0
}
die() { echo "setup.sh: $*" >&2; exit 1; }
up_to_date() {
  [ "${UCFS_FUSE_NEXT_FORCE:-0}" != 1 ] && [ -f "$ROOT/$STAMP_NAME" ] && [ "$(cat "$ROOT/$STAMP_NAME")" = "$STAMP_TEXT" ]
}

[ "$(id -u)" = 0 ] || die "must run as root"
case "$BASE" in /*) ;; *) die "UCFS_FUSE_NEXT_DIR must be absolute" ;; esac
REPO=$(cd "$(dirname "$0")/../.." && pwd)
case "$BASE/" in "$REPO"/*) die "UCFS_FUSE_NEXT_DIR must be outside the source tree ($REPO)" ;; esac

if up_to_date; then
  echo "[setup] $ROOT is up to date ($(( $(date +%s) - T0 ))s)"
  exit 0
fi

mkdir -p "$BASE" "$CACHE/debootstrap" "$CACHE/apt-archives/partial"
exec 9>"$BASE/.lock"
flock -w 3600 9 || die "another setup.sh holds $BASE/.lock"
# Re-check under the lock: a concurrent run may just have built it.
if up_to_date; then
  echo "[setup] $ROOT is up to date ($(( $(date +%s) - T0 ))s)"
  exit 0
fi

# Removes a build dir. Refuses if anything is mounted below it (a leaked bind would otherwise be deleted through it;
# rm --one-file-system does not see binds of the same file system).
remove_tree() {
  local d=$1
  [ -e "$d" ] || return 0
  if awk -v d="$d/" '{ if (index($5 "/", d) == 1) found = 1 } END { exit !found }' /proc/self/mountinfo; then
    die "something is mounted under $d (see /proc/self/mountinfo); unmount it and re-run"
  fi
  rm -rf --one-file-system "$d"
}

# The host's Debian mirror: the first URI of an apt source for Debian itself (not -security), deb822 or one-line.
host_mirror() {
  local m=""
  m=$(awk 'BEGIN { RS = ""; FS = "\n" }
           { uri = ""; suites = "";
             for (i = 1; i <= NF; i++) {
               if ($i ~ /^URIs:/)   { uri = $i; sub(/^URIs:[ \t]*/, "", uri); sub(/[ \t].*/, "", uri) }
               if ($i ~ /^Suites:/) { suites = $i }
             }
             if (uri != "" && suites ~ /(bookworm|trixie|stable|sid|unstable)/ && suites !~ /security/ && $0 ~ /debian-archive-keyring/) { print uri; exit } }' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  if [ -z "$m" ]; then
    m=$(grep -hE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        sed -E 's/\[[^]]*\]//' | awk '$3 !~ /security/ && $3 ~ /(bookworm|trixie|stable|sid|unstable)/ { print $2; exit }')
  fi
  printf '%s\n' "$m"
}
MIRROR=${UCFS_FUSE_NEXT_MIRROR:-$(host_mirror)}
[ -n "$MIRROR" ] || die "found no Debian mirror in the host's apt sources; set UCFS_FUSE_NEXT_MIRROR"

# Runs a shell script inside the build root, in a private mount namespace with /proc, /sys, /dev bound and the
# download cache bound over the root's own. Nothing it mounts outlives it.
in_build_root() {
  unshare --mount --propagation private -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    BUILD="$BUILD" CACHE="$CACHE" SCRIPT="$1" bash -euc '
      mount -t proc proc "$BUILD/proc"
      mount --rbind /sys "$BUILD/sys"
      mount --bind /dev "$BUILD/dev"
      mount --bind /dev/pts "$BUILD/dev/pts"
      mkdir -p "$BUILD/var/cache/apt/archives"
      mount --bind "$CACHE/apt-archives" "$BUILD/var/cache/apt/archives"
      exec chroot "$BUILD" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive /bin/bash -euxc "$SCRIPT"'
}

echo "[setup] building $ROOT (Debian $SUITE from $MIRROR)"

phase "host prerequisites"
if ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
command -v unshare >/dev/null || die "unshare (util-linux) is missing"

phase "clean previous build"
remove_tree "$BUILD"
remove_tree "$OLD"

phase "debootstrap $SUITE"
# minbase: dpkg, apt and essentials only. --cache-dir keeps the .debs for the next build.
unshare --mount --propagation private -- \
  debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap" "$SUITE" "$BUILD" "$MIRROR" \
  >"$BASE/debootstrap.log" 2>&1 || { tail -n 30 "$BASE/debootstrap.log" >&2; die "debootstrap failed (log: $BASE/debootstrap.log)"; }

phase "configure root"
printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$BUILD/etc/apt/sources.list"
cat >"$BUILD/etc/apt/apt.conf.d/90ucfs-fuse-next" <<'EOF'
// The sid archive reached here is a dated snapshot: its Release file would otherwise be refused as expired.
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
// Keep the .debs (the archives dir is bound to a cache outside the root while building).
APT::Keep-Downloaded-Packages "true";
Acquire::Languages "none";
EOF
cat >"$BUILD/etc/dpkg/dpkg.cfg.d/90ucfs-fuse-next-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
# No daemons start inside the root.
printf '#!/bin/sh\nexit 101\n' >"$BUILD/usr/sbin/policy-rc.d"; chmod 755 "$BUILD/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$BUILD/etc/resolv.conf" 2>/dev/null || true

phase "apt: Debian packages"
in_build_root "
  apt-get -q update
  apt-get -q -y install ${DEB_PINNED[*]} ${DEB_OTHER[*]}
  apt-mark hold ${DEB_PINNED[*]%%=*} >/dev/null
  pkg-config --modversion fuse3 >/opt-fuse-version
" >"$BASE/apt.log" 2>&1 || { tail -n 40 "$BASE/apt.log" >&2; die "apt inside the root failed (log: $BASE/apt.log)"; }
echo "[setup]   libfuse $(cat "$BUILD/opt-fuse-version")"
rm -f "$BUILD/opt-fuse-version"

phase "install"
printf '%s\n' "$STAMP_TEXT" >"$BUILD/$STAMP_NAME"
if [ -e "$ROOT" ]; then mv "$ROOT" "$OLD"; fi
mv "$BUILD" "$ROOT"
remove_tree "$OLD"
phase ""
echo "[setup] done: $ROOT ($(du -sh --one-file-system "$ROOT" | cut -f1)) in $(( $(date +%s) - T0 ))s"
