#!/usr/bin/python3
"""Dumps the reference tensors of the test fixtures with the real torch.load.

The C++ tests compare what ucfs assembles against what DeepSpeed's own tools
wrote (ds_to_universal.py's per-param files, the independently rebuilt
`expected/` universal folders, zero_to_fp32.py's pytorch_model.bin). They do
not read those .pt files with ucfs's own codecs: this script reads them with
torch.load and writes each tensor's raw bytes plus a manifest, so the
reference never passes through the code under test.

usage: dump_reference.py FIXTURES_DIR OUT_DIR
"""
import json
import os
import sys

import torch


def tensor_entry(t, out_dir, rel):
    path = os.path.join(out_dir, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    flat = t.detach().contiguous().reshape(-1)
    with open(path, "wb") as f:
        f.write(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return {
        "file": rel,
        "dtype": str(t.dtype).replace("torch.", ""),
        "shape": list(t.shape),
        "requires_grad": bool(t.requires_grad),
    }


def dump_universal(zero_dir, out_dir, rel_prefix):
    params = {}
    for name in sorted(os.listdir(zero_dir)):
        pdir = os.path.join(zero_dir, name)
        if not os.path.isdir(pdir):
            continue
        states = {}
        for fname in sorted(os.listdir(pdir)):
            if not fname.endswith(".pt"):
                continue
            t = torch.load(os.path.join(pdir, fname), map_location="cpu")
            rel = f"{rel_prefix}/{name}/{fname[:-3]}.bin"
            if isinstance(t, dict):
                # ZeRO-1/2: {'cat_dim': 0, 'param': tensor of the param's shape}.
                entry = tensor_entry(t["param"], out_dir, rel)
                entry["dict_keys"] = list(t.keys())
                entry["dict_ints"] = {k: v for k, v in t.items() if isinstance(v, int)}
            elif torch.is_tensor(t):
                entry = tensor_entry(t, out_dir, rel)
            else:
                entry = {"value": t}  # a step saved as a Python number
            states[fname[:-3]] = entry
        params[name] = states
    return params


def main():
    fixtures, out_dir = sys.argv[1], sys.argv[2]
    manifest = {}
    for fixture in sorted(os.listdir(fixtures)):
        fdir = os.path.join(fixtures, fixture)
        if not os.path.isdir(fdir):
            continue
        entry = {}
        for base in ("checkpoint", "expected"):
            bdir = os.path.join(fdir, base)
            if not os.path.isdir(bdir):
                continue
            for sub in sorted(os.listdir(bdir)):
                zero = os.path.join(bdir, sub, "zero")
                if sub.endswith("_universal") and os.path.isdir(zero):
                    key = "ds_to_universal" if base == "checkpoint" else "expected_universal"
                    entry[key] = dump_universal(zero, out_dir, f"{fixture}/{key}")
        bin_path = os.path.join(fdir, "zero_to_fp32", "pytorch_model.bin")
        if os.path.exists(bin_path):
            sd = torch.load(bin_path, map_location="cpu")
            entry["zero_to_fp32"] = {
                name: tensor_entry(t, out_dir, f"{fixture}/zero_to_fp32/{name}.bin")
                for name, t in sd.items()
            }
        manifest[fixture] = entry
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"dumped reference tensors of {len(manifest)} fixtures to {out_dir}")


if __name__ == "__main__":
    main()
