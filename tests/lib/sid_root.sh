# shellcheck shell=bash
# A Debian sid root of our own, built once with debootstrap and kept under a cache directory, for the tests that
# need newer packages than Debian 12's (tests/ecosystem/setup.sh: torch 2.14 and DeepSpeed 0.19.8;
# tests/fuse_next/setup.sh: libfuse 3.18). Sourced by their setup.sh; not run on its own.
#
# The caller sets, before calling sid_root_begin:
#   NAME        a short name: the stamp is $ROOT/.NAME-stamp, apt and dpkg settings 90NAME in the root
#   VAR         the prefix of its environment variables (VAR_DIR, VAR_MIRROR, VAR_FORCE), for messages
#   BASE        where the root and the download caches live (absolute, outside the source tree)
#   SUITE       the Debian suite (sid)
#   STAMP_TEXT  what the root is built from: a root whose stamp holds it is up to date
#   FORCE       1 rebuilds even so
#   MIRROR      a Debian mirror URI, or empty for the one the host's apt sources use
# and may set BUILD_ROOT_BINDS (host dirs bound into the root while building, as "HOST:IN_ROOT") and
# BUILD_ROOT_ENV (more "NAME=VALUE" for scripts run in the root).
#
# A run whose stamp matches does nothing. Any other builds a fresh root in $BASE/$SUITE.build and renames it over
# the old one only when every phase passed (sid_root_install), so a failed or interrupted build leaves the old root
# (if any) in place and the next run starts over from a clean build dir. Every mount made while building lives in
# a private mount namespace (unshare -m) and disappears with it, also when the build is killed.

# shellcheck source=phases.sh
. "$(dirname "${BASH_SOURCE[0]}")/phases.sh"

up_to_date() {
  [ "${FORCE:-0}" != 1 ] && [ -f "$ROOT/$STAMP_NAME" ] && [ "$(cat "$ROOT/$STAMP_NAME")" = "$STAMP_TEXT" ]
}

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

