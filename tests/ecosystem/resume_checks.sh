#!/usr/bin/env bash
# The trainers' own resume code through ucfs mounts, at N < W and N > W ranks with the global batch kept.
#
# usage: tests/ecosystem/resume_checks.sh UCFS_BIN [--full] [--only SUBSTRING...] [--keep] [--list]
#
# Over private copies of the modern fixtures (tests/data/modern: written by DeepSpeed 0.19.8, HF Trainer 5.12,
# accelerate 1.14, Lightning 2.6 and PEFT 0.21 on torch 2.14), mounted on this host by UCFS_BIN and read by those
# libraries in the Debian sid root (tests/ecosystem/setup.sh, run.sh, harness/launch.py):
#   1. DeepSpeed engine.load_checkpoint(MNT) natively from `ucfs mount --world-size N` (plain-engine fixtures:
#      ZeRO-1/2/3, fp32/bf16/fp16, BF16_Optimizer);
#   2. DeepSpeed with "checkpoint": {"load_universal": true} from the universal view (what DeepSpeed 0.19.8's loader
#      itself restores wrongly at ZeRO-3 is said, and undone before the next steps);
#   3. HF Trainer train(resume_from_checkpoint=MNT/checkpoint-K) with output_dir = the run mounted
#      --world-size N --upper DIR, then its next checkpoint saved through the mount into DIR; and once with the run
#      indexed first (`ucfs index RUN`), the tag resumed from opened from its shared index (the daemon's log says so);
#   4. accelerate load_state(MNT/checkpoints/checkpoint_0);
#   5. Lightning fit(ckpt_path=MNT/lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt) (writable mount);
#   6. AutoModelForCausalLM.from_pretrained(MNT/checkpoint-K) of a run mounted read-only, against the consolidated
#      fp32 weights cast to the training dtype.
# Right after each load: every fp32 master weight and optimizer state bit for bit against the live values the
# fixture's MODERN.json recorded at save time, and the step; then the next losses against the saving run's within
# the tolerance DeepSpeed 0.14.5's load checks use at another world size (fp32 1e-5, bf16/fp16 1e-3,
# BF16_Optimizer 2e-3). The CI subset runs by default (each client at one N != W); --full runs every fixture, view
# and N (tests/ecosystem/resume/driver.py --list shows which). One line per check, then "N passed, M failed";
# exits 1 if any failed (the temp dir is then kept, with logs and a reproducer per failure). Needs root.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || { echo "usage: $0 UCFS_BIN [--full] [--only SUBSTRING...] [--keep] [--list]" >&2; exit 2; }
ucfs=$(realpath "$1")
shift
[ -x "$ucfs" ] || { echo "resume_checks: $ucfs is not executable" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "resume_checks: must run as root (FUSE mounts, run.sh)" >&2; exit 2; }
log=$(mktemp "${TMPDIR:-/tmp}/ucfs_resume_setup.XXXXXX")
if ! "$here/setup.sh" >"$log" 2>&1; then   # a no-op when the root is up to date
  cat "$log" >&2
  rm -f "$log"
  echo "resume_checks: setup.sh failed" >&2
  exit 2
fi
rm -f "$log"
exec /usr/bin/python3 "$here/resume/driver.py" "$ucfs" "$@"
