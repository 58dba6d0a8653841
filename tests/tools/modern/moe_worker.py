#!/usr/bin/env python3
"""One rank of a native DeepSpeed MoE fixture run (fixtures_model_parallel.py), started by launch.py in the root.

    launch.py -n W -- moe_worker.py --spec SPEC.json --phase train|resume

SPEC.json: {"ds_config": {...}, "ep_size": E, "num_experts": N, "steps": K, "extra": 2, "ckpt": DIR, "result": PATH}
train:  torch.manual_seed(1234); MoENet() = embed [61,16] -> deepspeed.moe.layer.MoE(16, Expert (fc1 [16,16]+[16],
        fc2 [16,16]+[16]), num_experts N, ep_size E, k 1, use_rts False, drop_tokens False) -> norm [16]+[16] ->
        head [61,16]+[61]; loss = cross-entropy + 0.01 * the MoE's l_aux; param groups from deepspeed.moe.utils.
        split_params_into_different_moe_groups_for_optimizer (dense, and the experts in a group of their own);
        K steps, rank r taking rows [2r, 2r+2) of step s's batch; live state; engine.save_checkpoint(DIR); `extra`
        more steps (losses_after). Rank 0 writes the result JSON.
live state: common.live_state on every rank (dense params whole over all ranks; expert params this rank's local
        experts, whole over its expert-data-parallel group); the local experts of the E ranks of an expert-parallel
        group are gathered (all_gather_object) and renamed to their global expert id (ep_rank * N/E + local id), the
        numbering DeepSpeed's per-expert checkpoint files use.
resume: a model initialised with seed 4321, deepspeed.initialize the same way, engine.load_checkpoint(DIR), the live
        state again, then `extra` steps on batches K..K+extra-1.
"""
import json
import os
import re
import sys

import shims

shims.apply()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.moe.layer import MoE  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

VOCAB, HID = 61, 16
EXPERT_RE = re.compile(r"^(.*\.deepspeed_experts\.)(\d+)(\..*)$")


class Expert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(HID, HID)
        self.fc2 = torch.nn.Linear(HID, HID)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class MoENet(torch.nn.Module):
    def __init__(self, num_experts, ep_size):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HID)
        self.moe = MoE(HID, Expert(), num_experts=num_experts, ep_size=ep_size, k=1, use_rts=False,
                       drop_tokens=False)
        self.norm = torch.nn.LayerNorm(HID)
        self.head = torch.nn.Linear(HID, VOCAB)

    def forward(self, ids, labels):
        h = self.embed(ids)
        m, l_aux, _ = self.moe(h)
        logits = self.head(self.norm(h + m))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1)) + 0.01 * l_aux


def batch(step, rank, world, mb=2, seq=8):
    g = torch.Generator().manual_seed(1000 + step)
    tok = torch.randint(0, VOCAB, (mb * world, seq + 1), generator=g)
    t = tok[rank * mb:(rank + 1) * mb]
    return t[:, :-1], t[:, 1:]


def gather_experts(tree, epg, ep_world, ep_rank, n_local):
    """Renames this rank's local expert entries to global ids and gathers them over the EP group (in place)."""
    mine = {}
    for name in [n for n in tree if EXPERT_RE.match(n)]:
        a, i, b = EXPERT_RE.match(name).groups()
        mine[f"{a}{ep_rank * n_local + int(i)}{b}"] = tree.pop(name)
    parts = [None] * ep_world
    dist.all_gather_object(parts, mine, group=epg)
    for p in parts:
        tree.update(p)
    return sorted(k for p in parts for k in p)


def strip(tree):
    for ent in tree.values():
        for r in (ent.values() if isinstance(ent, dict) and "b64" not in ent else [ent]):
            if isinstance(r, dict):
                r.pop("b64", None)


def main():
    phase, spec, rank, world = common.start(watchdog_seconds=400)
    cfg = spec["ds_config"]
    deepspeed.init_distributed(dist_backend="gloo")
    E, N = spec["ep_size"], spec["num_experts"]

    torch.manual_seed(1234 if phase == "train" else 4321)
    model = MoENet(N, E)
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer
    groups_in = split_params_into_different_moe_groups_for_optimizer(
        {"params": list(model.parameters()), "name": "all"})
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=groups_in, config=cfg)
    from deepspeed.utils import groups
    epg = groups._get_expert_parallel_group(f"ep_size_{E}")
    ep_rank, ep_world = dist.get_rank(group=epg), dist.get_world_size(group=epg)
    n_local = N // E

    def step(s):
        x, y = batch(s, rank, world)
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        return float(loss.detach().float())

    def state(values):
        live = common.live_state(engine, values=True)
        live["ep_gather"] = gather_experts(live["params"], epg, ep_world, ep_rank, n_local)
        mod = common.module_values(engine.module, values=True)
        gather_experts(mod["params"], epg, ep_world, ep_rank, n_local)
        if not values:
            strip(live["params"])
            strip(mod["params"])
            strip(mod["buffers"])
        return live, mod

    K, extra = spec["steps"], spec["extra"]
    res = {"phase": phase, "world_size": world, "ep_world_size": ep_world}
    lay = [None] * world
    dist.all_gather_object(lay, {"rank": rank, "ep_rank": ep_rank, "ep_group": dist.get_process_group_ranks(epg),
                                 "expert_data_parallel_group": dist.get_process_group_ranks(
                                     groups._get_expert_data_parallel_group(f"ep_size_{E}"))})
    res["rank_layout"] = lay
    if phase == "train":
        info = common.model_params(engine.module)
        # the model's params with global expert ids (every rank's local experts), as the live state names them
        full = []
        for p in info["params"]:
            m = EXPERT_RE.match(p["name"])
            if m:
                for r in range(E):
                    full.append(dict(p, name=f"{m.group(1)}{r * n_local + int(m.group(2))}{m.group(3)}"))
            else:
                full.append(p)
        info["params"] = full
        res["model"] = info
        res["param_groups_given"] = [{k: v for k, v in g.items() if k != "params"} | {"n_params": len(g["params"])}
                                     for g in groups_in]
        losses = [step(s) for s in range(K)]
        res["live"], res["module"] = state(True)
        res["lr_at_save"] = [g["lr"] for g in engine.optimizer.param_groups]
        res["param_groups"] = common.param_groups(engine.basic_optimizer)
        res["global_steps"], res["global_samples"] = engine.global_steps, engine.global_samples
        res["skipped_steps"] = engine.skipped_steps
        common.save_and_train_on(engine, spec, "tests/tools/modern/moe_worker.py", losses, step, K, extra, res)
    else:
        common.load_for_resume(engine, spec, res)
        res["live"], res["module"] = state(False)
        res["global_steps"] = engine.global_steps
        after = [step(s) for s in range(K, K + extra)]
        res["losses_after_per_rank"], res["losses_after"] = common.gather_losses(after)
    common.write_result(spec, phase, json.loads(json.dumps(res, default=str)))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
