#!/usr/bin/python3
"""Each framework's resume path, replayed over a writable mount of its run at N.

tests/tools/framework_layouts.py lays the W=2 fixtures out as HF Trainer
(plain and PEFT), accelerate (two models), LLaMA-Factory v1, Lightning
Trainer and Fabric, Megatron-DeepSpeed, OpenRLHF, open-instruct, verl and a
plain multi-tag root write them. The directory holding all of them is mounted
`--world-size N --upper U` for N = 1, 2, 3 (below, at and above W), and for
each framework the files its resume path opens are opened in its order, from
its source (../shared/reference/frameworks.md): HF get_last_checkpoint, glob
global_step*, latest, rng_state_{r}.pth (rng_state.pth at N = 1), the best
checkpoint; accelerate its tags and random_states_{r}.pkl with one step;
Lightning <path>/checkpoint/ through last.ckpt; OpenRLHF's subdirectory count
and size sum; open-instruct's global_step* name parsing; verl's numeric tag.
Then every tag a framework would load is checked as DeepSpeed would find it at
N: rank files 0..N-1 and no more, each model-states file saying
dp_world_size N. Real DeepSpeed loads from such roots in
tests/deepspeed/run_dir_check.sh.

usage: framework_replay_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import glob
import json
import os
import pickle
import re
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import framework_layouts  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

deepspeed_stand_ins.install()
UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check


def deepspeed_finds(root, tag, n):
    """What engine.load_checkpoint(root, tag) opens at N ranks, checked."""
    d = os.path.join(root, tag)
    names = set(os.listdir(d))
    optim = sorted(x for x in names if x.endswith("optim_states.pt"))
    assert len(optim) == n, (d, optim)
    zero3 = any(x.startswith("zero_pp_rank_") and x.endswith("model_states.pt") for x in names)
    models = sorted(x for x in names if x.endswith("model_states.pt"))
    assert len(models) == (n if zero3 else 1), (d, models)
    for m in models:
        sd = torch.load(os.path.join(d, m), map_location="cpu")
        assert sd["dp_world_size"] == n, (d, m, sd["dp_world_size"])
    for r in range(n):
        assert any(f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" in x for x in optim), (d, r, optim)


def client_state_carried(root, tag, n, state_for_rank, keys):
    """Every model-states file at N holds the framework's client state, rank 0's (ucfs(1), PER-RANK FILES)."""
    d = os.path.join(root, tag)
    want = state_for_rank(0)
    for name in sorted(os.listdir(d)):
        if not name.endswith("model_states.pt"):
            continue
        sd = torch.load(os.path.join(d, name), map_location="cpu")
        for k in keys:
            assert k in sd, (name, k)
            got, exp = sd[k], want[k]
            if isinstance(exp, torch.Tensor):
                assert torch.equal(got, exp), (name, k)
            elif k == "rng_states":
                assert torch.equal(got["torch_cpu_rng_state"], exp["torch_cpu_rng_state"]), (name, k)
            elif k not in ("args", "rng_state"):
                assert got == exp, (name, k, got, exp)
        if "args" in keys:
            assert sd["args"].consumed_train_samples == 48 and sd["iteration"] == 4, name


def rank_file(run, name_at, n, w):
    """Ranks 0..N-1 of a per-rank family load; new ranks are rank r mod W's bytes; none beyond."""
    for r in range(n):
        with open(os.path.join(run, name_at(r)), "rb") as f:
            mine = f.read()
        if r >= w:
            with open(os.path.join(run, name_at(r % w)), "rb") as f:
                assert f.read() == mine, name_at(r)
    assert not os.path.exists(os.path.join(run, name_at(max(n, w)))), name_at(max(n, w))
    for r in range(n, w):
        assert not os.path.exists(os.path.join(run, name_at(r))), name_at(r)


