"""The real fixtures laid out as training frameworks write their run directories.

Built from each framework's saving code as ../shared/reference/frameworks.md
reads it (transformers Trainer, accelerate save_state, Lightning's
DeepSpeedStrategy and Fabric, Megatron-DeepSpeed, OpenRLHF, open-instruct
grpo_fast, verl's DeepSpeed checkpoint manager): where the DeepSpeed root and
its tags go, and the framework's own files beside them, per-rank ones written
with torch.save as each framework writes them. Every layout returns a
`Layout`: its roots (relative to the run), their tags, and the fixture each
tag is.

    python3 framework_layouts.py FIXTURES_DIR OUT_DIR   # writes every layout
"""
import dataclasses
import json
import os
import pickle
import random
import re
import shutil
import sys

import torch


@dataclasses.dataclass
class Root:
    path: str     # relative to the run directory
    tags: dict    # tag -> fixture
    latest: str


@dataclasses.dataclass
class Layout:
    framework: str
    run: str      # the run directory
    roots: list   # of Root
    world_size: int  # W, the fixtures' data-parallel size


def _tag(fixtures, fixture, dest):
    shutil.copytree(os.path.join(fixtures, fixture, "checkpoint", "global_step4"), dest)


def _write(path, data, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data)


# What each framework passes engine.save_checkpoint as client_state, which
# DeepSpeed keeps in every rank's model-states file (frameworks.md 1.3, 1.4,
# 1.6). Per rank: open-instruct saves each rank's own RNG state and rank.
def lightning_client_state(rank):
    return {"epoch": 0, "global_step": 4, "pytorch-lightning_version": "2.4.0",
            "loops": {"fit_loop": {"epoch_progress": {"total": {"completed": 0}}}},
            "callbacks": {"ModelCheckpoint": {"best_model_score": None}}, "lr_schedulers": [{"last_epoch": 4}],
            "hparams_name": "kwargs", "hyper_parameters": {"lr": 0.1}}


def megatron_client_state(rank):
    import argparse
    return {"args": argparse.Namespace(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                       consumed_train_samples=48),
            "checkpoint_version": 3.0, "iteration": 4, "tokens": 4096,
            "rng_state": [{"random_rng_state": random.getstate(), "torch_rng_state": torch.get_rng_state()}]}


def open_instruct_client_state(rank):
    torch.manual_seed(rank)
    return {"training_step": 4, "rng_states": {"torch_cpu_rng_state": torch.get_rng_state()}, "rank": rank}


def _add_client_state(tag_dir, state_for_rank):
    """Rewrites the tag's model-states files as DeepSpeed saves them with client_state."""
    for name in sorted(os.listdir(tag_dir)):
        if not name.endswith("model_states.pt"):
            continue
        m = re.match(r"zero_pp_rank_(\d+)_", name)
        path = os.path.join(tag_dir, name)
        sd = torch.load(path, map_location="cpu")
        sd.update(state_for_rank(int(m.group(1)) if m else 0))
        torch.save(sd, path)


def _zero_to_fp32(root):
    # DeepSpeed's save copies its script into the root, executable.
    _write(os.path.join(root, "zero_to_fp32.py"), "#!/usr/bin/env python\n# zero_to_fp32\n")
    os.chmod(os.path.join(root, "zero_to_fp32.py"), 0o755)


def _rng_state(rank):
    """What HF Trainer's _save_rng_state torch.saves per rank (no CUDA here)."""
    torch.manual_seed(1000 + rank)
    random.seed(1000 + rank)
    return {"python": random.getstate(), "numpy": None, "cpu": torch.random.get_rng_state(), "rank": rank}


# The frozen params a PEFT run's tag was saved without (frozen_params_of).
EXCLUDED = "excluded_frozen_params.json"


def exclude_frozen_parameters(tag_dir):
    """The tag as engine.save_checkpoint(exclude_frozen_parameters=True) saves it
    (HF Trainer passes it for a PEFT model): DeepSpeed 0.14.5's module_state_dict
    drops every frozen param from `module`, and _save_checkpoint then saves no
    frozen_param_shapes or frozen_param_fragments (engine.py). Records the
    names dropped beside the tag."""
    dropped = set()
    for name in sorted(os.listdir(tag_dir)):
        if not name.endswith("model_states.pt"):
            continue
        path = os.path.join(tag_dir, name)
        sd = torch.load(path, map_location="cpu")
        frozen = sd.get("frozen_param_shapes") or {}
        assert frozen, f"{path}: no frozen params to exclude"
        for n in frozen:
            sd["module"].pop(n, None)
            dropped.add(n)
        sd["frozen_param_shapes"] = None
        sd["frozen_param_fragments"] = None
        torch.save(sd, path)
    _write(os.path.join(os.path.dirname(tag_dir), EXCLUDED), json.dumps(sorted(dropped)))


