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

"$ucfs" >"$tmp/out" 2>&1
check "no subcommand exits 2" test $? -eq 2
"$ucfs" --version >"$tmp/out"
check "--version prints the version" grep -q '^ucfs [0-9]' "$tmp/out"

exit $fail
