#!/usr/bin/env bash
# Runs a command inside the modern test environment built by setup.sh (a Debian sid root), as root:
#
#   tests/ecosystem/run.sh python3 tests/ecosystem/harness/launch.py -n 2 -- tests/ecosystem/harness/smoke_deepspeed.py
#
# The command runs under chroot in a private mount namespace (unshare --mount --propagation slave) in which /proc,
# /sys, /dev, /dev/pts, /dev/shm, /tmp and the repository (at the same absolute path) are bound into the root. All of
# those mounts exist only in that namespace: the host sees none of them, they vanish when the command ends (also on
# failure, Ctrl-C or kill -9), and any number of run.sh can run at once. /tmp is bound recursively, so FUSE mounts
# (ucfs) made on the host under /tmp before run.sh starts are visible inside; a mount made on the host after it
# starts is visible inside only where the host's /tmp mount is shared (it is private on this CI's machine).
# The working directory is kept when it lies in the repository or /tmp, else /.
#
# Environment:
#   UCFS_ECOSYSTEM_DIR    as for setup.sh (default /var/cache/ucfs-ecosystem); the root is $UCFS_ECOSYSTEM_DIR/sid
#   UCFS_ECOSYSTEM_ROOT   the root itself (overrides the above)
#   UCFS_REPO_DIR         the directory bound at its own path (default: this repository)
#   UCFS_ECOSYSTEM_BINDS  more host directories, space-separated, bound at their own paths
#   UCFS_ECOSYSTEM_MOUNTS the FUSE mounts (host paths, made before run.sh starts) the command reads; every other FUSE
#                         mount is detached from its namespace, which would otherwise keep their daemons serving
#                         after an unmount on the host until the command ends
# Passed into the root: TERM, and variables named UCFS_*, DS_*, TORCH*, OMP_*, OPENBLAS_*, CI, PYTHONHASHSEED,
# PYTHONFAULTHANDLER; set there: PYTHONPATH (DeepSpeed/Lightning/PEFT target dir, then the harness dir),
# DS_ACCELERATOR=cpu, TORCHDYNAMO_DISABLE=1 (no C++ toolchain in the root for torch.compile), PYTHONDONTWRITEBYTECODE=1.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${UCFS_ECOSYSTEM_ROOT:-${UCFS_ECOSYSTEM_DIR:-/var/cache/ucfs-ecosystem}/sid}
REPO=${UCFS_REPO_DIR:-$(cd "$HERE/../.." && pwd)}
TARGET=/opt/ucfs-ecosystem/site-packages

[ $# -gt 0 ] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root" >&2; exit 1; }
[ -f "$ROOT/.ucfs-ecosystem-stamp" ] || { echo "run.sh: no environment at $ROOT; run tests/ecosystem/setup.sh" >&2; exit 1; }

if [ "${_UCFS_RUN_INNER:-}" != 1 ]; then
  # Re-exec in a new mount namespace. slave: mounts the host makes later still propagate in where the host's mounts
  # are shared; nothing made here propagates out. unshare execs (no fork), so signals reach the command directly.
  _UCFS_RUN_INNER=1 exec unshare --mount --propagation slave -- "$0" "$@"
fi

# ---- inside the private namespace ----
bind() {   # bind SRC [rec]: SRC at the same path inside the root
  local src=$1 dst="$ROOT$1"
  [ -d "$src" ] || { echo "run.sh: $src is not a directory" >&2; exit 1; }
  mkdir -p "$dst"
  if [ "${2:-}" = rec ]; then mount --rbind "$src" "$dst"; else mount --bind "$src" "$dst"; fi
}
cleanup() {
  # Not needed for correctness (the namespace's mounts die with it), but leaves a tidy namespace for any process
  # the command left behind. Lazy, deepest first.
  awk -v r="$ROOT/" '{ if (index($5 "/", r) == 1) print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"
bind /dev
bind /dev/pts
bind /dev/shm
bind /tmp rec
bind "$REPO" rec
for b in ${UCFS_ECOSYSTEM_BINDS:-}; do bind "$b" rec; done
# This namespace copied every mount there was, and holds each until the command ends: a ucfs daemon unmounted on the
# host would go on serving this copy and not exit. Only the FUSE mounts the command names (UCFS_ECOSYSTEM_MOUNTS,
# host paths) are kept, here and inside the root; every other is detached from this namespace.
keep=" ${UCFS_ECOSYSTEM_MOUNTS:-} "
awk '{ split($0, halves, " - "); split(halves[2], fs, " "); if (fs[1] ~ /^fuse/) print $5 }' /proc/self/mountinfo |
  sort -r | while read -r m; do
    case "$keep" in *" ${m#"$ROOT"} "*) continue ;; esac
    umount -l "$m" 2>/dev/null || true
  done

ENVV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
      PYTHONPATH="$TARGET:$REPO/tests/ecosystem/harness" DS_ACCELERATOR=cpu TORCHDYNAMO_DISABLE=1
      UCFS_REPO_DIR="$REPO" PYTHONDONTWRITEBYTECODE=1)   # no __pycache__ in the bound repository
for name in $(compgen -e); do
  case "$name" in
    _UCFS_RUN_INNER|DS_ACCELERATOR|TORCHDYNAMO_DISABLE|UCFS_REPO_DIR) ;;
    TERM|CI|PYTHONHASHSEED|PYTHONFAULTHANDLER|UCFS_*|DS_*|TORCH*|OMP_*|OPENBLAS_*) ENVV+=("$name=${!name}") ;;
  esac
done

WD=/
case "$PWD/" in "$REPO"/*|/tmp/*) WD=$PWD ;; esac

# Not exec: the EXIT trap unmounts after the command ends.
set +e
chroot "$ROOT" /usr/bin/env -i "${ENVV[@]}" /bin/sh -c 'cd "$0" && exec "$@"' "$WD" "$@"
rc=$?
exit $rc