def hf_trainer(fixtures, run, fixture, steps=(4, 8), world=2, peft=False):
    """transformers Trainer._save_checkpoint: output_dir/checkpoint-N/ is the DeepSpeed root."""
    roots = []
    for step in steps:
        name = f"checkpoint-{step}"
        root = os.path.join(run, name)
        tag = f"global_step{step}"
        _tag(fixtures, fixture, os.path.join(root, tag))
        _write(os.path.join(root, "latest"), tag)
        _zero_to_fp32(root)
        for r in range(world):
            torch.save(_rng_state(r), os.path.join(root, f"rng_state_{r}.pth"))
        state = {"global_step": step, "epoch": step / 8, "best_model_checkpoint": os.path.join(run, "checkpoint-4"),
                 "best_global_step": 4, "log_history": [{"loss": 1.0, "step": step}],
                 "stateful_callbacks": {}}
        _write(os.path.join(root, "trainer_state.json"), json.dumps(state, indent=2))
        torch.save({"per_device_train_batch_size": 6, "world_size": world}, os.path.join(root, "training_args.bin"))
        _write(os.path.join(root, "config.json"), json.dumps({"model_type": "test", "architectures": ["Test"]}))
        _write(os.path.join(root, "generation_config.json"), "{}")
        _write(os.path.join(root, "tokenizer_config.json"), "{}")
        _write(os.path.join(root, "special_tokens_map.json"), "{}")
        if peft:
            # PEFT: save_model writes the adapter; the base is not in the DS files.
            _write(os.path.join(root, "adapter_config.json"), json.dumps({"peft_type": "LORA", "r": 8}))
            _write(os.path.join(root, "adapter_model.safetensors"), b"adapter", "wb")
            exclude_frozen_parameters(os.path.join(root, tag))
        roots.append(Root(name, {tag: fixture}, tag))
    return Layout("hf_trainer_peft" if peft else "hf_trainer", run, roots, world)


def accelerate(fixtures, run, fixture_0, fixture_1, world=2, llamafactory=False):
    """Accelerator.save_state(output_dir): a tag per prepared model, latest names the last."""
    root = run
    _tag(fixtures, fixture_0, os.path.join(root, "pytorch_model"))
    _tag(fixtures, fixture_1, os.path.join(root, "pytorch_model_1"))
    _write(os.path.join(root, "latest"), "pytorch_model_1")
    _zero_to_fp32(root)
    for r in range(world):
        torch.manual_seed(r)
        torch.save({"step": 12, "random_state": random.getstate(), "numpy_random_seed": None,
                    "torch_manual_seed": torch.get_rng_state()}, os.path.join(root, f"random_states_{r}.pkl"))
        if llamafactory:
            os.makedirs(os.path.join(root, "dataloader"), exist_ok=True)
            torch.save({"rank": r, "samples_seen": 24 * (r + 1)}, os.path.join(root, "dataloader", f"rank_{r}.pt"))
    # Registered objects, numbered by object from 0 (not ranks).
    for i in range(world):
        with open(os.path.join(root, f"custom_checkpoint_{i}.pkl"), "wb") as f:
            pickle.dump({"object": i}, f)
    torch.save({"dl": 1}, os.path.join(root, "dl_state_dict.bin"))
    if llamafactory:
        _write(os.path.join(root, "metadata.json"), json.dumps({"global_step": 12, "epoch": 1}))
        _write(os.path.join(root, "CHECKPOINT_COMPLETE"), "")
    return Layout("llamafactory_v1" if llamafactory else "accelerate", run,
                  [Root("", {"pytorch_model": fixture_0, "pytorch_model_1": fixture_1}, "pytorch_model_1")], world)


def lightning(fixtures, run, fixture, world=2, fabric=False):
    """DeepSpeedStrategy.save_checkpoint: the .ckpt is a directory, tag `checkpoint`."""
    name = "checkpoints/epoch=0-step=4.ckpt" if not fabric else "fabric/step=4.ckpt"
    root = os.path.join(run, name)
    _tag(fixtures, fixture, os.path.join(root, "checkpoint"))
    _add_client_state(os.path.join(root, "checkpoint"), lightning_client_state)
    _write(os.path.join(root, "latest"), "checkpoint")
    _zero_to_fp32(root)
    if not fabric:
        os.symlink("epoch=0-step=4.ckpt", os.path.join(run, "checkpoints", "last.ckpt"))
    _write(os.path.join(run, "lightning_logs", "version_0", "hparams.yaml"), "lr: 0.1\n")
    return Layout("lightning_fabric" if fabric else "lightning", run, [Root(name, {"checkpoint": fixture}, "checkpoint")],
                  world)


