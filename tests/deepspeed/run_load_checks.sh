#!/usr/bin/env bash
# Let real DeepSpeed 0.14.5 judge the universal view of `ucfs mount`.
# CI runs it (.ci/run) after the test suite; see README.md beside this file for the one-time setup.
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
# MODE=native does the same with `ucfs mount -f --world-size N` (waiting for MNT/latest) and a plain
# load_check.py --mode native --world-size N.
#
# MODE=save checks the writable view (`--upper DIR`): for every fixture and N as in native mode it
#   1. mounts  "$UCFS_BIN" mount -f --world-size N --upper DIR --log-file LOG FIXTURE/checkpoint MNT &
#      (DIR a fresh empty dir in the temp work dir) and waits for MNT/latest              [column mount]
#   2. runs load_check.py --mode native --world-size N on MNT                              [native]
#   3. runs save_worker.py (beside this file) at N ranks through $ORACLE_DIR/launch.py: it builds the
#      fixture's model/optimizer/ds_config as lc_worker.py does in native mode, engine.load_checkpoint(MNT),
#      then at once, without training, engine.save_checkpoint(MNT, tag="resaved_wsN"): DeepSpeed rewrites
#      MNT/latest in place and writes MNT/resaved_wsN/ through the mount; for ZeRO-1/2 checkpoints
#      compare_saved.py then finds what it saved equal to what the view shows at N (but ds_config) [save]
#   4. unmounts with `"$UCFS_BIN" umount MNT` and waits for the ucfs process to exit (its status must be 0)
#                                                                                          [umount]
#      checks that the fixture's checkpoint listing is unchanged                           [fixture]
#      checks that DIR/latest names resaved_wsN and DIR/resaved_wsN/ holds the N optim-state and N
#      model-state files of ranks 0..N-1 (at ZeRO stages 1 and 2 one mp_rank_00_model_states.pt),
#      all readable by their owner                                                         [upper]
#   5. runs load_check.py --ckpt DIR --mode native --world-size N (no --tag: DIR/latest is followed), so DIR
#      alone must be a DeepSpeed checkpoint with the fixture's state; the detail notes whether its losses are
#      bit-identical to step 2's                                                           [reload]
#   6. mounts DIR read-only at the fixture's own world size W (`"$UCFS_BIN" mount -f --world-size W DIR MNT2`),
#      runs load_check.py --mode native --world-size W on MNT2, unmounts, and checks that DIR did not change
#                                                                                          [hop]
# A row passes when every step passes; steps after a failed mount, and steps 5-6 after a failed save or upper
# check, are skipped ("-"). The table has one column per step.
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
#   MODE              universal (default), native (mounts with --world-size N) or save (see above)
#   CHECK_TIMEOUT     load_check.py --timeout (default 600)
#   VARIANT           options of tests/tools/torch_variants.py (e.g. "--torch 2.7", "--legacy"): mount each
#                     fixture's checkpoint re-written as that writer would write it, instead of the fixture's own
#   KEEP_LOGS=1       keep the work dir (logs) even when everything passed (MODE=save: also every
#                     passed row's run dir, with its upper DIR)
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
# `ucfs mount --world-size N`, a plain load_checkpoint at N ranks. MODE=save: the writable
# `--world-size N --upper DIR` view, load + save_checkpoint through it, then DIR on its own.
MODE=${MODE:-universal}
if [ "$MODE" = native ] || [ "$MODE" = save ]; then ready_file=latest; else ready_file=latest_universal; fi

die() { echo "run_load_checks: $*" >&2; exit 2; }
case $MODE in universal | native | save) ;; *) die "MODE must be universal, native or save (not '$MODE')" ;; esac

# ---------------------------------------------------------------- preflight
[ -n "${UCFS_BIN:-}" ] || die "set UCFS_BIN to the ucfs binary"
[ -x "$UCFS_BIN" ] || die "UCFS_BIN=$UCFS_BIN is not an executable file"
UCFS_BIN=$(cd "$(dirname "$UCFS_BIN")" && pwd)/$(basename "$UCFS_BIN")
[ -f "$ORACLE_DIR/load_check.py" ] || die "no load_check.py in ORACLE_DIR=$ORACLE_DIR"
if [ "$MODE" = save ]; then
  [ -f "$ORACLE_DIR/launch.py" ] || die "no launch.py in ORACLE_DIR=$ORACLE_DIR"
  [ -f "$here/save_worker.py" ] || die "no save_worker.py beside this script"
