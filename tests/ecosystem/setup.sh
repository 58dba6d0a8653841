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
# A run whose stamp (the pinned versions below + this script's build recipe) matches the root's does nothing; any
# other builds the root afresh, replacing the old one only when every phase passed (tests/lib/sid_root.sh).
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

# ---- the root ----------------------------------------------------------------------------------------------------
TARGET=/opt/ucfs-ecosystem/site-packages   # inside the root: PYTHONPATH for DeepSpeed, Lightning, PEFT
NAME=ucfs-ecosystem
VAR=UCFS_ECOSYSTEM
BASE=${UCFS_ECOSYSTEM_DIR:-/var/cache/ucfs-ecosystem}
FORCE=${UCFS_ECOSYSTEM_FORCE:-0}
MIRROR=${UCFS_ECOSYSTEM_MIRROR:-}
STAMP_TEXT="recipe=$RECIPE suite=$SUITE
deb: ${DEB_PINNED[*]}
deb-other: ${DEB_OTHER[*]}
pip: ${PIP_PINNED[*]}
target: $TARGET"
# shellcheck source-path=SCRIPTDIR source=../lib/sid_root.sh
. "$(dirname "$0")/../lib/sid_root.sh"

sid_root_begin
mkdir -p "$CACHE/pip"
BUILD_ROOT_BINDS=("$CACHE/pip:/root/.cache/pip")
BUILD_ROOT_ENV=(SSL_CERT_FILE=/etc/ucfs-host-ca.crt PIP_CERT=/etc/ucfs-host-ca.crt
                REQUESTS_CA_BUNDLE=/etc/ucfs-host-ca.crt PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1)
sid_root_bootstrap
sid_root_apt DEB_PINNED DEB_OTHER

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

sid_root_install
