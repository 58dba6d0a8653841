#!/usr/bin/env bash
# Let real DeepSpeed 0.14.5 judge the universal view of `ucfs mount`.
# Not run by CI (CI has no DeepSpeed); see README.md beside this file for the one-time setup.
#
# usage: UCFS_BIN=/path/to/ucfs tests/deepspeed/run_load_checks.sh [FIXTURE...]
#
#   FIXTURE   a fixture name under $FIXTURES_DIR (e.g. z3_fp32_ws2) or a path to a fixture dir;
#             default: every fixture dir (with an ORACLE.json) in $FIXTURES_DIR.
#
# For every fixture and every world size N in 1..5 that divides the fixture's global batch
# (ORACLE.json ds_config.train_batch_size) and differs from the fixture's own world size, it:
#   1. mounts the fixture's checkpoint dir:  "$UCFS_BIN" mount -f FIXTURE/checkpoint MNT &
#   2. waits (up to $MOUNT_WAIT s, default 10) for MNT/latest_universal,
#   3. runs load_check.py --mode universal --world-size N on MNT
#      (--universal-loader fixed for z3_tricky_fp32_ws4, stock for the others),
#   4. unmounts with `fusermount3 -u MNT`,
# then prints a summary table and exits 1 if any check failed (2 for usage/setup errors).
#
# Nothing is ever written into the fixtures: mount points and logs live in a fresh temp dir, and the
# fixture's checkpoint listing (names, sizes, mtimes) is compared before and after each fixture, so the
# fixtures may be a read-only copy (e.g. FIXTURES_DIR=/work/shared/fixtures).
#
# environment:
#   UCFS_BIN          the ucfs binary (required)
#   FIXTURES_DIR      default: tests/data/fixtures of this repository
#   ORACLE_DIR        the oracle scripts (load_check.py ...); default: ../shared/oracle beside the repository
#   ORACLE_WORK       where setup_env.sh put DeepSpeed + hjson; default: $HOME/ucfs-oracle
#   WORLD_SIZES       restrict N to these values (space separated; still filtered by the rules above)
#   UNIVERSAL_LOADER  force stock|fixed for every fixture
#   MOUNT_WAIT        seconds to wait for MNT/latest_universal (default 10)
#   MODE              universal (default) or native (mounts with --world-size N)
#   CHECK_TIMEOUT     load_check.py --timeout (default 600)
#   KEEP_LOGS=1       keep the work dir (logs) even when everything passed
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
PY=/usr/bin/python3
FIXTURES_DIR=${FIXTURES_DIR:-$repo/tests/data/fixtures}
ORACLE_DIR=${ORACLE_DIR:-$(cd "$repo/.." && pwd)/shared/oracle}
export ORACLE_WORK=${ORACLE_WORK:-$HOME/ucfs-oracle}
MOUNT_WAIT=${MOUNT_WAIT:-10}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-600}
# MODE=universal (default): the universal view, load_universal. MODE=native:
# `ucfs mount --world-size N`, a plain load_checkpoint at N ranks.
MODE=${MODE:-universal}
if [ "$MODE" = native ]; then ready_file=latest; else ready_file=latest_universal; fi

die() { echo "run_load_checks: $*" >&2; exit 2; }

# ---------------------------------------------------------------- preflight
[ -n "${UCFS_BIN:-}" ] || die "set UCFS_BIN to the ucfs binary"
[ -x "$UCFS_BIN" ] || die "UCFS_BIN=$UCFS_BIN is not an executable file"
UCFS_BIN=$(cd "$(dirname "$UCFS_BIN")" && pwd)/$(basename "$UCFS_BIN")
[ -f "$ORACLE_DIR/load_check.py" ] || die "no load_check.py in ORACLE_DIR=$ORACLE_DIR"
command -v fusermount3 >/dev/null || die "fusermount3 not found (apt-get install fuse3)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"
[ -x "$PY" ] || die "$PY not found"
[ -d "$ORACLE_WORK/deepspeed-src/deepspeed" ] && [ -d "$ORACLE_WORK/pydeps/hjson" ] ||
  die "DeepSpeed is not set up in ORACLE_WORK=$ORACLE_WORK (run setup_env.sh, see $here/README.md)"
(cd / && DS_ACCELERATOR=cpu PYTHONPATH="$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps" \
  "$PY" -c "import torch, deepspeed" >/dev/null 2>&1) ||
  die "'import torch, deepspeed' fails under $PY with PYTHONPATH=$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps"

