#!/usr/bin/env bash
# `ucfs inspect` as a user runs it: output, JSON, exit codes and messages.
set -u
ucfs=$1
fixtures=$2
source "$(dirname "$0")/tools/checks.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$ucfs" inspect "$fixtures/z3_tricky_fp32_ws4/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "inspect exits 0" test $? -eq 0
check "inspect prints the world size" grep -q '^world size  4$' "$tmp/out"
check "inspect prints the frozen params" grep -q 'proj.weight  \[5, 20\]' "$tmp/out"
check "inspect is quiet on stderr" test ! -s "$tmp/err"

"$ucfs" inspect --json "$fixtures/z3_bf16_ws3/checkpoint/global_step4" >"$tmp/json"
check "inspect --json on a tag dir exits 0" test $? -eq 0
check "--json is valid JSON with the right world size" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
sys.exit(0 if j['world_size'] == 3 and j['dtype'] == 'bfloat16' and len(j['params']) == 4 else 1)"

"$ucfs" inspect "$tmp/nowhere" >"$tmp/out" 2>"$tmp/err"
check "a missing path exits 1" test $? -eq 1
check "the message names the path" grep -q "$tmp/nowhere" "$tmp/err"

mkdir -p "$tmp/ck/global_step4"
cp "$fixtures"/z3_fp32_ws3/checkpoint/latest "$tmp/ck/"
cp "$fixtures"/z3_fp32_ws3/checkpoint/global_step4/*.pt "$tmp/ck/global_step4/"
rm "$tmp/ck/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt"
"$ucfs" inspect "$tmp/ck" >"$tmp/out" 2>"$tmp/err"
check "a missing rank exits 1" test $? -eq 1
check "the message names the missing rank file" grep -q 'zero_pp_rank_1_mp_rank_00_optim_states.pt: missing' "$tmp/err"

check "inspect shows the saved batch arithmetic" \
  grep -q '^batch       train_batch_size 12 = micro batch 6 × gradient accumulation 1 × 2 ranks$' \
  <("$ucfs" inspect "$fixtures/z3_bf16_ws2/checkpoint")

# A run directory: every tag of every root, text and JSON.
mkdir -p "$tmp/run/checkpoint-4" "$tmp/run/ckpt/_actor"
cp -r "$fixtures/z3_bf16_ws2/checkpoint/global_step4" "$tmp/run/checkpoint-4/"
printf global_step4 > "$tmp/run/checkpoint-4/latest"
cp -r "$fixtures/z3_fp32_ws3/checkpoint/global_step4" "$tmp/run/ckpt/_actor/global_step2"
cp -r "$fixtures/z2_tricky_fp32_ws2/checkpoint/global_step4" "$tmp/run/ckpt/_actor/global_step4"
printf global_step4 > "$tmp/run/ckpt/_actor/latest"
"$ucfs" inspect "$tmp/run" >"$tmp/out" 2>"$tmp/err"
check "inspect of a run exits 0" test $? -eq 0
check "it reports every tag of every root" test "$(grep -c '^== ' "$tmp/out")" -eq 3
check "each under its root and tag" grep -q "^== $tmp/run/ckpt/_actor  (tag global_step2)$" "$tmp/out"
"$ucfs" inspect --json "$tmp/run" >"$tmp/json"
check "inspect --json of a run lists each checkpoint's report" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
got = [(c['root'].split('/run/')[1], c['tag'], c['report']['world_size'], c['report']['batch']['train_batch_size'])
       for c in j['checkpoints']]
want = [('checkpoint-4', 'global_step4', 2, 12), ('ckpt/_actor', 'global_step2', 3, 12), ('ckpt/_actor', 'global_step4', 2, 120)]
sys.exit(0 if got == want else print(got) or 1)"
rm "$tmp/run/ckpt/_actor/global_step2/zero_pp_rank_2_mp_rank_00_optim_states.pt"
"$ucfs" inspect "$tmp/run" >"$tmp/out" 2>"$tmp/err"
check "a run with a broken tag exits 1" test $? -eq 1
check "naming the missing file" grep -q 'global_step2/zero_pp_rank_2_mp_rank_00_optim_states.pt: missing' "$tmp/err"
check "and still reports the other tags" test "$(grep -c '^== ' "$tmp/out")" -eq 2

# Tensor- and pipeline-parallel grids.
tp="$fixtures/../tp_fixtures"
"$ucfs" inspect "$tp/pp_bf16opt_p2t2d2/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "inspect of a TP/PP grid exits 0" test $? -eq 0
check "it prints the grid" grep -q '^grid        2 pipeline stages x 2 tensor-parallel ranks x 2 data-parallel ranks (8 ranks)$' "$tmp/out"
check "and each param's merge" grep -qE '^  2.self_attention.dense.weight +0 +\[8, 4\] +cat dim 1 \(row parallel\) +\[8, 8\]$' "$tmp/out"
check "and the tied embedding's stages" grep -qE '^  tied_modules.embed.word_embeddings.weight +0,1 .*vocab rows cut to 13 +\[13, 8\]$' "$tmp/out"
"$ucfs" inspect --json "$tp/z3_tp_fp32_t2d2/checkpoint" >"$tmp/json"
check "inspect --json of a grid has its degrees and shard groups" /usr/bin/python3 -c "
import json, sys
j = json.load(open('$tmp/json'))
sys.exit(0 if j['degrees'] == {'pp': 1, 'tp': 2, 'dp': 2} and len(j['shard_groups']) == 2
         and j['universal']['available'] else 1)"
"$ucfs" inspect "$tp/tp1_z1_megatron_d2/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "a T = 1 Megatron run inspects with exit 0" test $? -eq 0
check "flagged unsafe to load at T > 1" grep -q '^WARNING    unsafe to load at another tensor-parallel degree' "$tmp/out"
"$ucfs" inspect --universal-info "$tp/tp1_z1_megatron_d2/universal_info_rows.json" \
  "$tp/tp1_z1_megatron_d2/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "with the row-parallel patterns supplied, no warning" test "$(grep -c WARNING "$tmp/out")" -eq 0
printf '{"parameter_with_row_parallelism_patterns": 3}' >"$tmp/bad.json"
"$ucfs" inspect --universal-info "$tmp/bad.json" "$tp/tp1_z1_megatron_d2/checkpoint" >"$tmp/out" 2>"$tmp/err"
check "a bad --universal-info still inspects" test $? -eq 0
check "saying what is wrong with the file" grep -q "unavailable: .*$tmp/bad.json" "$tmp/out"
mkdir -p "$tmp/grid"
cp -r "$tp/pp_bf16opt_p2t2d2/checkpoint/global_step4" "$tmp/grid/"
printf global_step4 >"$tmp/grid/latest"
rm "$tmp/grid/global_step4/layer_03-model_01-model_states.pt"
"$ucfs" inspect "$tmp/grid" >"$tmp/out" 2>"$tmp/err"
check "a grid missing a layer file exits 1" test $? -eq 1
check "naming it" grep -q 'global_step4/layer_03-model_01-model_states.pt: missing' "$tmp/err"
rm "$tmp/grid/global_step4/bf16_zero_pp_rank_1_mp_rank_03_optim_states.pt"
"$ucfs" inspect "$tmp/grid" >"$tmp/out" 2>"$tmp/err"
check "a grid missing an mp rank's file exits 1" test $? -eq 1
check "naming it" grep -q 'bf16_zero_pp_rank_1_mp_rank_03_optim_states.pt: missing' "$tmp/err"

"$ucfs" >"$tmp/out" 2>&1
check "no subcommand exits 2" test $? -eq 2
"$ucfs" --version >"$tmp/out"
check "--version prints the version" grep -q '^ucfs [0-9]' "$tmp/out"

exit $fail
