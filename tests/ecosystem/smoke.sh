#!/usr/bin/env bash
# Proves the modern test environment works: runs, inside the root (run.sh), on 2 CPU ranks over gloo,
#   - check_collectives.py: the 16-bit collective shim against real 16-bit arithmetic, bit for bit;
#   - smoke_deepspeed.py: DeepSpeed 0.19.8 ZeRO-2 bf16 and ZeRO-3 fp32 train, save_checkpoint, and load_checkpoint in
#     a fresh launch restores params, fp32 masters, Adam state and the next step bit for bit;
#   - smoke_lightning.py: Lightning's DeepSpeedStrategy (the CPU subclass) trains ZeRO-2 bf16, saves, resumes;
#   - smoke_hf.py: transformers' Trainer with DeepSpeed ZeRO-3 bf16 trains, saves, resumes;
#   - when a ucfs binary is there (UCFS_BIN, default build/release/ucfs): a ucfs mount made on the host under /tmp
#     is read with the root's torch.
# Prints one line per check and 'N passed, N failed'; exits non-zero if any failed. Needs setup.sh to have run.
#
#   tests/ecosystem/smoke.sh [WORKDIR]      # WORKDIR (default: a new dir under /tmp) receives the checkpoints/logs
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${1:-$(mktemp -d /tmp/ucfs-ecosystem-smoke.XXXXXX)}
mkdir -p "$WORK"
H=$HERE/harness
passed=0 failed=0

check() {   # check NAME LOG -- CMD...: runs CMD in the root; its [tag] lines are shown, the rest goes to LOG
  local name=$1 log=$WORK/$2.log; shift 3
  local t0=$SECONDS
  if "$HERE/run.sh" python3 "$H/launch.py" -n 2 --timeout 600 -- "$@" >>"$log" 2>&1; then
    passed=$((passed + 1)); echo "PASS $name ($((SECONDS - t0))s)"
  else
    failed=$((failed + 1)); echo "FAIL $name ($((SECONDS - t0))s); last lines of $log:"; tail -n 15 "$log" | sed 's/^/    /'
  fi
  grep -h '^\[\(collectives\|smoke\|lightning\|hf\)\]' "$log" | tail -n 2 | sed 's/^/    /'
}

check "16-bit collectives over gloo" collectives -- "$H/check_collectives.py"
for cfg in "2 bf16" "3 fp32"; do
  set -- $cfg
  d=$WORK/ds-z$1-$2; rm -rf "$d"; mkdir -p "$d"
  check "DeepSpeed ZeRO-$1 $2: train + save_checkpoint" ds-z$1-$2 -- "$H/smoke_deepspeed.py" --stage "$1" --dtype "$2" --dir "$d" --phase save
  check "DeepSpeed ZeRO-$1 $2: load_checkpoint in a fresh launch" ds-z$1-$2 -- "$H/smoke_deepspeed.py" --stage "$1" --dtype "$2" --dir "$d" --phase load
done
d=$WORK/lightning; rm -rf "$d"; mkdir -p "$d"
check "Lightning DeepSpeedStrategy (CPU) ZeRO-2 bf16: fit + save" lightning -- "$H/smoke_lightning.py" --dir "$d" --phase save
check "Lightning DeepSpeedStrategy (CPU) ZeRO-2 bf16: resume" lightning -- "$H/smoke_lightning.py" --dir "$d" --phase load
d=$WORK/hf; rm -rf "$d"; mkdir -p "$d"
check "HF Trainer + DeepSpeed ZeRO-3 bf16: train + save" hf -- "$H/smoke_hf.py" --dir "$d" --phase save
check "HF Trainer + DeepSpeed ZeRO-3 bf16: resume" hf -- "$H/smoke_hf.py" --dir "$d" --phase load

UCFS_BIN=${UCFS_BIN:-$HERE/../../build/release/ucfs}
if [ -x "$UCFS_BIN" ]; then
  mnt=$(mktemp -d /tmp/ucfs-ecosystem-mnt.XXXXXX)
  fixture=$HERE/../data/fixtures/z3_tricky_fp32_ws4/checkpoint
  t0=$SECONDS
  if "$UCFS_BIN" mount "$fixture" "$mnt" >"$WORK/fuse.log" 2>&1 &&
     UCFS_ECOSYSTEM_MOUNTS=$mnt "$HERE/run.sh" python3 -c "
import sys, torch
t = torch.load(sys.argv[1] + '/global_step4_universal/zero/embed.weight/fp32.pt')
print('[fuse] read', sys.argv[1], 'from the root:', t.dtype, tuple(t.shape))" "$mnt" >>"$WORK/fuse.log" 2>&1; then
    passed=$((passed + 1)); echo "PASS ucfs mount on the host, read in the root ($((SECONDS - t0))s)"
  else
    failed=$((failed + 1)); echo "FAIL ucfs mount on the host, read in the root; last lines of $WORK/fuse.log:"
    tail -n 15 "$WORK/fuse.log" | sed 's/^/    /'
  fi
  grep -h '^\[fuse\]' "$WORK/fuse.log" | sed 's/^/    /'
  "$UCFS_BIN" umount "$mnt" >/dev/null 2>&1; rmdir "$mnt" 2>/dev/null
else
  echo "SKIP ucfs mount check: no $UCFS_BIN (build ucfs first)"
fi

echo "logs and checkpoints: $WORK"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
