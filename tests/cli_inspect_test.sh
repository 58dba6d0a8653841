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

"$ucfs" >"$tmp/out" 2>&1
check "no subcommand exits 2" test $? -eq 2
"$ucfs" --version >"$tmp/out"
check "--version prints the version" grep -q '^ucfs [0-9]' "$tmp/out"

exit $fail