def replay_hf(run, n, w, peft):
    # Trainer.train(resume_from_checkpoint=True): get_last_checkpoint
    ckpts = [d for d in os.listdir(run) if re.match(r"^checkpoint-(\d+)$", d) and os.path.isdir(os.path.join(run, d))]
    last = os.path.join(run, max(ckpts, key=lambda d: int(d.split("-")[1])))
    assert last.endswith("checkpoint-8"), last
    state = json.load(open(os.path.join(last, "trainer_state.json")))
    # deepspeed_load_checkpoint: glob(global_step*) must find something
    assert glob.glob(os.path.join(last, "global_step*")), last
    tag = open(os.path.join(last, "latest")).read().strip()
    deepspeed_finds(last, tag, n)
    # _load_rng_state
    if n > 1:
        rank_file(last, lambda r: f"rng_state_{r}.pth", n, w)
        for r in range(n):
            assert "cpu" in torch.load(os.path.join(last, f"rng_state_{r}.pth"))
    else:
        assert torch.load(os.path.join(last, "rng_state.pth"))["rank"] == 0
    # load_best_model_at_end re-runs deepspeed_load_checkpoint on the best one
    best = os.path.join(run, os.path.basename(state["best_model_checkpoint"]))
    deepspeed_finds(best, open(os.path.join(best, "latest")).read().strip(), n)
    names = os.listdir(last)
    if peft:
        assert "adapter_model.safetensors" in names and "model.safetensors" not in names, names
        # Saved with exclude_frozen_parameters: at N too, no frozen param in the
        # model states and no frozen shapes (what DeepSpeed at N would save).
        excluded = json.load(open(os.path.join(last, framework_layouts.EXCLUDED)))
        assert excluded, excluded
        for m in (x for x in os.listdir(os.path.join(last, tag)) if x.endswith("model_states.pt")):
            sd = torch.load(os.path.join(last, tag, m), map_location="cpu")
            assert not set(excluded) & set(sd["module"]), (m, excluded)
            assert sd["frozen_param_shapes"] is None and sd["frozen_param_fragments"] is None, m
            assert set(sd["param_shapes"][0]) - set(excluded), m
    else:
        assert "model.safetensors" in names, names  # from_pretrained(last) finds weights
    assert not any(x.endswith(("_universal", "_fp32")) for x in names), names


def replay_accelerate(run, n, w, llamafactory):
    # load_state(dir): every model's tag, explicitly
    for tag in ("pytorch_model", "pytorch_model_1"):
        deepspeed_finds(run, tag, n)
    rank_file(run, lambda r: f"random_states_{r}.pkl", n, w)
    steps = {torch.load(os.path.join(run, f"random_states_{r}.pkl"))["step"] for r in range(n)}
    assert steps == {12}, steps  # one step on every rank: gradient accumulation agrees
    for i in range(w):  # registered objects, whatever N
        with open(os.path.join(run, f"custom_checkpoint_{i}.pkl"), "rb") as f:
            assert pickle.load(f) == {"object": i}
    if llamafactory:
        rank_file(os.path.join(run, "dataloader"), lambda r: f"rank_{r}.pt", n, w)
        assert os.path.exists(os.path.join(run, "CHECKPOINT_COMPLETE"))
        assert json.load(open(os.path.join(run, "metadata.json")))["global_step"] == 12


def replay_lightning(run, n, fabric):
    path = os.path.join(run, "fabric/step=4.ckpt" if fabric else "checkpoints/last.ckpt")
    if not fabric:  # the run's link, shown as the link it is
        assert os.readlink(path) == "epoch=0-step=4.ckpt", os.readlink(path)
    assert os.path.isdir(os.path.join(path, "checkpoint")), path  # _validate_checkpoint_directory
    tag = "checkpoint" if fabric else open(os.path.join(path, "latest")).read().strip()
    deepspeed_finds(path, tag, n)
    if not fabric:
        client_state_carried(path, tag, n, framework_layouts.lightning_client_state,
                             ["epoch", "global_step", "loops", "callbacks", "lr_schedulers", "hyper_parameters"])


