#!/usr/bin/env python3
"""Inside the modern root: torch 2.14 loads the files ucfs serves as it loads DeepSpeed's own.

    views_loads.py SPEC.json

SPEC.json: a list of {"ours": path in a ucfs mount, "theirs": the file DeepSpeed 0.19.8's tool wrote, "kind":
"universal" | "fp32" | "safetensors" | "live" | "live_file", "ours_only": names only ours holds (the frozen params
zero_to_fp32.py drops at ZeRO-1), left out of the comparison, which they must not be}.
  universal, fp32: torch.load(weights_only=True) (torch >= 2.6's default) succeeds on ours exactly when it does on
                   theirs; then both (loaded as theirs loads) are equal: the same structure, keys in the same order,
                   tensors of the same dtype, shape, requires_grad and bits.
  safetensors:     ours loads with safetensors and holds theirs' (a pytorch_model.bin's) tensors.
  live:            where no tool of DeepSpeed's wrote a reference ("theirs" is the fixture's MODERN.json): ours (a
                   pytorch_model.bin or model.safetensors) holds every trainable param's fp32 master as the
                   training process held it at save time (live_state.params, gathered whole), bit for bit.
  live_file:       where no converter wrote a universal file (Muon: ds_to_universal fails), ours loads with
                   weights_only=True and its tensor (bare, or a dict's 'param') is exactly the live value saved in
                   MODERN.json: {"b64", "dtype", "shape", "flat"?} in "live" (base64 of the little-endian bytes, C
                   order; "flat": ours is 1-D, as ZeRO-3's universal files are), or {"value"} for a step.
Prints a line per failure and exits 1 if any.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_compare import same_value  # noqa: E402


def load(path, weights_only):
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only), None
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def without(state, names, where):
    if not names:
        return state
    missing = [n for n in names if n not in state]
    assert not missing, f"{where}: ours lacks {missing}, which zero_to_fp32 drops and ucfs keeps"
    kept = type(state)()
    for k, v in state.items():
        if k not in names:
            kept[k] = v
    return kept


def check_live(ours, live):
    import base64
    got = torch.load(ours, map_location="cpu", weights_only=True)
    if "value" in live:  # a step: the number it is, as torch keeps it
        assert float(got) == live["value"], (float(got), live["value"])
        return
    if isinstance(got, dict):
        got = got["param"]
    assert str(got.dtype) == "torch." + live["dtype"], (got.dtype, live["dtype"])
    shape = [int(torch.tensor(live["shape"]).prod())] if live.get("flat") else list(live["shape"])
    assert list(got.shape) == shape, (list(got.shape), shape)
    raw = got.detach().contiguous().view(torch.uint8).numpy().tobytes() if got.numel() else b""
    want = base64.b64decode(live["b64"])
    assert raw == want, f"bytes differ from the live value ({len(raw)} against {len(want)} bytes)"


def live_params(modern_json):
    """{name: fp32 master} of a fixture's MODERN.json (live_state.params)."""
    import base64
    out = {}
    for name, states in json.load(open(modern_json))["live_state"]["params"].items():
        fp32 = states["fp32"]
        raw = bytearray(base64.b64decode(fp32["b64"]))
        out[name] = torch.frombuffer(raw, dtype=getattr(torch, fp32["dtype"])).reshape(fp32["shape"])
    return out


def check(entry):
    ours, theirs, kind = entry["ours"], entry.get("theirs"), entry["kind"]
    if kind == "live_file":
        check_live(ours, entry["live"])
        return
    ours_only = entry.get("ours_only", [])
    if kind == "live":
        if ours.endswith(".safetensors"):
            from safetensors.torch import load_file
            got = load_file(ours)
        else:
            got, err = load(ours, True)
            assert err is None, f"ours does not load with weights_only=True: {err}"
        want = live_params(theirs)
        assert want, "MODERN.json has no live params"
        for name, t in want.items():
            assert name in got, f"ours lacks {name}"
            assert got[name].dtype == t.dtype and got[name].shape == t.shape, (name, got[name].dtype, got[name].shape)
            assert torch.equal(got[name], t), f"{name} differs from the live master"
        return
    if kind == "safetensors":
        from safetensors.torch import load_file
        got = without(load_file(ours), ours_only, ours)
        want, _ = load(theirs, False)
        assert sorted(got) == sorted(want), (sorted(got), sorted(want))
        for k, t in want.items():
            assert got[k].dtype == t.dtype and torch.equal(got[k], t.detach()), k
        return
    want, their_error = load(theirs, True)
    got, our_error = load(ours, True)
    assert (our_error is None) == (their_error is None), (
        f"weights_only=True: theirs {their_error or 'loads'}, ours {our_error or 'loads'}")
    if their_error is not None:
        want, err = load(theirs, False)
        assert err is None, f"theirs does not load at all: {err}"
        got, err = load(ours, False)
        assert err is None, f"ours does not load: {err}"
    same_value(without(got, ours_only, ours), want, "", requires_grad=True)


def main():
    entries = json.load(open(sys.argv[1]))
    failed = 0
    for entry in entries:
        try:
            check(entry)
        except Exception as e:  # noqa: BLE001 - report each and go on
            failed += 1
            print(f"FAILED {entry['kind']} {entry['ours']}: {e}")
    print(f"{len(entries) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
