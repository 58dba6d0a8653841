#!/usr/bin/env bash
# The .deb (cpack -G DEB) and `cmake --install`, built from this build tree:
# the package's name and control fields, that it installs the product and only
# the product, that the installed ucfs runs on system libraries alone (no
# LibTorch), and that the mount helper links and man pages are there.
# Usage: packaging_test.sh BUILD_DIR
set -u
build=$1
source "$(dirname "$0")/tools/checks.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

version=$("$build/ucfs" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
# What the product is, relative to the install prefix; nothing else may be installed.
expected_files="bin/ucfs
sbin/mount.fuse.ucfs
sbin/mount.ucfs
share/doc/ucfs/examples/mnt-run7.mount
share/man/man1/ucfs.1
share/man/man8/mount.fuse.ucfs.8
share/man/man8/mount.ucfs.8"

if ! cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1; then
  cat "$tmp/cpack.log"
fi
deb="$tmp/pkg/ucfs_${version}_${arch}.deb"
check "cpack -G DEB makes ucfs_${version}_${arch}.deb" test -f "$deb"
[ -f "$deb" ] || { echo "no package: giving up"; exit 1; }

field() { dpkg-deb -f "$deb" "$1"; }
depends=$(field Depends)
echo "Depends: $depends"
check "Depends names libfuse3 (from dpkg-shlibdeps)" grep -Eq '(^|, )libfuse3-[0-9]+ ' <<<"$depends"
check "Depends names fuse3 (fusermount3)" grep -Eq '(^|, )fuse3(,|$)' <<<"$depends"
check "Depends names no LibTorch" bash -c "! grep -Eqi 'torch|c10' <<<'$depends'"
check "Package ucfs, Version $version" test "$(field Package) $(field Version)" = "ucfs $version"
check "Section utils" test "$(field Section)" = utils
check "Maintainer and Description set" test -n "$(field Maintainer)" -a -n "$(field Description)"

dpkg-deb -x "$deb" "$tmp/root"
listed=$(cd "$tmp/root/usr" && find . ! -type d | sed 's|^\./||' | sort)
check "the package holds the product and nothing else" test "$listed" = "$expected_files"
[ "$listed" = "$expected_files" ] || diff <(echo "$expected_files") <(echo "$listed")

ucfs="$tmp/root/usr/bin/ucfs"
check "the packaged ucfs runs: ucfs --version" \
  test "$(env -u LD_LIBRARY_PATH "$ucfs" --version)" = "ucfs $version"
env -u LD_LIBRARY_PATH ldd "$ucfs" >"$tmp/ldd"
check "it links system libraries only, all found" bash -c "! grep -q 'not found' '$tmp/ldd'"
# Library names only: ldd's load addresses are hex, and may well hold "c10".
check "it does not link LibTorch" bash -c "! awk '{print \$1}' '$tmp/ldd' | grep -Eqi 'torch|c10'"
check "it links libfuse3" grep -q 'libfuse3\.so' "$tmp/ldd"
for helper in mount.fuse.ucfs mount.ucfs; do
  check "/usr/sbin/$helper -> ../bin/ucfs" test "$(readlink "$tmp/root/usr/sbin/$helper")" = ../bin/ucfs
  check "$helper runs as the mount helper" \
    bash -c "'$tmp/root/usr/sbin/$helper' --help | grep -q 'world_size=N'"
done
for page in man1/ucfs.1 man8/mount.fuse.ucfs.8; do
  check "man page $page" grep -q '^\.TH ' "$tmp/root/usr/share/man/$page"
done
check "man8/mount.ucfs.8 is a link to mount.fuse.ucfs.8" \
  test "$(cat "$tmp/root/usr/share/man/man8/mount.ucfs.8")" = ".so man8/mount.fuse.ucfs.8"

# `cmake --install` installs the same, and no test program or library.
if ! cmake --install "$build" --prefix "$tmp/inst" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
fi
installed=$(cd "$tmp/inst" && find . ! -type d | sed 's|^\./||' | sort)
check "cmake --install installs the product and nothing else" test "$installed" = "$expected_files"
[ "$installed" = "$expected_files" ] || diff <(echo "$expected_files") <(echo "$installed")
check "installed helper links resolve to the installed ucfs" \
  test "$(readlink -f "$tmp/inst/sbin/mount.fuse.ucfs")" = "$(readlink -f "$tmp/inst/bin/ucfs")"

exit $fail
