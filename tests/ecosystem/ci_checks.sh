#!/usr/bin/env bash
# The 2026 stack judges the mounts, as CI runs it (after the test suite and the DeepSpeed 0.14.5 checks).
#
# usage: tests/ecosystem/ci_checks.sh UCFS_BIN
#
# Builds (or finds, cached under $UCFS_ECOSYSTEM_DIR) the Debian sid root with torch 2.14, transformers,
# accelerate, DeepSpeed 0.19.8, Lightning and PEFT (setup.sh), then:
#   - modern_views_test.py: every view of every fixture in tests/data/modern (written by DeepSpeed 0.19.8, HF
#     Trainer, accelerate, Lightning and PEFT on torch 2.14) against DeepSpeed 0.19.8's own converter and
#     zero_to_fp32, loaded by torch 2.14 (weights_only where DeepSpeed's own files load so);
#   - resume_checks.sh, when present: the trainers' own resume code through the mounts (its CI subset);
#   - autotp_resume_test.py: DeepSpeed 0.19.8 resumes its AutoTP checkpoints natively at a new D, T kept (CI subset);
#   - expert_resume_test.py: DeepSpeed 0.19.8 resumes its MoE and AutoEP checkpoints natively at a new D (EP kept) and
#     through its universal loader (AutoEP at a new EP too) (CI subset).
# A ucfs built with sanitizers writes its reports to $UCFS_SANITIZER_REPORTS (default: a fresh temp dir); any
# report fails the run. Exits 1 if any check failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ $# -eq 1 ] || { echo "usage: $0 UCFS_BIN" >&2; exit 2; }
ucfs=$(realpath "$1")

start=$SECONDS
"$here/setup.sh" || { echo "ecosystem ci_checks: setup.sh failed" >&2; exit 2; }
echo "ecosystem ci_checks: setup.sh took $((SECONDS - start)) s"

reports=${UCFS_SANITIZER_REPORTS:-$(mktemp -d "${TMPDIR:-/tmp}/ucfs_eco_sanitizer.XXXXXX")}
mkdir -p "$reports"
export ASAN_OPTIONS="log_path=$reports/ucfs:log_exe_name=1:abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="log_path=$reports/ucfs:log_exe_name=1:print_stacktrace=1:halt_on_error=1"

failed=0
run() {  # run NAME CMD...
  local name=$1 t0=$SECONDS
  shift
  echo "== ecosystem: $name"
  if ! "$@"; then failed=1; fi
  echo "ecosystem ci_checks: $name took $((SECONDS - t0)) s"
}
run "views over DeepSpeed 0.19.8 fixtures" /usr/bin/python3 "$here/modern_views_test.py" "$ucfs" \
  "$repo/tests/data/modern"
run "AutoTP resumed at a new D through the reshard view" /usr/bin/python3 "$here/autotp_resume_test.py" "$ucfs"
run "Expert parallelism resumed through the reshard and universal views" /usr/bin/python3 \
  "$here/expert_resume_test.py" "$ucfs"
if [ -x "$here/resume_checks.sh" ]; then
  run "the trainers' resume through the mounts" "$here/resume_checks.sh" "$ucfs"
fi

if compgen -G "$reports/*" >/dev/null; then
  echo "ecosystem ci_checks: sanitizer reports:"
  cat "$reports"/*
  failed=1
fi
exit $failed
