#!/usr/bin/python3
"""Compares the files of two DeepSpeed tag directories with torch.load: what the reshard view shows at N, and
what DeepSpeed itself saved at N after loading it (MODE=save of run_load_checks.sh).

usage: compare_saved.py VIEW_TAG_DIR SAVED_TAG_DIR
Prints "same" and exits 0 when every file of SAVED_TAG_DIR is in VIEW_TAG_DIR and holds the same objects —
keys in the same order, the same types, tensors of the same dtype, shape, requires_grad and values, the
attributes of DeepSpeed's objects (loss scalers, fragment_address) — except `ds_config`, which is the config
of the loading run (its micro-batch size differs at another N). Else prints the first differences and exits 1.
Needs DeepSpeed importable (PYTHONPATH), for its classes in the pickles.
"""
import os
import sys

import torch


def compare(a, b, path, out):
    if len(out) >= 10:
        return
    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)) or a.dtype != b.dtype or a.shape != b.shape \
                or a.requires_grad != b.requires_grad or not torch.equal(a, b):
            out.append(f"{path}: tensors differ ({getattr(a, 'dtype', a)} {getattr(a, 'shape', '')} vs "
                       f"{getattr(b, 'dtype', b)} {getattr(b, 'shape', '')})")
        return
    if type(a) is not type(b):
        out.append(f"{path}: {type(a).__name__} vs {type(b).__name__}")
        return
    if isinstance(a, dict):
        if list(a) != list(b):
            out.append(f"{path}: keys {list(a)} vs {list(b)}")
            return
        for k in a:
            if k != "ds_config":
                compare(a[k], b[k], f"{path}[{k!r}]", out)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} vs {len(b)} items")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            compare(x, y, f"{path}[{i}]", out)
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        compare(vars(a), vars(b), f"{path}.__dict__", out)
    elif a != b:
        out.append(f"{path}: {a!r} vs {b!r}"[:300])


def main():
    view, saved = sys.argv[1], sys.argv[2]
    out = []
    names = sorted(f for f in os.listdir(saved) if f.endswith(".pt"))
    if not names:
        out.append(f"{saved}: no .pt files")
    for name in names:
        if not os.path.exists(os.path.join(view, name)):
            out.append(f"{name}: saved, but not in the view")
            continue
        compare(torch.load(os.path.join(view, name)), torch.load(os.path.join(saved, name)), name, out)
    for name in sorted(f for f in os.listdir(view) if f.endswith(".pt")):
        if name not in names:
            out.append(f"{name}: in the view, but DeepSpeed did not save it")
    print("same" if not out else "; ".join(out))
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