fi
command -v fusermount3 >/dev/null || die "fusermount3 not found (apt-get install fuse3)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"
[ -x "$PY" ] || die "$PY not found"
[ -d "$ORACLE_WORK/deepspeed-src/deepspeed" ] && [ -d "$ORACLE_WORK/pydeps/hjson" ] ||
  die "DeepSpeed is not set up in ORACLE_WORK=$ORACLE_WORK (run setup_env.sh, see $here/README.md)"
# (5 s: ci_checks.sh, which runs this script some twenty times after setup_env.sh has imported both, skips it)
if [ "${DS_IMPORT_CHECKED:-0}" != 1 ]; then
  (cd / && DS_ACCELERATOR=cpu PYTHONPATH="$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps" \
    "$PY" -c "import torch, deepspeed" >/dev/null 2>&1) ||
    die "'import torch, deepspeed' fails under $PY with PYTHONPATH=$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps"
fi

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

# (also a FUSE mount whose server died: mountpoint(1) cannot stat it, /proc/self/mounts still lists it)
is_mounted() {
  mountpoint -q "$1" 2>/dev/null || awk -v p="$1" '$2 == p { f = 1 } END { exit !f }' /proc/self/mounts
}

do_umount() {  # MODE=save unmounts with ucfs's own `umount`, the others with fusermount3 -u
  if [ "$MODE" = save ]; then "$UCFS_BIN" umount "$1"; else fusermount3 -u "$1"; fi
}
last_ucfs_rc=""  # exit status of the last reaped `ucfs mount -f`

