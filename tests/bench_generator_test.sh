#!/usr/bin/env bash
# The benchmark checkpoint generator writes DeepSpeed's exact format: rebuilt
# from a fixture's ORACLE.json, every rank file's data.pkl is byte-identical
# to the one DeepSpeed 0.14.5 wrote.
set -eu
src=$1
fixtures=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for fixture in z3_fp32_ws2 z3_bf16_ws3 z3_fp32_ws4; do
  /usr/bin/python3 "$src/bench/make_checkpoint.py" --out "$tmp/$fixture" --like "$fixtures/$fixture" >/dev/null
  /usr/bin/python3 - "$tmp/$fixture/global_step4" "$fixtures/$fixture/checkpoint/global_step4" <<'PY'
import os, sys, zipfile
ours, theirs = sys.argv[1], sys.argv[2]
names = sorted(os.listdir(theirs))
assert names == sorted(os.listdir(ours)), (names, sorted(os.listdir(ours)))
for name in names:
    pkl = lambda z: z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    a, b = pkl(zipfile.ZipFile(os.path.join(ours, name))), pkl(zipfile.ZipFile(os.path.join(theirs, name)))
    if a != b:
        sys.exit(f"{name}: data.pkl differs from DeepSpeed's ({len(a)} vs {len(b)} bytes)")
print(f"{theirs}: {len(names)} files, data.pkl identical")
PY
done
