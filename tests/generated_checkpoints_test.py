#!/usr/bin/python3
"""Every view of checkpoints larger and shaped differently than the fixtures.

The fixtures are small; their pickles are smaller than most users'. This test
writes ZeRO-3 checkpoints of several shapes with bench/make_checkpoint.py
(DeepSpeed's format, checked byte for byte against DeepSpeed's data.pkl by
bench_generator_matches_deepspeed), exports every view with `ucfs export`,
and reads the results back with the real torch.load, comparing every value
with the full tensors the generator started from (its --truth file). Nothing
here goes through ucfs's own readers.

usage: generated_checkpoints_test.py UCFS REPO_ROOT
"""
import math
import os
import subprocess
import sys
import tempfile

import torch

UCFS, REPO = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
import deepspeed_stand_ins  # noqa: E402
from mount_testing import Results  # noqa: E402

deepspeed_stand_ins.install()  # torch.load of rank files needs ZeroStageEnum, LossScaler

# (name, make_checkpoint.py arguments). The first one crashed ucfs (a
# reference into the pickle's node storage held across its growth).
CONFIGS = [
    ("bf16_ws2", ["--layers", "4", "--hidden", "16", "--vocab", "50", "--world-size", "2"]),
    ("fp32_ws3_subgroups", ["--layers", "3", "--hidden", "24", "--vocab", "77", "--world-size", "3",
                            "--dtype", "fp32", "--sub-group-size", "700"]),
    ("bf16_ws4_onegroup", ["--layers", "6", "--hidden", "32", "--vocab", "101", "--world-size", "4",
                           "--one-group", "--sub-group-size", "2000"]),
]
STATES = ("fp32", "exp_avg", "exp_avg_sq")


def run(*args):
    p = subprocess.run([UCFS, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise AssertionError(f"ucfs {' '.join(args)}: exit {p.returncode}: {p.stderr[-2000:]}")


def load(path):
    return torch.load(path, map_location="cpu")


def assert_equal(what, got, want):
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
                             f"{'' if got.shape != want.shape else ', values differ'}")


def check_universal(out, tag, truth):
    zero = os.path.join(out, f"{tag}_universal", "zero")
    assert sorted(d for d in os.listdir(zero) if d != "optimizer_state.pt") == sorted(truth)
    for name, states in truth.items():
        for s in STATES:
            assert_equal(f"{name}/{s}.pt", load(os.path.join(zero, name, f"{s}.pt")), states[s].reshape(-1))
    groups = load(os.path.join(zero, "optimizer_state.pt"))["optimizer_state_dict"]["param_groups"]
    assert len(groups) >= 1 and all("lr" in g for g in groups)


def check_reshard(out, tag, truth, n, dtype):
    """Full tensors rebuilt from the N rank files: rank r holds [r*P, r*P+P)."""
    tag_dir = os.path.join(out, tag)
    prefix = "bf16_" if dtype == "bf16" else ""
    shapes = load(os.path.join(tag_dir, "zero_pp_rank_0_mp_rank_00_model_states.pt"))["param_shapes"]
    optims = [load(os.path.join(tag_dir, f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
              ["optimizer_state_dict"] for r in range(n)]
    assert all(o["partition_count"] == n for o in optims)
    seen = set()
    for k, group in enumerate(shapes):
        for s in STATES:
            flats = [o["fp32_flat_groups"][k] if s == "fp32" else o["optimizer_state_dict"]["state"][k][s]
                     for o in optims]
            offset = 0
            for name, shape in group.items():
                numel = math.prod(shape)
                part = math.ceil(numel / n)
                full = torch.cat([f[offset:offset + part] for f in flats])[:numel]
                assert_equal(f"N={n} {name} {s}", full, truth[name][s].reshape(-1))
                offset += part
            for r, f in enumerate(flats):
                assert f.numel() == offset, f"N={n} rank {r} sub-group {k} {s}: {f.numel()} != {offset}"
            seen.update(group)
    assert seen == set(truth), f"N={n}: params {sorted(set(truth) ^ seen)}"


def check_fp32(out, tag, truth):
    sd = load(os.path.join(out, f"{tag}_fp32", "pytorch_model.bin"))
    assert sorted(sd) == sorted(truth)
    for name, states in truth.items():
        assert_equal(f"pytorch_model.bin {name}", sd[name], states["fp32"])


def main():
    results = Results()
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CONFIGS:
            ckpt, truth_path = os.path.join(tmp, name), os.path.join(tmp, name + ".truth.pt")
            subprocess.run(["/usr/bin/python3", os.path.join(REPO, "bench", "make_checkpoint.py"), "--out", ckpt,
                            "--truth", truth_path, *args], check=True, stdout=subprocess.DEVNULL)
            truth = load(truth_path)
            tag = open(os.path.join(ckpt, "latest")).read().strip()
            dtype = "fp32" if "fp32" in args else "bf16"
            ws = int(args[args.index("--world-size") + 1])
            results.check(f"{name}: inspect and verify", lambda: (run("inspect", ckpt), run("verify", ckpt)))

            def universal(ckpt=ckpt, name=name, tag=tag, truth=truth):
                out = os.path.join(tmp, name + ".universal")
                run("export", "--no-cache", ckpt, out)
                check_universal(out, tag, truth)
            results.check(f"{name}: universal view", universal)
            for n in sorted({1, ws - 1, ws, ws + 1, 2 * ws + 1} - {0}):
                def reshard(ckpt=ckpt, name=name, tag=tag, truth=truth, n=n, dtype=dtype):
                    out = os.path.join(tmp, f"{name}.ws{n}")
                    run("export", "--no-cache", "--world-size", str(n), ckpt, out)
                    check_reshard(out, tag, truth, n, dtype)
                results.check(f"{name}: reshard view at N={n}", reshard)

            def fp32(ckpt=ckpt, name=name, tag=tag, truth=truth):
                out = os.path.join(tmp, name + ".fp32")
                run("export", "--no-cache", "--fp32", ckpt, out)
                check_fp32(out, tag, truth)
            results.check(f"{name}: consolidated weights", fp32)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