fixtures=()
if [ $# -gt 0 ]; then
  for f in "$@"; do
    case $f in */*) d=$f ;; *) d=$FIXTURES_DIR/$f ;; esac
    [ -f "$d/ORACLE.json" ] && [ -d "$d/checkpoint" ] || die "$f: not a fixture dir (no ORACLE.json or checkpoint/)"
    fixtures+=("$(cd "$d" && pwd)")
  done
else
  for d in "$FIXTURES_DIR"/*/; do
    [ -f "$d/ORACLE.json" ] && [ -d "$d/checkpoint" ] && fixtures+=("$(cd "$d" && pwd)")
  done
fi
[ ${#fixtures[@]} -gt 0 ] || die "no fixtures found in $FIXTURES_DIR"

work=$(mktemp -d "${TMPDIR:-/tmp}/ucfs_load_checks.XXXXXX") || die "mktemp failed"
for fx in "${fixtures[@]}"; do
  case "$work/" in "$fx"/*) die "the work dir $work is inside the fixture $fx" ;; esac
done

# ---------------------------------------------------------------- mount handling
cur_pid=""   # the running `ucfs mount -f`
cur_mnt=""
cur_log=/dev/null
interrupted=0

is_mounted() { mountpoint -q "$1" 2>/dev/null; }

unmount_current() {  # unmount $cur_mnt and reap $cur_pid; prints problems to stderr, returns 1 on any
  local rc=0 _
  if [ -n "$cur_mnt" ] && is_mounted "$cur_mnt"; then
    for _ in 1 2 3 4 5; do
      fusermount3 -u "$cur_mnt" 2>>"$cur_log" && break
      sleep 1
    done
    if is_mounted "$cur_mnt"; then
      echo "  fusermount3 -u $cur_mnt failed 5 times; lazy unmount" >&2
      fusermount3 -uz "$cur_mnt" 2>>"$cur_log" || umount -l "$cur_mnt" 2>>"$cur_log"
      rc=1
    fi
  fi
  if [ -n "$cur_pid" ]; then
    for _ in $(seq 1 100); do kill -0 "$cur_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$cur_pid" 2>/dev/null; then
      echo "  ucfs (pid $cur_pid) still running 10 s after the unmount; sending SIGTERM" >&2
      kill -TERM "$cur_pid" 2>/dev/null
      for _ in $(seq 1 50); do kill -0 "$cur_pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$cur_pid" 2>/dev/null && kill -KILL "$cur_pid" 2>/dev/null
      rc=1
    fi
    wait "$cur_pid" 2>/dev/null
  fi
  cur_pid=""
  cur_mnt=""
  return $rc
}

safe_rm() {  # rm -rf $1, but never through a mount point still attached below it
  if awk -v p="$1" '$2 == p || index($2, p "/") == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
    echo "run_load_checks: not removing $1: something is still mounted below it" >&2
    return 1
  fi
  rm -rf --one-file-system "$1"
}

cleanup() {
  unmount_current 2>/dev/null
  if [ "${KEEP_LOGS:-0}" != 1 ] && [ "${any_fail:-1}" = 0 ] && [ "$interrupted" = 0 ]; then
    safe_rm "$work"
  fi
}
trap cleanup EXIT
trap 'interrupted=1; echo "run_load_checks: interrupted; logs: $work" >&2; exit 130' INT TERM

listing() {  # names, sizes, mtimes and modes of everything under $1 (to prove nothing was written)
  (cd "$1" && find . -printf '%p %s %T@ %m %y\n' | LC_ALL=C sort)
}

# ---------------------------------------------------------------- the checks
rows=()
any_fail=0
total0=$(date +%s.%N)

for fx in "${fixtures[@]}"; do
  name=$(basename "$fx")
  read -r W GB MODEL < <("$PY" -c '
import json, sys
o = json.load(open(sys.argv[1]))
print(o["world_size"], o["ds_config"]["train_batch_size"], o.get("harness", {}).get("model", "tiny"))' "$fx/ORACLE.json") ||
    { rows+=("$name|-|FAIL|0.0|cannot read ORACLE.json"); any_fail=1; continue; }
  if [ -n "${UNIVERSAL_LOADER:-}" ]; then loader=$UNIVERSAL_LOADER
  elif [ "$name" = z3_tricky_fp32_ws4 ] || [ "$MODEL" = tricky ]; then loader=fixed
  else loader=stock; fi

  Ns=()
  for n in ${WORLD_SIZES:-1 2 3 4 5}; do
    [ "$n" -ge 1 ] && [ "$n" -le 5 ] && [ $((GB % n)) -eq 0 ] && [ "$n" -ne "$W" ] && Ns+=("$n")
  done
  echo "== $name: saved at world size $W, global batch $GB, loader $loader, N in {${Ns[*]}}"
  before=$(listing "$fx/checkpoint")

  for N in "${Ns[@]}"; do
    run=$work/${name}_N$N
    mkdir -p "$run/mnt"
    cur_log=$run/ucfs.log
    t0=$(date +%s.%N)
    if [ "$MODE" = native ]; then
      "$UCFS_BIN" mount -f "$fx/checkpoint" "$run/mnt" --world-size "$N" >"$cur_log" 2>&1 &
    else
      "$UCFS_BIN" mount -f "$fx/checkpoint" "$run/mnt" >"$cur_log" 2>&1 &
    fi
    cur_pid=$!
    cur_mnt=$run/mnt
    result="" detail=""
    ticks=$(awk -v s="$MOUNT_WAIT" 'BEGIN { printf "%d", s * 10 }')
    until [ -e "$run/mnt/$ready_file" ]; do
      if ! kill -0 "$cur_pid" 2>/dev/null; then
        wait "$cur_pid"; rc=$?
        cur_pid=""
        result=FAIL detail="ucfs mount exited (rc=$rc) before $run/mnt/$ready_file appeared: $(tail -n 1 "$cur_log")"
        break
      fi
      if [ "$ticks" -le 0 ]; then
        result=FAIL detail="$run/mnt/$ready_file did not appear within ${MOUNT_WAIT} s"
        break
      fi
      sleep 0.1
      ticks=$((ticks - 1))
    done
    if [ -z "$result" ]; then
      "$PY" "$ORACLE_DIR/load_check.py" --fixture "$fx" --ckpt "$run/mnt" --mode "$MODE" --world-size "$N" \
        --universal-loader "$loader" --logdir "$run/lc" --timeout "$CHECK_TIMEOUT" >"$run/load_check.log" 2>&1
      rc=$?
      last=$(grep -E '^(PASS|FAIL) ' "$run/load_check.log" | tail -n 1)
      if [ $rc -eq 0 ] && [ "${last%% *}" = PASS ]; then
        result=PASS detail=${last#*:: }
      else
        result=FAIL
        detail=${last:-"load_check.py exited $rc without a PASS/FAIL line: $(tail -n 1 "$run/load_check.log")"}
        detail=${detail#*:: }
      fi
    fi
    if ! unmount_current 2>>"$run/unmount.err"; then
      [ "$result" = PASS ] && result=FAIL
      detail="$detail; unmount problem: $(tr '\n' ' ' <"$run/unmount.err")"
    fi
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$result" = PASS ]; then
      safe_rm "$run"
    else
      any_fail=1
      detail="$detail (logs: $run)"
    fi
    echo "   $result $name N=$N ${secs}s :: $detail"
    rows+=("$name|$N|$result|$secs|$detail")
  done

  after=$(listing "$fx/checkpoint")
  if [ "$before" != "$after" ]; then
    any_fail=1
    diff <(echo "$before") <(echo "$after") >"$work/${name}_modified.diff"
    rows+=("$name|-|FAIL|0.0|the fixture's checkpoint dir changed during the checks (see $work/${name}_modified.diff)")
    echo "   FAIL $name: the fixture's checkpoint dir changed during the checks"
  fi
done

# ---------------------------------------------------------------- summary
total=$(awk -v a="$total0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
npass=0 nfail=0
echo
printf '%-22s %3s  %-4s %8s  %s\n' fixture N result seconds detail
printf '%-22s %3s  %-4s %8s  %s\n' ---------------------- --- ---- -------- ------
for r in "${rows[@]}"; do
  IFS='|' read -r f n res s d <<<"$r"
  printf '%-22s %3s  %-4s %8s  %s\n' "$f" "$n" "$res" "$s" "$d"
  if [ "$res" = PASS ]; then npass=$((npass + 1)); else nfail=$((nfail + 1)); fi
done
echo
echo "$npass passed, $nfail failed, ${total} s in all (ucfs: $UCFS_BIN; fixtures: ${#fixtures[@]})"
if [ $any_fail -ne 0 ] || [ "${KEEP_LOGS:-0}" = 1 ]; then echo "logs: $work"; fi
[ ${#rows[@]} -gt 0 ] || { echo "run_load_checks: no checks were run" >&2; any_fail=1; }
exit $any_fail
