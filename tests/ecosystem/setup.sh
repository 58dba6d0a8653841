#!/usr/bin/env bash
# Builds the modern test environment: a Debian sid root (debootstrap) holding Debian's torch / transformers /
# accelerate / safetensors, plus DeepSpeed, Lightning and PEFT from PyPI, installed by name with pip inside the root.
# See tests/ecosystem/README.md.
#
#   sudo tests/ecosystem/setup.sh          # root, on a Debian 12 host; idempotent
#
# Environment:
#   UCFS_ECOSYSTEM_DIR     where the root and the download caches live (default /var/cache/ucfs-ecosystem);
#                          the root is $UCFS_ECOSYSTEM_DIR/sid, the caches $UCFS_ECOSYSTEM_DIR/cache/.
#   UCFS_ECOSYSTEM_MIRROR  Debian mirror URI (default: the one the host's apt sources use for Debian itself).
#   UCFS_ECOSYSTEM_FORCE=1 rebuild even when the stamp matches.
#
# A run whose stamp (the pinned versions below + this script's build recipe) matches the root's does nothing. Any
# other run builds a fresh root in $UCFS_ECOSYSTEM_DIR/sid.build and renames it over the old one only when every
# phase passed, so a failed or interrupted build leaves the old root (if any) in place and the next run starts over
# from a clean build dir. Every mount made while building lives in a private mount namespace (unshare -m) and
# disappears with it, also when the build is killed.
set -euo pipefail

# ---- pinned versions -------------------------------------------------------------------------------------------
# Debian sid packages: installed at exactly these versions (the archive reached here is a dated snapshot).
DEB_PINNED=(
  python3=3.14.8-1
  python3.14=3.14.10-1
  python3-torch=2.14.1+dfsg-1
  python3-transformers=5.12.1-2
  python3-accelerate=1.14.0-3
  python3-safetensors=0.8.0-1
  python3-pydantic=2.14.1-1
  python3-numpy=1:2.4.6+ds-5+b1
  python3-huggingface-hub=1.23.0-1
  python3-fsspec=2026.9.0-1
)
# Debian sid packages whose version does not matter to the tests (taken from the same snapshot).
DEB_OTHER=(
  python3-pip python3-setuptools python3-wheel
  python3-psutil python3-packaging python3-tqdm python3-cpuinfo python3-msgpack python3-hjson python3-einops
  python3-yaml python3-typing-extensions
  ca-certificates procps
)
# PyPI, installed by name, with no dependency resolution: every dependency not listed here comes from Debian, above
# (sid has no lightning-utilities or torchmetrics; Lightning's fsspec[http] extra is only for remote URLs).
PIP_PINNED=(
  deepspeed==0.19.8
  lightning==2.6.6
  lightning-utilities==0.15.3
  torchmetrics==1.9.0
  peft==0.21.2
)
SUITE=sid
RECIPE=3   # bump when the build steps below change in a way that needs a rebuild

# ---- paths -----------------------------------------------------------------------------------------------------
BASE=${UCFS_ECOSYSTEM_DIR:-/var/cache/ucfs-ecosystem}
ROOT=$BASE/$SUITE
BUILD=$BASE/$SUITE.build
OLD=$BASE/$SUITE.old
CACHE=$BASE/cache
STAMP_NAME=.ucfs-ecosystem-stamp
TARGET=/opt/ucfs-ecosystem/site-packages   # inside the root: PYTHONPATH for DeepSpeed, Lightning, PEFT

STAMP_TEXT="recipe=$RECIPE suite=$SUITE
deb: ${DEB_PINNED[*]}
deb-other: ${DEB_OTHER[*]}
pip: ${PIP_PINNED[*]}
target: $TARGET"

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