# Checks the request, exits when the root is up to date (again under the lock, which it takes: a concurrent run
# may just have built it), and sets ROOT, BUILD, OLD, CACHE, STAMP_NAME and MIRROR.
sid_root_begin() {
  ROOT=$BASE/$SUITE
  BUILD=$BASE/$SUITE.build
  OLD=$BASE/$SUITE.old
  CACHE=$BASE/cache
  STAMP_NAME=.$NAME-stamp
  [ "$(id -u)" = 0 ] || die "must run as root"
  case "$BASE" in /*) ;; *) die "${VAR}_DIR must be absolute" ;; esac
  local repo; repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  case "$BASE/" in "$repo"/*) die "${VAR}_DIR must be outside the source tree ($repo)" ;; esac
  if up_to_date; then
    echo "[setup] $ROOT is up to date ($(( $(date +%s) - T0 ))s)"
    exit 0
  fi
  mkdir -p "$BASE" "$CACHE/debootstrap" "$CACHE/apt-archives/partial"
  exec 9>"$BASE/.lock"
  flock -w 3600 9 || die "another setup.sh holds $BASE/.lock"
  if up_to_date; then
    echo "[setup] $ROOT is up to date ($(( $(date +%s) - T0 ))s)"
    exit 0
  fi
  MIRROR=${MIRROR:-$(host_mirror)}
  [ -n "$MIRROR" ] || die "found no Debian mirror in the host's apt sources; set ${VAR}_MIRROR"
}

# Runs a shell script inside the build root, in a private mount namespace with /proc, /sys, /dev bound, the apt
# download cache and BUILD_ROOT_BINDS bound over the root's own dirs, and BUILD_ROOT_ENV set. Nothing it mounts
# outlives it.
in_build_root() {
  local binds="" b
  for b in "${BUILD_ROOT_BINDS[@]}"; do
    binds+="mkdir -p \"\$BUILD${b#*:}\"; mount --bind \"${b%%:*}\" \"\$BUILD${b#*:}\"; "
  done
  # shellcheck disable=SC2016  # expanded by the inner shell
  unshare --mount --propagation private -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    BUILD="$BUILD" CACHE="$CACHE" SCRIPT="$1" BINDS="$binds" ROOT_ENV="${BUILD_ROOT_ENV[*]}" bash -euc '
      mount -t proc proc "$BUILD/proc"
      mount --rbind /sys "$BUILD/sys"
      mount --bind /dev "$BUILD/dev"
      mount --bind /dev/pts "$BUILD/dev/pts"
      mount --bind /dev/shm "$BUILD/dev/shm"
      mkdir -p "$BUILD/var/cache/apt/archives"
      mount --bind "$CACHE/apt-archives" "$BUILD/var/cache/apt/archives"
      eval "$BINDS"
      # ROOT_ENV: NAME=VALUE words without spaces, split here on purpose.
      exec chroot "$BUILD" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive $ROOT_ENV /bin/bash -euxc "$SCRIPT"'
}

# debootstrap (minbase: dpkg, apt and essentials only) of $SUITE into a clean $BUILD, set up for apt from $MIRROR
# with nothing recommended, no docs and no daemons.
sid_root_bootstrap() {
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
  # --cache-dir keeps the .debs for the next build.
  unshare --mount --propagation private -- \
    debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap" "$SUITE" "$BUILD" "$MIRROR" \
    >"$BASE/debootstrap.log" 2>&1 || { tail -n 30 "$BASE/debootstrap.log" >&2; die "debootstrap failed (log: $BASE/debootstrap.log)"; }

  phase "configure root"
  printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$BUILD/etc/apt/sources.list"
  cat >"$BUILD/etc/apt/apt.conf.d/90$NAME" <<'EOF'
// The sid archive reached here is a dated snapshot: its Release file would otherwise be refused as expired.
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
// Keep the .debs (the archives dir is bound to a cache outside the root while building).
APT::Keep-Downloaded-Packages "true";
Acquire::Languages "none";
EOF
  cat >"$BUILD/etc/dpkg/dpkg.cfg.d/90$NAME-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
  # No daemons start inside the root.
  printf '#!/bin/sh\nexit 101\n' >"$BUILD/usr/sbin/policy-rc.d"; chmod 755 "$BUILD/usr/sbin/policy-rc.d"
  # TLS-intercepting proxies: tools in the root take the host's CA bundle (SSL_CERT_FILE and the like).
  cp /etc/ssl/certs/ca-certificates.crt "$BUILD/etc/ucfs-host-ca.crt"
  cp /etc/resolv.conf "$BUILD/etc/resolv.conf" 2>/dev/null || true
}

# apt-get install of PINNED (held at their versions) and OTHER in the build root, logged to $BASE/apt.log; then
# AFTER, a script run there too.
sid_root_apt() {
  local -n pinned=$1 other=$2
  phase "apt: Debian packages"
  in_build_root "
    apt-get -q update
    apt-get -q -y install ${pinned[*]} ${other[*]}
    apt-mark hold ${pinned[*]%%=*} >/dev/null
    ${3:-}
  " >"$BASE/apt.log" 2>&1 || { tail -n 40 "$BASE/apt.log" >&2; die "apt inside the root failed (log: $BASE/apt.log)"; }
}

# The build root made the root, stamped; the old one removed.
sid_root_install() {
  phase "install"
  printf '%s\n' "$STAMP_TEXT" >"$BUILD/$STAMP_NAME"
  if [ -e "$ROOT" ]; then mv "$ROOT" "$OLD"; fi
  mv "$BUILD" "$ROOT"
  remove_tree "$OLD"
  phase ""
  echo "[setup] done: $ROOT ($(du -sh --one-file-system "$ROOT" | cut -f1)) in $(( $(date +%s) - T0 ))s"
}
