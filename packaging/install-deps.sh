#!/usr/bin/env bash
# Installs the Debian 12 packages ucfs needs to build, test and run. Idempotent:
# packages already present are left alone, so a second run costs one dpkg query.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format
  # llvm-symbolizer: function names and lines in sanitizer reports (the test preset)
  llvm
  # core library and tools
  libfuse3-dev fuse3 liblmdb-dev libspdlog-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libtorch-dev libgtest-dev libgmock-dev
  # the real torch.load, used by tests as the reference reader
  python3 python3-torch python3-numpy
  # the .deb (cpack -G DEB: dpkg-shlibdeps, and file to find the binaries), the
  # man page check (groff), mount(8)/umount(8) for the mount helper test
  dpkg-dev file groff-base mount
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