[ "$(id -u)" = 0 ] || die "must run as root"
case "$BASE" in /*) ;; *) die "UCFS_ECOSYSTEM_DIR must be absolute" ;; esac
REPO=$(cd "$(dirname "$0")/../.." && pwd)
case "$BASE/" in "$REPO"/*) die "UCFS_ECOSYSTEM_DIR must be outside the source tree ($REPO)" ;; esac

if [ "${UCFS_ECOSYSTEM_FORCE:-0}" != 1 ] && [ -f "$ROOT/$STAMP_NAME" ] && [ "$(cat "$ROOT/$STAMP_NAME")" = "$STAMP_TEXT" ]; then
  echo "[setup] $ROOT is up to date ($(( $(date +%s) - T0 ))s)"
  exit 0
fi

mkdir -p "$BASE" "$CACHE/debootstrap" "$CACHE/apt-archives/partial" "$CACHE/pip"
exec 9>"$BASE/.lock"
flock -w 3600 9 || die "another setup.sh holds $BASE/.lock"
# Re-check under the lock: a concurrent run may just have built it.
if [ "${UCFS_ECOSYSTEM_FORCE:-0}" != 1 ] && [ -f "$ROOT/$STAMP_NAME" ] && [ "$(cat "$ROOT/$STAMP_NAME")" = "$STAMP_TEXT" ]; then
  echo "[setup] $ROOT is up to date ($(( $(date +%s) - T0 ))s)"
  exit 0
fi

# Removes a build dir. Refuses if anything is mounted below it (a leaked bind of /tmp or the repository would
# otherwise be deleted through it; rm --one-file-system does not see binds of the same file system).
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
MIRROR=${UCFS_ECOSYSTEM_MIRROR:-$(host_mirror)}
[ -n "$MIRROR" ] || die "found no Debian mirror in the host's apt sources; set UCFS_ECOSYSTEM_MIRROR"

# Runs a shell script inside the build root, in a private mount namespace with /proc, /sys, /dev bound and the
# download caches bound over the root's own cache dirs. Nothing it mounts outlives it.
in_build_root() {
  unshare --mount --propagation private -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    BUILD="$BUILD" CACHE="$CACHE" SCRIPT="$1" bash -euc '
      mount -t proc proc "$BUILD/proc"
      mount --rbind /sys "$BUILD/sys"
      mount --bind /dev "$BUILD/dev"
      mount --bind /dev/pts "$BUILD/dev/pts"
      mount --bind /dev/shm "$BUILD/dev/shm"
      mkdir -p "$BUILD/var/cache/apt/archives" "$BUILD/root/.cache/pip"
      mount --bind "$CACHE/apt-archives" "$BUILD/var/cache/apt/archives"
      mount --bind "$CACHE/pip" "$BUILD/root/.cache/pip"
      exec chroot "$BUILD" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive SSL_CERT_FILE=/etc/ucfs-host-ca.crt \
        PIP_CERT=/etc/ucfs-host-ca.crt REQUESTS_CA_BUNDLE=/etc/ucfs-host-ca.crt PIP_DEFAULT_TIMEOUT=180 \
        PIP_DISABLE_PIP_VERSION_CHECK=1 /bin/bash -euxc "$SCRIPT"'
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
cat >"$BUILD/etc/apt/apt.conf.d/90ucfs-ecosystem" <<'EOF'
// The sid archive reached here is a dated snapshot: its Release file would otherwise be refused as expired.
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
// Keep the .debs (the archives dir is bound to a cache outside the root while building).
APT::Keep-Downloaded-Packages "true";
Acquire::Languages "none";
EOF
cat >"$BUILD/etc/dpkg/dpkg.cfg.d/90ucfs-ecosystem-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
# No daemons start inside the root.
printf '#!/bin/sh\nexit 101\n' >"$BUILD/usr/sbin/policy-rc.d"; chmod 755 "$BUILD/usr/sbin/policy-rc.d"
# TLS-intercepting proxies: pip in the root honours SSL_CERT_FILE pointing at the host's CA bundle (not --cert).
cp /etc/ssl/certs/ca-certificates.crt "$BUILD/etc/ucfs-host-ca.crt"
cp /etc/resolv.conf "$BUILD/etc/resolv.conf" 2>/dev/null || true

phase "apt: Debian packages"
in_build_root "
  apt-get -q update
  apt-get -q -y install ${DEB_PINNED[*]} ${DEB_OTHER[*]}
  apt-mark hold ${DEB_PINNED[*]%%=*} >/dev/null
" >"$BASE/apt.log" 2>&1 || { tail -n 40 "$BASE/apt.log" >&2; die "apt inside the root failed (log: $BASE/apt.log)"; }

phase "pip: DeepSpeed, Lightning, PEFT"
# DeepSpeed without its compiled ops (DS_BUILD_OPS=0) for the CPU accelerator; --target keeps the root's
# dist-packages Debian's; --no-deps because every dependency comes from Debian; --no-build-isolation so its setup.py
# sees Debian's torch. The metadata lands in the target dir too, so importlib.metadata finds the distributions.
in_build_root "
  mkdir -p $TARGET
  DS_BUILD_OPS=0 DS_ACCELERATOR=cpu python3 -m pip install -q --root-user-action=ignore --no-deps --no-build-isolation --target $TARGET ${PIP_PINNED[*]}
" >"$BASE/pip.log" 2>&1 || { tail -n 40 "$BASE/pip.log" >&2; die "pip inside the root failed (log: $BASE/pip.log)"; }

phase "check imports"
in_build_root "
  cd /
  PYTHONPATH=$TARGET DS_ACCELERATOR=cpu TORCHDYNAMO_DISABLE=1 python3 - <<'EOF' >/opt/ucfs-ecosystem/versions.txt
import sys, importlib.metadata as md
import torch, transformers, accelerate, safetensors, deepspeed, lightning, peft, numpy, pydantic
print('python', sys.version.split()[0])
for d in ['torch', 'transformers', 'accelerate', 'safetensors', 'deepspeed', 'lightning', 'lightning-utilities',
          'torchmetrics', 'peft', 'numpy', 'pydantic', 'fsspec', 'huggingface-hub']:
    print(d, md.version(d))
EOF
  cat /opt/ucfs-ecosystem/versions.txt
" >"$BASE/check.log" 2>&1 || { tail -n 40 "$BASE/check.log" >&2; die "import check failed (log: $BASE/check.log)"; }
sed 's/^/[setup]   /' "$BUILD/opt/ucfs-ecosystem/versions.txt"

phase "install"
printf '%s\n' "$STAMP_TEXT" >"$BUILD/$STAMP_NAME"
if [ -e "$ROOT" ]; then mv "$ROOT" "$OLD"; fi
mv "$BUILD" "$ROOT"
remove_tree "$OLD"
phase ""
echo "[setup] done: $ROOT ($(du -sh --one-file-system "$ROOT" | cut -f1)) in $(( $(date +%s) - T0 ))s"