def replay_megatron(run, n):
    root = os.path.join(run, "checkpoints")
    assert open(os.path.join(root, "latest_checkpointed_iteration.txt")).read() == "4"
    deepspeed_finds(root, open(os.path.join(root, "latest")).read().strip(), n)
    # Megatron exits without `iteration`; it indexes rng_state[0] without --data-parallel-random-init.
    client_state_carried(root, "global_step4", n, framework_layouts.megatron_client_state,
                         ["args", "checkpoint_version", "iteration", "tokens", "rng_state"])


def replay_openrlhf(run, n):
    for part in ("_actor", "_critic"):
        root = os.path.join(run, "ckpt", part)
        # save_ckpt's housekeeping: every subdir counts, every file's size sums
        subdirs = [d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("best")]
        assert subdirs == ["global_step4"], subdirs
        total = sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(root) for f in fs)
        assert total > 0
        tag = open(os.path.join(root, "latest")).read().strip()
        deepspeed_finds(root, tag, n)
        assert json.load(open(os.path.join(root, tag, "metric.json"))) == {"reward": 0.25}


def replay_open_instruct(run, n):
    root = os.path.join(run, "checkpoint_state")
    # calibrate_checkpoint_state_dir parses every global_step* name
    steps = [int(d.replace("global_step", "")) for d in os.listdir(root) if d.startswith("global_step")]
    assert steps == [4], steps
    deepspeed_finds(root, open(os.path.join(root, "latest")).read().strip(), n)
    assert os.path.exists(os.path.join(root, "ref_policy", "pytorch_model.bin"))
    # Each rank saved its own rng_states and rank; at N every rank's file holds rank 0's.
    client_state_carried(root, "global_step4", n, framework_layouts.open_instruct_client_state,
                         ["training_step", "rng_states", "rank"])


def replay_verl(run, n):
    root = os.path.join(run, "global_step_4", "actor", "step_4")
    tag = open(os.path.join(root, "latest")).read().strip()
    assert tag == "4"
    deepspeed_finds(root, tag, n)


def replay_plain(run, n):
    for tag in ("global_step2", "global_step4", "global_step6"):
        deepspeed_finds(run, tag, n)


REPLAYS = {
    "hf_trainer": lambda run, n, w: replay_hf(run, n, w, False),
    "hf_trainer_peft": lambda run, n, w: replay_hf(run, n, w, True),
    "accelerate": lambda run, n, w: replay_accelerate(run, n, w, False),
    "llamafactory_v1": lambda run, n, w: replay_accelerate(run, n, w, True),
    "lightning": lambda run, n, w: replay_lightning(run, n, False),
    "lightning_fabric": lambda run, n, w: replay_lightning(run, n, True),
    "megatron_deepspeed": lambda run, n, w: replay_megatron(run, n),
    "openrlhf": lambda run, n, w: replay_openrlhf(run, n),
    "open_instruct": lambda run, n, w: replay_open_instruct(run, n),
    "verl": lambda run, n, w: replay_verl(run, n),
    "plain_root": lambda run, n, w: replay_plain(run, n),
}


def test(base):
    runs = os.path.join(base, "runs")
    layouts = framework_layouts.all_layouts(FIXTURES, runs)
    assert sorted(l.framework for l in layouts) == sorted(REPLAYS)
    before = mount_testing.tree_sha256(runs)
    for n in (1, 2, 3):
        m = mount_testing.Mount(UCFS, runs, "hf_trainer", "--no-cache", "--world-size", str(n),
                                "--upper", os.path.join(base, f"upper{n}"))
        try:
            for layout in layouts:
                run = os.path.join(m.dir, os.path.basename(layout.run))
                check(f"{layout.framework} resumes at N={n} (W={layout.world_size})",
                      lambda run=run, layout=layout: REPLAYS[layout.framework](run, n, layout.world_size))
        finally:
            m.close()

    def unchanged():
        assert mount_testing.tree_sha256(runs) == before
    check("the runs' sha256 is unchanged", unchanged)


base = tempfile.mkdtemp(prefix="ucfs_replay_")
try:
    test(base)
finally:
    shutil.rmtree(base)
sys.exit(results.finish())
