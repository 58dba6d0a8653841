#!/usr/bin/env bash
# `ucfs verify` as a user runs it: report, JSON, exit codes.
set -u
ucfs=$1
fixtures=$2
source "$(dirname "$0")/tools/checks.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$ucfs" verify "$fixtures/z3_tricky_fp32_ws4/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "verify of a good checkpoint exits 0" test $? -eq 0
check "it ends with OK" grep -q '^OK: 8 rank files, world size 4, step 4, no NaN or Inf' "$tmp/out"
check "the progress line's last word is on stderr" grep -q '^scanned ' "$tmp/err"

"$ucfs" verify --json -j 2 "$fixtures/z3_bf16_ws3/checkpoint/global_step4" >"$tmp/json" 2>/dev/null
check "verify --json of a tag dir exits 0" test $? -eq 0
check "--json is valid JSON with the fields" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
oracle = json.load(open('$fixtures/z3_bf16_ws3/ORACLE.json'))
numel = sum(p['numel'] for p in oracle['model']['params'])
ok = (j['ok'] is True and j['world_size'] == oracle['world_size']
      and j['step'] == oracle['partitioning']['adam_step_per_rank'][0] and j['problems'] == []
      and j['nonfinite'] == [] and j['scanned'] is True and j['bytes_scanned'] == numel * 3 * 4
      and j['states'] == ['fp32', 'exp_avg', 'exp_avg_sq'])
sys.exit(0 if ok else 1)"

mkdir -p "$tmp/ck/global_step4"
cp "$fixtures"/z3_fp32_ws3/checkpoint/latest "$tmp/ck/"
cp "$fixtures"/z3_fp32_ws3/checkpoint/global_step4/*.pt "$tmp/ck/global_step4/"
rm "$tmp/ck/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt"
"$ucfs" verify "$tmp/ck" >"$tmp/out" 2>"$tmp/err"
check "a missing rank exits 1" test $? -eq 1
check "the report names the missing rank file" \
  grep -q 'global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt: missing' "$tmp/out"
check "it ends with the number of problems" test "$(tail -n 1 "$tmp/out")" = "1 problem"

"$ucfs" verify --json "$tmp/ck" >"$tmp/json" 2>/dev/null
check "--json with a missing rank exits 1" test $? -eq 1
check "--json lists the problem" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
p = j['problems']
sys.exit(0 if j['ok'] is False and len(p) == 1 and p[0]['kind'] == 'missing'
         and p[0]['file'].endswith('/zero_pp_rank_1_mp_rank_00_optim_states.pt') else 1)"

"$ucfs" verify "$tmp/nowhere" >"$tmp/out" 2>"$tmp/err"
check "a missing path exits 1" test $? -eq 1
check "the message names the path" grep -q "$tmp/nowhere" "$tmp/err"

"$ucfs" verify >"$tmp/out" 2>&1
check "verify without CKPT exits 2" test $? -eq 2
"$ucfs" verify -j 0 "$tmp/ck" >"$tmp/out" 2>&1
check "verify -j 0 exits 2" test $? -eq 2

# A run directory: every tag of every root is verified; one bad tag fails it.
mkdir -p "$tmp/run/checkpoint-4" "$tmp/run/checkpoint-8"
cp -r "$fixtures/z3_bf16_ws2/checkpoint/global_step4" "$tmp/run/checkpoint-4/"
printf global_step4 > "$tmp/run/checkpoint-4/latest"
cp -r "$fixtures/z2_tricky_fp32_ws2/checkpoint/global_step4" "$tmp/run/checkpoint-8/global_step8"
printf global_step8 > "$tmp/run/checkpoint-8/latest"
"$ucfs" verify "$tmp/run" >"$tmp/out" 2>"$tmp/err"
check "verify of a run exits 0" test $? -eq 0
check "it verifies both checkpoints" test "$(grep -c '^OK: ' "$tmp/out")" -eq 2
rm "$tmp/run/checkpoint-8/global_step8/zero_pp_rank_1_mp_rank_00_optim_states.pt"
"$ucfs" verify --json "$tmp/run" >"$tmp/json" 2>"$tmp/err"
check "a run with a missing rank file fails verify" test $? -eq 1
check "--json names the checkpoint and the missing file" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
by = {c['root'].rsplit('/', 1)[1]: c for c in j['checkpoints']}
bad = by['checkpoint-8']['report']
ok = (j['ok'] is False and by['checkpoint-4']['report']['ok'] is True and bad['ok'] is False
      and any('zero_pp_rank_1_mp_rank_00_optim_states.pt' in p['file'] for p in bad['problems']))
sys.exit(0 if ok else print(json.dumps(j)[:2000]) or 1)"

# Tensor- and pipeline-parallel grids.
tp="$fixtures/../tp_fixtures"
"$ucfs" verify "$tp/pp_bf16opt_p2t2d2/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "verify of a TP/PP grid exits 0" test $? -eq 0
check "it names the grid" grep -q '^grid        2 pipeline stages x 2 tensor-parallel ranks x 2 data-parallel ranks$' "$tmp/out"
check "and checks every rank and layer file" grep -q '^files       20 (rank and layer files)$' "$tmp/out"
check "and the replicated params' copies" grep -q "^OK: .*replicated params' copies equal$" "$tmp/out"
"$ucfs" verify "$tp/tp1_z1_megatron_d2/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "a T = 1 Megatron run verifies with exit 0" test $? -eq 0
check "with the warning that it is unsafe at another T" grep -q '^WARNING: .*mp_rank_00_model_states.pt: saved at 1 tensor-parallel rank' "$tmp/out"
check "counted on the OK line" grep -q '^OK: .*(1 warning)$' "$tmp/out"
"$ucfs" verify --json --universal-info "$tp/tp1_z1_megatron_d2/universal_info_rows.json" \
  "$tp/tp1_z1_megatron_d2/checkpoint" >"$tmp/json" 2>"$tmp/err"
check "--universal-info clears the warning" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
sys.exit(0 if j['ok'] and j['warnings'] == [] and j['degrees'] == {'pp': 1, 'tp': 1, 'dp': 2} else 1)"
mkdir -p "$tmp/grid"
cp -r "$tp/tp_z1_fp32_t2d2/checkpoint/global_step4" "$tmp/grid/"
printf global_step4 >"$tmp/grid/latest"
rm "$tmp/grid/global_step4/zero_pp_rank_1_mp_rank_01_optim_states.pt"
"$ucfs" verify --json "$tmp/grid" >"$tmp/json" 2>"$tmp/err"
check "a grid missing an mp rank's file fails verify" test $? -eq 1
check "naming the file" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
sys.exit(0 if [(p['kind'], p['file'].rsplit('/', 1)[1]) for p in j['problems']]
         == [('missing', 'zero_pp_rank_1_mp_rank_01_optim_states.pt')] else print(j['problems']) or 1)"

exit $fail
