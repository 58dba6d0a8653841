#!/usr/bin/python3
"""The consolidated weights (<tag>_fp32/) through a real FUSE mount, in both views.

For every fixture, mounted as the universal view and as the reshard view at
N=3: torch.load of pytorch_model.bin equals zero_to_fp32.py's own output — the
same keys in the same order, equal tensors, dtypes and requires_grad, tied
aliases sharing one storage — and model.safetensors, read by a strict parser
written here (8-byte length, JSON header, offsets tiling the data), holds the
same tensors. With --crc, Python's zipfile checks every record of
pytorch_model.bin.

usage: consolidated_mount_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import json
import os
import struct
import sys
import zipfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

deepspeed_stand_ins.install()
UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert (8 + n) % 8 == 0, "data not 8-aligned"
    header = json.loads(data[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt"}
    body = data[8 + n:]
    spans = sorted(tuple(t["data_offsets"]) for t in header.values())
    at = 0
    for a, b in spans:
        assert a == at, "gap or overlap"
        at = b
    assert at == len(body), "bytes left over"
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        dtype = DTYPES[t["dtype"]]
        flat = torch.frombuffer(bytearray(body[a:b]), dtype=dtype) if b > a else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(t["shape"])
    return out


def test(fixture, extra, ready):
    base = os.path.join(FIXTURES, fixture)
    want = torch.load(os.path.join(base, "zero_to_fp32", "pytorch_model.bin"))
    m = mount_testing.Mount(UCFS, os.path.join(base, "checkpoint"), ready, "--no-cache", *extra)
    label = f"{fixture} {' '.join(extra) or 'universal'}"
    try:
        d = os.path.join(m.dir, "global_step4_fp32")

        def bin_equal():
            got = torch.load(os.path.join(d, "pytorch_model.bin"))
            assert type(got) is type(want)
            assert list(got) == list(want), (list(got), list(want))
            for k, t in want.items():
                g = got[k]
                assert g.dtype == t.dtype and g.shape == t.shape and g.requires_grad == t.requires_grad, k
                assert torch.equal(g, t), k
            # Tied aliases are one tensor, as in zero_to_fp32's dict.
            for k, t in want.items():
                for k2, t2 in want.items():
                    if t.data_ptr() == t2.data_ptr():
                        assert got[k].data_ptr() == got[k2].data_ptr(), (k, k2)
        check(f"{label}: pytorch_model.bin equals zero_to_fp32's", bin_equal)

        def safetensors_equal():
            got = read_safetensors(os.path.join(d, "model.safetensors"))
            assert sorted(got) == sorted(want)
            for k, t in want.items():
                assert got[k].dtype == t.dtype and torch.equal(got[k], t.detach()), k
        check(f"{label}: model.safetensors parses strictly and holds the same tensors", safetensors_equal)

        def crcs():
            # With --crc every zip record's CRC is real: Python's zipfile checks them.
            with zipfile.ZipFile(os.path.join(d, "pytorch_model.bin")) as z:
                records = z.infolist()
                assert any(r.CRC != 0 for r in records), [r.filename for r in records]
                assert z.testzip() is None
        if "--crc" in extra:
            check(f"{label}: pytorch_model.bin's CRCs are real", crcs)
    finally:
        m.close()


# zero_to_fp32.py drops the frozen params of ZeRO-1 checkpoints (flat_group_mount_test.py checks those).
stage1 = set(mount_testing.fixtures_of_stage(FIXTURES, stage3=False)) - {
    f for f in os.listdir(FIXTURES) if f.startswith("z2_")}
for fixture in sorted(os.listdir(FIXTURES)):
    if os.path.isdir(os.path.join(FIXTURES, fixture, "zero_to_fp32")) and fixture not in stage1:
        test(fixture, (), "latest_universal")
        test(fixture, ("--world-size", "3"), "latest")
for fixture in ("z3_tricky_fp32_ws4", "z2_tricky_bf16_ws4"):
    test(fixture, ("--crc",), "latest_universal")
    test(fixture, ("--world-size", "3", "--crc"), "latest")
sys.exit(results.finish())