def megatron_deepspeed(fixtures, run, fixture, world=2):
    """megatron/checkpointing.py: args.save is the root, default tags, a tracker file."""
    root = os.path.join(run, "checkpoints")
    _tag(fixtures, fixture, os.path.join(root, "global_step4"))
    _add_client_state(os.path.join(root, "global_step4"), megatron_client_state)
    _write(os.path.join(root, "latest"), "global_step4")
    _write(os.path.join(root, "latest_checkpointed_iteration.txt"), "4")
    _zero_to_fp32(root)
    return Layout("megatron_deepspeed", run, [Root("checkpoints", {"global_step4": fixture}, "global_step4")], world)


def openrlhf(fixtures, run, fixture, world=2):
    """OpenRLHF PPO save_ckpt: ckpt.path/_actor and _critic, metric.json inside each tag."""
    roots = []
    for part in ("_actor", "_critic"):
        root = os.path.join(run, "ckpt", part)
        _tag(fixtures, fixture, os.path.join(root, "global_step4"))
        _write(os.path.join(root, "global_step4", "metric.json"), json.dumps({"reward": 0.25}))
        _write(os.path.join(root, "latest"), "global_step4")
        _zero_to_fp32(root)
        roots.append(Root("ckpt/" + part, {"global_step4": fixture}, "global_step4"))
    return Layout("openrlhf", run, roots, world)


def open_instruct(fixtures, run, fixture, world=2):
    """grpo_fast: checkpoint_state_dir with default tags and ref_policy/ beside them."""
    root = os.path.join(run, "checkpoint_state")
    _tag(fixtures, fixture, os.path.join(root, "global_step4"))
    _add_client_state(os.path.join(root, "global_step4"), open_instruct_client_state)
    _write(os.path.join(root, "latest"), "global_step4")
    _zero_to_fp32(root)
    os.makedirs(os.path.join(root, "ref_policy"))
    torch.save({"w": torch.zeros(2)}, os.path.join(root, "ref_policy", "pytorch_model.bin"))
    return Layout("open_instruct", run, [Root("checkpoint_state", {"global_step4": fixture}, "global_step4")], world)


def verl(fixtures, run, fixture, world=2):
    """verl's DeepSpeedCheckpointManager: global_step_N/actor/step_N/, tag str(N)."""
    name = "global_step_4/actor/step_4"
    root = os.path.join(run, name)
    _tag(fixtures, fixture, os.path.join(root, "4"))
    _write(os.path.join(root, "latest"), "4")
    _write(os.path.join(run, "latest_checkpointed_iteration.txt"), "4")
    return Layout("verl", run, [Root(name, {"4": fixture}, "4")], world)


def plain_multi_tag(fixtures, run, fixture, world=2):
    """engine.save_checkpoint(dir) three times: one root, several tags."""
    for tag in ("global_step2", "global_step4", "global_step6"):
        _tag(fixtures, fixture, os.path.join(run, tag))
    _write(os.path.join(run, "latest"), "global_step6")
    _zero_to_fp32(run)
    return Layout("plain_root", run, [Root("", {t: fixture for t in ("global_step2", "global_step4", "global_step6")},
                                           "global_step6")], world)


def all_layouts(fixtures, base):
    """Every framework's layout, each in its own run directory under `base`, all from W=2 fixtures."""
    z3, z2 = "z3_bf16_ws2", "z2_tricky_fp32_ws2"
    d = lambda name: os.path.join(base, name)  # noqa: E731
    return [
        hf_trainer(fixtures, d("hf_trainer"), z3),
        hf_trainer(fixtures, d("hf_trainer_peft"), z2, peft=True),
        accelerate(fixtures, d("accelerate"), "z3_fp32_ws2", z3),
        accelerate(fixtures, d("llamafactory_v1"), z3, "z3_fp32_ws2", llamafactory=True),
        lightning(fixtures, d("lightning"), "z3_fp32_ws2"),
        lightning(fixtures, d("lightning_fabric"), z3, fabric=True),
        megatron_deepspeed(fixtures, d("megatron_deepspeed"), z2),
        openrlhf(fixtures, d("openrlhf"), z3),
        open_instruct(fixtures, d("open_instruct"), z3),
        verl(fixtures, d("verl"), "z3_fp32_ws2"),
        plain_multi_tag(fixtures, d("plain_root"), z2),
    ]


if __name__ == "__main__":
    for layout in all_layouts(sys.argv[1], sys.argv[2]):
        print(layout.framework, layout.run, [r.path for r in layout.roots])