unmount_current() {  # unmount $cur_mnt and reap $cur_pid; prints problems to stderr, returns 1 on any
  local rc=0 _
  if [ -n "$cur_mnt" ] && is_mounted "$cur_mnt"; then
    for _ in 1 2 3 4 5; do
      do_umount "$cur_mnt" 2>>"$cur_log" && break
      sleep 1
    done
    if is_mounted "$cur_mnt"; then
      echo "  unmounting $cur_mnt failed 5 times; lazy unmount" >&2
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
    last_ucfs_rc=$?
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

# ---------------------------------------------------------------- MODE=save
# mount_wait MNT STDERR_FILE UCFS_MOUNT_ARGS...: start `ucfs mount -f ARGS MNT &` (cur_pid, cur_mnt, cur_log) and
# wait for MNT/latest; on failure set mount_msg and return 1 (not to be run in a subshell: it sets cur_pid)
mount_wait() {
  local mnt=$1 err=$2 ticks rc
  shift 2
  cur_log=$err
  last_ucfs_rc=""
  mount_msg=""
  "$UCFS_BIN" mount -f "$@" "$mnt" >"$err" 2>&1 &
  cur_pid=$!
  cur_mnt=$mnt
  ticks=$(awk -v s="$MOUNT_WAIT" 'BEGIN { printf "%d", s * 10 }')
  until [ -e "$mnt/latest" ]; do
    if ! kill -0 "$cur_pid" 2>/dev/null; then
      wait "$cur_pid"; rc=$?
      cur_pid=""
      mount_msg="ucfs mount exited (rc=$rc) before $mnt/latest appeared: $(tail -n 1 "$err")"
      return 1
    fi
    if [ "$ticks" -le 0 ]; then
      mount_msg="$mnt/latest did not appear within ${MOUNT_WAIT} s"
      return 1
    fi
    sleep 0.1
    ticks=$((ticks - 1))
  done
}

# run_lc LOG LOAD_CHECK_ARGS...: run load_check.py; lc_detail = its PASS/FAIL detail; returns 0 on PASS.
# A DeepSpeed rank killed by a signal (torch 1.13's gloo on a loaded 2-core machine now and then aborts
# with "terminate called without an active exception" mid-run) gets one more try, said in the detail: the
# mount serves the same bytes both times, so a wrong byte fails the retry too.
run_lc() {
  local log=$1 rc last try retried=""
  shift
  for try in 1 2; do
    "$PY" "$ORACLE_DIR/load_check.py" "$@" --timeout "$CHECK_TIMEOUT" >"$log" 2>&1
    rc=$?
    last=$(grep -E '^(PASS|FAIL) ' "$log" | tail -n 1)
    if [ $rc -eq 0 ] && [ "${last%% *}" = PASS ]; then
      lc_detail="${last#*:: }$retried"
      return 0
    fi
    lc_detail=${last:-"load_check.py exited $rc without a PASS/FAIL line: $(tail -n 1 "$log")"}
    lc_detail=${lc_detail#*:: }
    grep -q "ranks did not finish cleanly: .*'rc=-" <<<"$lc_detail" || break
    [ $try -eq 1 ] && cp "$log" "$log.crashed" && retried=" (retried once: a rank crashed the first time: $lc_detail)"
  done
  lc_detail="$lc_detail$retried"
  return 1
}

lc_short() {  # "tensors 12/12 exact, lp ..., loss maxdiff 3.0e-08 (tol 1e-05)" -> "12/12 exact, maxdiff 3.0e-08"
  sed -E 's/^tensors ([0-9]+\/[0-9]+) exact.*loss maxdiff ([^ ]+).*/\1 exact, maxdiff \2/' <<<"$1"
}

same_losses() {  # load_check dumps $1, $2 (rank0.json): are eval/continuation losses bit-identical?
  "$PY" - "$1/rank0.json" "$2/rank0.json" <<'PYEOF' 2>/dev/null
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ("eval_loss_at_load", "continuation_losses", "eval_loss_after_continuation")
diffs = [k for k in keys if a.get(k) != b.get(k)]
print("bit-identical" if not diffs else "differ in " + ",".join(diffs))
PYEOF
}

# save_check: the six steps for fixture $fx ($name, world size $W) at $N; sets result, detail, steps
# (one PASS/FAIL/- per column: mount native save umount fixture upper reload hop)
save_check() {
  local upper=$run/upper tag=resaved_ws$N msg rc e f r latest nopt nmod missing notes=() fails=() seen
  local s_mount=- s_native=- s_save=- s_umount=- s_fixture=- s_upper=- s_reload=- s_hop=-
  local d_native="" d_reload="" d_hop="" up_before up_after
  mkdir -p "$run/mnt" "$run/mnt2" "$upper" "$run/save/out"

  # 1. the writable view at N
  if mount_wait "$run/mnt" "$run/ucfs.stderr" --world-size "$N" --upper "$upper" \
       --log-file "$run/ucfs.log" "$src"; then
    s_mount=PASS
  else
    s_mount=FAIL
    fails+=("mount: $mount_msg")
  fi

  if [ $s_mount = PASS ]; then
    # 2. native load through the view
    if run_lc "$run/native.log" --fixture "$fx" --ckpt "$run/mnt" --mode native --world-size "$N" \
         --logdir "$run/lc_native"; then
      s_native=PASS d_native=$(lc_short "$lc_detail")
    else
      s_native=FAIL
      fails+=("native: $lc_detail")
    fi

    # 3. load + save_checkpoint through the view
    # shellcheck disable=SC2097,SC2098  # ORACLE_DIR is meant for save_worker.py (the env), $ORACLE_DIR for us
    (cd "$run/save" && ORACLE_DIR="$ORACLE_DIR" PYTHONDONTWRITEBYTECODE=1 \
      PYTHONPATH="${PYTHONPATH:-$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps}" \
      "$PY" "$ORACLE_DIR/launch.py" "$N" "$run/save" --worker "$here/save_worker.py" --timeout "$CHECK_TIMEOUT" \
      -- --fixture "$fx" --ckpt "$run/mnt" --tag "$tag" --out "$run/save/out") >"$run/save.log" 2>&1
    rc=$?
    msg=""
    for e in "$run"/save/out/rank*.err; do
      [ -f "$e" ] || continue
      msg=$("$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))
print("rank %s raised in %s: %s: %s" % (e["rank"], e["stage"], e["type"], " ".join(e["message"].split())[:400]))' "$e")
      break
    done
    if [ -z "$msg" ]; then
      missing=""
      for ((r = 0; r < N; r++)); do [ -f "$run/save/out/rank$r.json" ] || missing="$missing $r"; done
      if [ $rc -ne 0 ]; then msg="launch.py exited $rc: $(tail -n 1 "$run/save.log")"
      elif [ -n "$missing" ]; then msg="no result from rank(s)$missing"; fi
    fi
    # ZeRO-1/2: what DeepSpeed saved at N is what the view showed at N (but ds_config).
    if [ -z "$msg" ] && [ "$STAGE" -lt 3 ]; then
      same=$(cd / && DS_ACCELERATOR=cpu PYTHONPATH="${PYTHONPATH:-$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps}" \
        "$PY" "$here/compare_saved.py" "$run/mnt/$(cat "$src/latest")" "$run/mnt/$tag" 2>"$run/compare.err" | tail -n 1)
      [ "$same" = same ] || msg="DeepSpeed's own save at N differs from the view: ${same:-$(tail -n 1 "$run/compare.err")}"
    fi
    if [ -z "$msg" ]; then s_save=PASS; else s_save=FAIL; fails+=("save: $msg (rank logs: $run/save)"); fi
  fi

  # 4. unmount, the fixture, the upper dir
  if [ $s_mount != - ]; then
    if unmount_current 2>>"$run/unmount.err" && [ "${last_ucfs_rc:-0}" = 0 ]; then
      s_umount=PASS
    else
      s_umount=FAIL
      fails+=("umount: ucfs exit status ${last_ucfs_rc:-?}; $(tr '\n' ' ' <"$run/unmount.err") log: $(tail -n 2 "$run/ucfs.log" "$run/ucfs.stderr" 2>/dev/null | tr '\n' ' ')")
    fi
  fi
  if [ "$(listing "$src")" = "$before" ]; then
    s_fixture=PASS
  else
    s_fixture=FAIL
    diff <(echo "$before") <(listing "$src") >"$run/fixture_modified.diff"
    fails+=("fixture: the fixture's checkpoint dir changed (see $run/fixture_modified.diff)")
  fi
  if [ $s_mount = PASS ]; then
    listing "$upper" >"$run/upper.listing" 2>&1
    msg=""
    latest=$(cat "$upper/latest" 2>/dev/null) || msg="no readable $upper/latest"
    if [ -z "$msg" ] && [ "$(tr -d '[:space:]' <<<"$latest")" != "$tag" ]; then msg="DIR/latest holds '$latest', not $tag"; fi
    if [ -z "$msg" ]; then
      nopt=$(find "$upper/$tag" -maxdepth 1 -name '*zero_pp_rank_*_mp_rank_00_optim_states.pt' 2>/dev/null | wc -l)
      # ZeRO-3 saves model states per rank, stages 1 and 2 once (mp_rank_00_model_states.pt).
      if [ "$STAGE" -lt 3 ]; then want_mod=1; else want_mod=$N; fi
      nmod=$(find "$upper/$tag" -maxdepth 1 -name '*mp_rank_00_model_states.pt' 2>/dev/null | wc -l)
      missing=""
      for ((r = 0; r < N; r++)); do
        seen=$(find "$upper/$tag" -maxdepth 1 -name "*zero_pp_rank_${r}_mp_rank_00_optim_states.pt" 2>/dev/null | wc -l)
        [ "$seen" = 1 ] || missing="$missing optim$r"
        [ "$STAGE" -lt 3 ] || [ -f "$upper/$tag/zero_pp_rank_${r}_mp_rank_00_model_states.pt" ] || missing="$missing model$r"
      done
      [ "$STAGE" -ge 3 ] || [ -f "$upper/$tag/mp_rank_00_model_states.pt" ] || missing="$missing mp_rank_00_model_states.pt"
      if [ "$nopt" != "$N" ] || [ "$nmod" != "$want_mod" ] || [ -n "$missing" ]; then
        msg="DIR/$tag holds $nopt optim-state and $nmod model-state files (want $N and $want_mod)${missing:+; missing:$missing}"
      fi
    fi
    # A saved checkpoint others cannot read is broken even if root can.
    f=$(cd "$upper" && find . -type f ! -perm -u=r -printf '%P(%m) ' | LC_ALL=C sort)
    [ -n "$msg" ] || [ -z "$f" ] || msg="DIR files without owner read permission: $f"
    if [ -z "$msg" ]; then s_upper=PASS; else s_upper=FAIL; fails+=("upper: $msg (see $run/upper.listing)"); fi
    f=$(cd "$upper" && find . -name '.wh.*' | LC_ALL=C sort | tr '\n' ' ')
    [ -z "$f" ] || notes+=("whiteouts in DIR: $f")
  fi

  if [ $s_save = PASS ] && [ $s_upper = PASS ]; then
    # 5. DIR alone, natively at N, following DIR/latest
    if run_lc "$run/reload.log" --fixture "$fx" --ckpt "$upper" --mode native --world-size "$N" \
         --logdir "$run/lc_reload"; then
      s_reload=PASS d_reload=$(lc_short "$lc_detail")
      [ $s_native = PASS ] &&
        d_reload="$d_reload, losses vs native: $(same_losses "$run/lc_native/dump" "$run/lc_reload/dump")"
    else
      s_reload=FAIL
      fails+=("reload: $lc_detail")
    fi

    # 6. DIR re-sharded back to the fixture's own world size, read-only
    up_before=$(listing "$upper")
    if mount_wait "$run/mnt2" "$run/ucfs_hop.stderr" --world-size "$W" --log-file "$run/ucfs_hop.log" \
         "$upper"; then
      if run_lc "$run/hop.log" --fixture "$fx" --ckpt "$run/mnt2" --mode native --world-size "$W" \
           --logdir "$run/lc_hop"; then
        s_hop=PASS d_hop=$(lc_short "$lc_detail")
      else
        s_hop=FAIL
        fails+=("hop: $lc_detail")
      fi
    else
      s_hop=FAIL
      fails+=("hop: $mount_msg")
    fi
    if ! unmount_current 2>>"$run/unmount_hop.err" || [ "${last_ucfs_rc:-0}" != 0 ]; then
      s_hop=FAIL
      fails+=("hop: unmount problem (ucfs exit status ${last_ucfs_rc:-?}): $(tr '\n' ' ' <"$run/unmount_hop.err")")
    fi
    up_after=$(listing "$upper")
    if [ "$up_before" != "$up_after" ]; then
      s_hop=FAIL
      diff <(echo "$up_before") <(echo "$up_after") >"$run/upper_modified.diff"
      fails+=("hop: DIR changed under the read-only mount (see $run/upper_modified.diff)")
    fi
  fi

  steps="$s_mount $s_native $s_save $s_umount $s_fixture $s_upper $s_reload $s_hop"
  if [ ${#fails[@]} -eq 0 ] && [[ " $steps " != *" - "* ]]; then
    result=PASS
    detail="native $d_native; reload $d_reload; hop@$W $d_hop"
  else
    result=FAIL
    detail=$(printf '%s; ' "${fails[@]}")
    detail=${detail%; }
  fi
  [ ${#notes[@]} -eq 0 ] || detail="$detail; NOTE $(printf '%s; ' "${notes[@]% }")"
  detail=${detail%; }
}

# ---------------------------------------------------------------- the checks
rows=()
any_fail=0
total0=$(date +%s.%N)

for fx in "${fixtures[@]}"; do
  name=$(basename "$fx")
  read -r W GB MODEL STAGE < <("$PY" -c '
import json, sys
o = json.load(open(sys.argv[1]))
print(o["world_size"], o["ds_config"]["train_batch_size"], o.get("harness", {}).get("model", "tiny"),
      o.get("zero_stage", 3))' "$fx/ORACLE.json") ||
    { rows+=("$name|-|FAIL|0.0|cannot read ORACLE.json"); any_fail=1; continue; }
  # The fixed ZeRO-3 loader reads every sub-group; stages 1 and 2 have DeepSpeed's own.
  if [ -n "${UNIVERSAL_LOADER:-}" ]; then loader=$UNIVERSAL_LOADER
  elif [ "$STAGE" -lt 3 ]; then loader=stock
  elif [ "$name" = z3_tricky_fp32_ws4 ] || [ "$MODEL" = tricky ]; then loader=fixed
  else loader=stock; fi

  Ns=()
  for n in ${WORLD_SIZES:-1 2 3 4 5}; do
    [ "$n" -ge 1 ] && [ "$n" -le 5 ] && [ $((GB % n)) -eq 0 ] && [ "$n" -ne "$W" ] && Ns+=("$n")
  done
  echo "== $name: saved at world size $W, global batch $GB, loader $loader, N in {${Ns[*]}}"
  # The checkpoint mounted: the fixture's, or (VARIANT) the fixture re-written as another writer would.
  src=$fx/checkpoint
  if [ -n "${VARIANT:-}" ]; then
    src=$work/variants/$name
    # shellcheck disable=SC2086  # VARIANT is a list of options
    "$PY" "$repo/tests/tools/torch_variants.py" rewrite "$fx/checkpoint" "$src" $VARIANT >/dev/null ||
      { rows+=("$name|-|FAIL|0.0|torch_variants.py rewrite $VARIANT failed"); any_fail=1; continue; }
  fi
  before=$(listing "$src")

  for N in "${Ns[@]}"; do
    run=$work/${name}_N$N
    if [ "$MODE" = save ]; then
      t0=$(date +%s.%N)
      save_check
      secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
      if [ "$result" = PASS ]; then
        [ "${KEEP_LOGS:-0}" = 1 ] || safe_rm "$run"
      else
        any_fail=1
        detail="$detail (logs: $run)"
      fi
      echo "   $result $name N=$N ${secs}s [$steps] :: $detail"
      rows+=("$name|$N|$result|$secs|$detail|$steps")
      continue
    fi
    mkdir -p "$run/mnt"
    cur_log=$run/ucfs.log
    t0=$(date +%s.%N)
    if [ "$MODE" = native ]; then
      "$UCFS_BIN" mount -f "$src" "$run/mnt" --world-size "$N" >"$cur_log" 2>&1 &
    else
      "$UCFS_BIN" mount -f "$src" "$run/mnt" >"$cur_log" 2>&1 &
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
      if run_lc "$run/load_check.log" --fixture "$fx" --ckpt "$run/mnt" --mode "$MODE" --world-size "$N" \
        --universal-loader "$loader" --logdir "$run/lc"; then
        result=PASS
      else
        result=FAIL
      fi
      detail=$lc_detail
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

  after=$(listing "$src")
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
if [ "$MODE" = save ]; then
  printf '%-22s %3s  %-4s %8s  %-5s %-6s %-4s %-6s %-7s %-5s %-6s %-4s  %s\n' fixture N result seconds \
    mount native save umount fixture upper reload hop detail
  printf '%-22s %3s  %-4s %8s  %-5s %-6s %-4s %-6s %-7s %-5s %-6s %-4s  %s\n' ---------------------- --- ---- \
    -------- ----- ------ ---- ------ ------- ----- ------ ---- ------
else
  printf '%-22s %3s  %-4s %8s  %s\n' fixture N result seconds detail
  printf '%-22s %3s  %-4s %8s  %s\n' ---------------------- --- ---- -------- ------
fi
for r in "${rows[@]}"; do
  IFS='|' read -r f n res s d st <<<"$r"
  if [ "$MODE" = save ]; then
    read -r s1 s2 s3 s4 s5 s6 s7 s8 <<<"${st:-- - - - - - - -}"
    printf '%-22s %3s  %-4s %8s  %-5s %-6s %-4s %-6s %-7s %-5s %-6s %-4s  %s\n' "$f" "$n" "$res" "$s" \
      "$s1" "$s2" "$s3" "$s4" "$s5" "$s6" "$s7" "$s8" "$d"
  else
    printf '%-22s %3s  %-4s %8s  %s\n' "$f" "$n" "$res" "$s" "$d"
  fi
  if [ "$res" = PASS ]; then npass=$((npass + 1)); else nfail=$((nfail + 1)); fi
done
echo
echo "$npass passed, $nfail failed, ${total} s in all (ucfs: $UCFS_BIN; fixtures: ${#fixtures[@]})"
if [ $any_fail -ne 0 ] || [ "${KEEP_LOGS:-0}" = 1 ]; then echo "logs: $work"; fi
[ ${#rows[@]} -gt 0 ] || { echo "run_load_checks: no checks were run" >&2; any_fail=1; }
exit $any_fail
