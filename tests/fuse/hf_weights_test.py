#!/usr/bin/python3
"""Hugging Face weights beside config.json, through a real FUSE mount.

Each fixture laid out as HF Trainer writes checkpoint-4/ with
stage3_gather_16bit_weights_on_model_save false (config.json, no weights):
the mount of the run, and of the root alone, shows model.safetensors; torch
reads it (parsed here by hand, as the safetensors format defines it); it
holds what save_pretrained writes with gathering on: every trainable param
equal to zero_to_fp32's fp32 weights (../shared's outputs, bundled in
tests/data) cast by torch's .to() to the training dtype, buffers and frozen
params in their saved dtype, the tied head.weight once (as embed.weight);
--weights-dtype fp32 gives zero_to_fp32's values exactly; a root that has
weights of its own shows them, and nothing else.

usage: hf_weights_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import json
import os
import shutil
import struct
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64}
# fixture: the training dtype
CASES = {"z3_bf16_ws2": torch.bfloat16, "z2_tricky_bf16_ws4": torch.bfloat16,
         "z2_tricky_fp16_ws3": torch.float16, "z3_tricky_fp32_ws4": torch.float32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        raw = bytearray(data[8 + n + a:8 + n + b])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return meta, out


def saved_dtypes(fixture):
    """The dtypes of the module's entries as DeepSpeed saved them (rank 0's model states)."""
    tag = os.path.join(FIXTURES, fixture, "checkpoint", "global_step4")
    name = "mp_rank_00_model_states.pt"
    if not os.path.exists(os.path.join(tag, name)):
        name = "zero_pp_rank_0_mp_rank_00_model_states.pt"
    sd = torch.load(os.path.join(tag, name), map_location="cpu")
    frozen = set((sd.get("frozen_param_shapes") or {}).keys())
    return {k: v.dtype for k, v in sd["module"].items()}, set(sd["buffer_names"] or []), frozen, \
        dict(sd.get("shared_params") or {})


def make_run(base):
    run = os.path.join(base, "output_dir")
    for fixture in CASES:
        root = os.path.join(run, "checkpoint-" + fixture)
        shutil.copytree(os.path.join(FIXTURES, fixture, "checkpoint", "global_step4"),
                        os.path.join(root, "global_step4"))
        with open(os.path.join(root, "latest"), "w") as f:
            f.write("global_step4")
        with open(os.path.join(root, "config.json"), "w") as f:
            f.write('{"model_type": "test"}')
    # A root with weights of its own (gathering on): shown as it is.
    own = os.path.join(run, "checkpoint-own")
    shutil.copytree(os.path.join(run, "checkpoint-z3_bf16_ws2"), own)
    with open(os.path.join(own, "model.safetensors"), "wb") as f:
        f.write(b"the trainer's own")
    return run


def check_weights(path, fixture, dtype):
    meta, got = read_safetensors(path)
    assert meta == {"format": "pt"}, meta
    want = torch.load(os.path.join(FIXTURES, fixture, "zero_to_fp32", "pytorch_model.bin"))
    module_dtypes, buffers, frozen, shared = saved_dtypes(fixture)
    assert sorted(got) == sorted(k for k in want if k not in shared), (sorted(got), sorted(want), shared)
    for name, t in got.items():
        ref = want[name]
        if name in buffers or name in frozen:
            expect = ref.to(module_dtypes[name])  # zero_to_fp32 made buffers float32; exact back
        else:
            expect = ref.to(dtype)
        assert t.dtype == expect.dtype, (name, t.dtype, expect.dtype)
        assert t.shape == expect.shape, (name, t.shape, expect.shape)
        assert torch.equal(t, expect), name


def test(base):
    run = make_run(base)
    before = mount_testing.tree_sha256(run)
    m = mount_testing.Mount(UCFS, run, "checkpoint-own", "--no-cache")
    try:
        for fixture, dtype in CASES.items():
            def weights(fixture=fixture, dtype=dtype):
                root = os.path.join(m.dir, "checkpoint-" + fixture)
                assert "model.safetensors" in os.listdir(root), os.listdir(root)
                st = os.stat(os.path.join(root, "model.safetensors"))
                src = os.stat(os.path.join(run, "checkpoint-" + fixture, "global_step4"))
                assert abs(st.st_mtime_ns - src.st_mtime_ns) < 1_000_000
                check_weights(os.path.join(root, "model.safetensors"), fixture, dtype)
            check(f"{fixture}: model.safetensors beside config.json, in {dtype}, is zero_to_fp32's cast by torch",
                  weights)

        def own_weights_pass_through():
            root = os.path.join(m.dir, "checkpoint-own")
            with open(os.path.join(root, "model.safetensors"), "rb") as f:
                assert f.read() == b"the trainer's own"
            assert not any(n.startswith("model-") for n in os.listdir(root))
        check("a root with weights of its own shows them", own_weights_pass_through)
    finally:
        m.close()

    m = mount_testing.Mount(UCFS, run, "checkpoint-own", "--no-cache", "--weights-dtype", "fp32")
    try:
        def fp32_is_zero_to_fp32():
            for fixture in CASES:
                check_weights(os.path.join(m.dir, "checkpoint-" + fixture, "model.safetensors"), fixture,
                              torch.float32)
        check("--weights-dtype fp32 gives zero_to_fp32's values exactly", fp32_is_zero_to_fp32)
    finally:
        m.close()

    root = os.path.join(run, "checkpoint-z2_tricky_fp16_ws3")
    m = mount_testing.Mount(UCFS, root, "model.safetensors", "--no-cache", "--world-size", "2")
    try:
        def root_mount_too():
            check_weights(os.path.join(m.dir, "model.safetensors"), "z2_tricky_fp16_ws3", torch.float16)
        check("a root mounted alone (at --world-size 2) shows them too", root_mount_too)
    finally:
        m.close()

    def source_unchanged():
        assert mount_testing.tree_sha256(run) == before
    check("the run's sha256 is unchanged", source_unchanged)


base = tempfile.mkdtemp(prefix="ucfs_hfw_")
try:
    test(base)
finally:
    shutil.rmtree(base)
sys.exit(results.finish())
