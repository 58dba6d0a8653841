#!/usr/bin/python3
"""ZeRO-1/2 checkpoints through a real FUSE mount.

For every stage-1/2 fixture (ORACLE.json zero_stage 1 or 2):
  - the universal view (`--crc`) holds exactly the files of the fixture's reference universal checkpoint
    (expected/), byte for byte, and torch.load reads each per-param file as the reference's
    {'cat_dim': 0, 'param': tensor} at the parameter's shape;
  - the reshard view at N in {1, 3, 4}: torch.load every rank file (DeepSpeed's classes stood in for),
    check DeepSpeed's bookkeeping (partition_count, group_paddings, padded partitions of 2*N alignment),
    and rebuild every parameter's fp32, exp_avg and exp_avg_sq with plain torch from each rank's
    param_slice_mappings, as ds_to_universal.py does: they equal the reference's;
  - the consolidated weights equal zero_to_fp32.py's output where it made one, plus the frozen params it
    drops at stage 1.

usage: flat_group_mount_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results, files_below, read  # noqa: E402

deepspeed_stand_ins.install()
UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check
TAG = "global_step4"


def Mount(src, ready, *extra):
    return mount_testing.Mount(UCFS, src, ready, "--no-cache", *extra)


def universal(fixture, oracle):
    base = os.path.join(FIXTURES, fixture)
    ref = os.path.join(base, "expected", TAG + "_universal")
    m = Mount(os.path.join(base, "checkpoint"), "latest_universal", "--crc")
    try:
        mine = os.path.join(m.dir, TAG + "_universal")

        def tree():
            assert files_below(mine) == files_below(ref), (files_below(mine), files_below(ref))
            for rel in files_below(ref):
                assert read(os.path.join(mine, rel)) == read(os.path.join(ref, rel)), rel

        def loads():
            shapes = oracle["harness"]["param_shapes"]
            for name, shape in shapes.items():
                for state in ("fp32", "exp_avg", "exp_avg_sq"):
                    ours = torch.load(os.path.join(mine, "zero", name, state + ".pt"))
                    theirs = torch.load(os.path.join(ref, "zero", name, state + ".pt"))
                    assert list(ours) == ["cat_dim", "param"] and ours["cat_dim"] == 0, (name, list(ours))
                    assert list(ours["param"].shape) == (shape or [1]), (name, ours["param"].shape)
                    assert torch.equal(ours["param"], theirs["param"]), (name, state)
                    assert ours["param"].requires_grad == (state == "fp32"), (name, state)
                step = torch.load(os.path.join(mine, "zero", name, "step.pt"))
                assert float(step) == oracle["partitioning"]["adam_step"], (name, step)

        check(f"{fixture}: the universal tree is the reference's, byte for byte", tree)
        check(f"{fixture}: torch.load reads every per-param file as the reference's", loads)
    finally:
        m.close()


def rebuild(tag_dir, n, oracle):
    """Full (param, state) tensors from the N rank files, with plain torch, as ds_to_universal cuts them."""
    prefix = "bf16_" if oracle["dtype"] == "bf16" else ""
    ranks = [torch.load(os.path.join(tag_dir, f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
             for r in range(n)]
    assert sorted(os.listdir(tag_dir)) == sorted(
        [f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(n)] + ["mp_rank_00_model_states.pt"])
    model = torch.load(os.path.join(tag_dir, "mp_rank_00_model_states.pt"))
    assert model["dp_world_size"] == n
    groups = oracle["partitioning"]["groups"]
    pieces = {}
    for r, sd in enumerate(ranks):
        osd = sd["optimizer_state_dict"]
        assert list(osd["partition_count"]) == [n] * len(groups), osd["partition_count"]
        for g, group in enumerate(groups):
            padded = math.ceil(group["numel"] / (2 * n)) * 2 * n
            part = padded // n
            assert osd["group_paddings"][g] == (padded - group["numel"] if r == n - 1 else 0)
            state = osd["base_optimizer_state"]["state"][g]
            flat = {"fp32": osd["single_partition_of_fp32_groups"][g],
                    "exp_avg": state["exp_avg"], "exp_avg_sq": state["exp_avg_sq"]}
            assert flat["exp_avg"].numel() == part, (r, g, flat["exp_avg"].numel(), part)
            for name, frag in osd["param_slice_mappings"][g].items():
                for key, t in flat.items():
                    pieces.setdefault((name, key), []).append(t.narrow(0, frag.start, frag.numel))
    return {k: torch.cat(v) for k, v in pieces.items()}


def reshard(fixture, oracle, n):
    base = os.path.join(FIXTURES, fixture)
    ref = os.path.join(base, "expected", TAG + "_universal", "zero")
    m = Mount(os.path.join(base, "checkpoint"), "latest", "--world-size", str(n))
    try:
        def same_state():
            full = rebuild(os.path.join(m.dir, TAG), n, oracle)
            for name in oracle["harness"]["param_shapes"]:
                for state in ("fp32", "exp_avg", "exp_avg_sq"):
                    theirs = torch.load(os.path.join(ref, name, state + ".pt"))["param"].reshape(-1)
                    assert torch.equal(full[(name, state)], theirs), (name, state)

        check(f"{fixture} N={n}: DeepSpeed's bookkeeping, and every state rebuilt from param_slice_mappings",
              same_state)
    finally:
        m.close()


def consolidated(fixture, oracle):
    base = os.path.join(FIXTURES, fixture)
    z2f = os.path.join(base, "zero_to_fp32", "pytorch_model.bin")
    if not os.path.exists(z2f):
        return  # BF16_Optimizer: zero_to_fp32.py refuses it
    m = Mount(os.path.join(base, "checkpoint"), "latest_universal")
    try:
        def same():
            ours = torch.load(os.path.join(m.dir, TAG + "_fp32", "pytorch_model.bin"))
            theirs = torch.load(z2f)
            # At stage 1 zero_to_fp32.py drops the frozen params (no frozen_param_shapes): ours has them, with
            # the values the live engine held, in its order for ZeRO-2.
            frozen = oracle["expected_frozen_values"] if oracle["zero_stage"] == 1 else {}
            assert [k for k in ours if k not in frozen] == list(theirs), (list(ours), list(theirs))
            for k in theirs:
                assert ours[k].dtype == theirs[k].dtype and torch.equal(ours[k], theirs[k]), k
            for k, v in frozen.items():
                assert str(ours[k].dtype) == v["dtype"] and ours[k].flatten().tolist() == v["values"], k

        check(f"{fixture}: <tag>_fp32/pytorch_model.bin equals zero_to_fp32.py's where it is right", same)
    finally:
        m.close()


def main():
    fixtures = []
    for name in sorted(os.listdir(FIXTURES)):
        path = os.path.join(FIXTURES, name, "ORACLE.json")
        if os.path.exists(path):
            with open(path) as f:
                oracle = json.load(f)
            if oracle.get("zero_stage", 3) < 3:
                fixtures.append((name, oracle))
    def some():
        assert len(fixtures) >= 2, fixtures

    check("there are ZeRO-1/2 fixtures", some)
    for name, oracle in fixtures:
        universal(name, oracle)
        for n in (1, 3, 4):
            reshard(name, oracle, n)
        consolidated(name, oracle)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
