"""Helpers shared by the resume programs (tests/ecosystem/resume/*_resume.py): they run inside the modern root, one
per rank (started by harness/launch.py), and reuse the fixture generator's models, data and live-state capture
(tests/tools/modern/{models,common}.py), so what they load and train is exactly what the fixtures were made with.

The global batch is kept at any world size N: the rows a step trains on are the rows of the saving run's global
batch (GB rows), dealt out as N ranks x `gas` micro batches of `micro` rows (GB = N * gas * micro). Rank r's micro
batch j is rows [(r*gas + j)*micro, +micro): at the saving run's own W (gas 1, micro GB/W) this is the generator's
own split, rank r rows [r*micro, (r+1)*micro).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "tests", "tools", "modern"))

import common  # noqa: E402,F401  (re-exported: live_state, module_values, gather_losses, write_json, watchdog)
import models  # noqa: E402,F401


def rows(batch, r, j, micro, gas):
    """Rank r's micro batch j of a global batch (a tensor or tuple of tensors whose first dim is the GB rows)."""
    lo = (r * gas + j) * micro
    if isinstance(batch, (tuple, list)):
        return type(batch)(t[lo:lo + micro] for t in batch)
    return batch[lo:lo + micro]


def tricky_global(step, gb):
    """models.tricky_batch's global batch of `step`: GB rows (the same Generator draw as at W, mb * W = GB)."""
    x, y = models.tricky_batch(step, 0, 1, mb=gb)
    return x, y


def value_global(step, gb):
    """models.value_batch's global batch of `step` (x [GB, 8], y [GB]), the draws the saving run made."""
    return models.value_batch(step, 0, 1, mb=gb)


def step_losses(per_micro, gas):
    """The global loss of one step from this rank's micro-batch losses (each the mean over its equal-size rows):
    this rank's mean here; the mean over ranks (common.gather_losses) is then the mean over the global batch."""
    assert len(per_micro) == gas, (len(per_micro), gas)
    return sum(per_micro) / gas


def lr_scheduler_state(sched):
    return None if sched is None else lr_scheduler_state_dict(sched.state_dict())


def lr_scheduler_state_dict(sd):
    """The comparable part of a torch lr scheduler's state_dict (its lr_lambdas are not comparable)."""
    if sd is None:
        return None
    out = {}
    for k in ("last_epoch", "base_lrs", "_last_lr", "_step_count"):
        if k in sd:
            v = sd[k]
            out[k] = [float(x) for x in v] if isinstance(v, (list, tuple)) else v
    return out


def group_hyper(opt):
    return [{k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
             for k, v in g.items() if k != "params"} for g in opt.param_groups]


def load_spec(path):
    with open(path) as f:
        return json.load(f)


def spec_arg():
    """The spec the host's driver.py wrote for this program (--spec SPEC.json), loaded."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    return load_spec(ap.parse_args().spec)


def start(watchdog_seconds=400):
    """What every *_resume.py does first: its spec, the fixture's MODERN.json facts and recipe, a watchdog (the spec's
    "watchdog" seconds, else the program's default: a hung collective ends the run) and this rank's place.
    Returns (spec, facts, recipe, rank, world)."""
    spec = spec_arg()
    facts = load_spec(spec["modern"])
    common.watchdog(spec.get("watchdog", watchdog_seconds))
    return spec, facts, facts["recipe"]["spec"], common.rank(), common.world()


def keep_global_batch(ds_config, micro, gas, world):
    """The saving run's DeepSpeed config at `world` ranks with its global batch kept: micro batch `micro` and `gas`
    accumulation steps (GB = world * gas * micro). Returns (the config, a copy; GB)."""
    gb = ds_config["train_batch_size"]
    assert gb == micro * gas * world, (gb, micro, gas, world)
    return dict(ds_config, train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=gas,
                train_batch_size=gb), gb


def write_result(spec, res):
    common.write_json(spec["result"], res)
