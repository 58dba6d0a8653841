#!/usr/bin/python3
"""The reshard view (`ucfs mount --world-size N`) through a real FUSE mount.

For every fixture and N in {1, 3, 5}: torch.load every generated rank file
(DeepSpeed's classes stood in for), rebuild every parameter's fp32 master,
exp_avg and exp_avg_sq from the N ranks with plain torch following the
ZeRO-3 layout (param_shapes order, P' = ceil(n/N) per rank, valid elements
then padding), and compare with the references DeepSpeed's own tools wrote
(zero_to_fp32 for fp32; ds_to_universal or expected/ for the moments).
Then ucfs mounted on top of a reshard mount shows the same per-param
universal files, byte for byte, as ucfs on the source.

usage: reshard_mount_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

deepspeed_stand_ins.install()
UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check


def Mount(src, ready, *extra):
    return mount_testing.Mount(UCFS, src, ready, "--no-cache", *extra)


def reference(fixture):
    base = os.path.join(FIXTURES, fixture)
    uni = os.path.join(base, "checkpoint", "global_step4_universal", "zero")
    if not os.path.isdir(uni):
        uni = os.path.join(base, "expected", "global_step4_universal", "zero")
    z2f = torch.load(os.path.join(base, "zero_to_fp32", "pytorch_model.bin"))
    return uni, z2f


def rebuild(tag_dir, n_ranks):
    """Full tensors per (param, state) from the N rank files, with plain torch."""
    optim = [torch.load(os.path.join(tag_dir, name)) for name in sorted(
        (f for f in os.listdir(tag_dir) if f.endswith("optim_states.pt")),
        key=lambda f: int(f.split("zero_pp_rank_")[1].split("_")[0]))]
    model0 = torch.load(os.path.join(tag_dir, "zero_pp_rank_0_mp_rank_00_model_states.pt"))
    assert len(optim) == n_ranks
    full = {}
    for k, group in enumerate(model0["param_shapes"]):
        offset = 0
        for name, shape in group.items():
            n = shape.numel()
            part = math.ceil(n / n_ranks)
            for state in ("fp32", "exp_avg", "exp_avg_sq"):
                slices = []
                for o in optim:
                    osd = o["optimizer_state_dict"]
                    flat = osd["fp32_flat_groups"][k] if state == "fp32" else \
                        osd["optimizer_state_dict"]["state"][k][state]
                    slices.append(flat.detach()[offset:offset + part])
                full[(name, state)] = torch.cat(slices)[:n]
            offset += part
        for o in optim:
            assert o["optimizer_state_dict"]["fp32_flat_groups"][k].numel() == offset
    for o in optim:
        assert o["optimizer_state_dict"]["partition_count"] == n_ranks
    return full, model0


def test(fixture, n):
    uni, z2f = reference(fixture)
    m = Mount(os.path.join(FIXTURES, fixture, "checkpoint"), "latest", "--world-size", str(n))
    try:
        def values():
            full, model0 = rebuild(os.path.join(m.dir, "global_step4"), n)
            assert model0["dp_world_size"] == n
            for (name, state), t in full.items():
                ref = z2f[name].reshape(-1) if state == "fp32" else \
                    torch.load(os.path.join(uni, name, state + ".pt"))[:t.numel()]
                assert torch.equal(t, ref.detach()), (name, state)
        check(f"{fixture} N={n}: torch rebuilds every state from the mounted rank files", values)
    finally:
        m.close()


def test_stacked(fixture, n):
    direct = Mount(os.path.join(FIXTURES, fixture, "checkpoint"), "latest_universal")
    reshard = Mount(os.path.join(FIXTURES, fixture, "checkpoint"), "latest", "--world-size", str(n))
    try:
        stacked = Mount(reshard.dir, "latest_universal")
        try:
            def same():
                zero = os.path.join(direct.dir, "global_step4_universal", "zero")
                count = 0
                for name in sorted(os.listdir(zero)):
                    if name == "optimizer_state.pt":
                        continue  # rank 0's own flats: differ at another N by design
                    for f in sorted(os.listdir(os.path.join(zero, name))):
                        a = open(os.path.join(zero, name, f), "rb").read()
                        b = open(os.path.join(stacked.dir, "global_step4_universal", "zero", name, f), "rb").read()
                        assert a == b, (name, f)
                        count += 1
                assert count > 0
            check(f"{fixture}: the universal view over a N={n} reshard mount equals the one over the source", same)
        finally:
            stacked.close()
    finally:
        reshard.close()
        direct.close()


# ZeRO-1/2 fixtures: flat_group_mount_test.py.
for fixture in mount_testing.fixtures_of_stage(FIXTURES, stage3=True):
    for n in (1, 3, 5):
        test(fixture, n)
    test_stacked(fixture, 3)
sys.exit(results.finish())
