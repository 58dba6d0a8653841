#!/usr/bin/env python3
"""One rank of an AutoEP fixture run (fixtures_model_parallel.py), started by launch.py inside the modern root.

    launch.py -n W -- autoep_worker.py --spec SPEC.json --phase train|resume

SPEC.json: {"ds_config": {... "expert_parallel": {"enabled": true, "autoep_size": E, "preset_model": "mixtral"}},
            "mixtral": {MixtralConfig kwargs}, "steps": K, "extra": 2, "ckpt": DIR, "result": PATH}
train:  torch.manual_seed(1234); transformers.MixtralForCausalLM(MixtralConfig(**mixtral)) built in-process (no
        download); deepspeed.initialize(model, model.parameters(), config): the engine replaces each MoE block by
        AutoEP's layer, each rank keeping num_local_experts / E experts; K steps, rank r taking rows [2r, 2r+2) of step
        s's batch (every rank is a data-parallel rank for the dense params); live state; engine.save_checkpoint(DIR);
        `extra` more steps (losses_after). Rank 0 writes the result JSON.
live state: common.live_state on every rank (dense params: whole over all ranks; expert params: this rank's experts,
        whole over its expert-data-parallel group); the expert params of the E ranks of an expert-parallel group are
        gathered (all_gather_object) and concatenated along dim 0 (the expert dim) in group-rank order (rank i of
        the group holds experts [i*n, (i+1)*n): the generator's comparison with ds_to_universal's output checks it).
resume: a model initialised with seed 4321, deepspeed.initialize the same way, engine.load_checkpoint(DIR), the live
        state again, then `extra` steps on batches K..K+extra-1.
"""
import base64
import json
import os
import sys

import shims

shims.apply()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import deepspeed  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def is_expert(name):
    return ".experts." in name


def ep_group(ep):
    from deepspeed.utils import groups
    g = groups._get_expert_parallel_group(f"ep_size_{ep}")
    return g, dist.get_rank(group=g), dist.get_world_size(group=g)


def batch(step, rank, world, vocab, mb=2, seq=8):
    g = torch.Generator().manual_seed(1000 + step)
    tok = torch.randint(0, vocab, (mb * world, seq), generator=g)
    return tok[rank * mb:(rank + 1) * mb]


def dec(r):
    dt = getattr(torch, r["dtype"])
    raw = bytearray(base64.b64decode(r["b64"]))
    t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
    return t.reshape(r["shape"]).clone()


def gather_experts(tree, epg, ep_world, path_keys):
    """{name: {key: rec}} or {name: rec}: expert entries gathered over the EP group and concatenated along dim 0."""
    parts = [None] * ep_world
    dist.all_gather_object(parts, {n: e for n, e in tree.items() if is_expert(n)}, group=epg)
    how = {}
    for name in parts[0]:
        if path_keys:
            for k, r in tree[name].items():
                if isinstance(r, dict) and "b64" in r:
                    shards = [dec(p[name][k]) for p in parts]
                    tree[name][k] = common.trec(torch.cat(shards, 0))
                    how.setdefault(name, {})[k] = [list(s.shape) for s in shards]
        else:
            shards = [dec(p[name]) for p in parts]
            tree[name] = common.trec(torch.cat(shards, 0))
            how[name] = [list(s.shape) for s in shards]
    return how


def strip(tree):
    for ent in tree.values():
        for r in (ent.values() if isinstance(ent, dict) and "b64" not in ent else [ent]):
            if isinstance(r, dict):
                r.pop("b64", None)


def full_state(engine, values, epg, ep_world):
    live = common.live_state(engine, values=True)
    live["ep_gather"] = {"how": "expert params: concatenated along dim 0 over the expert-parallel group, in group "
                                "rank order", "shard_shapes": gather_experts(live["params"], epg, ep_world, True)}
    mod = common.module_values(engine.module, values=True)
    mod["ep_gather_shard_shapes"] = gather_experts(mod["params"], epg, ep_world, False)
    if not values:
        strip(live["params"])
        strip(mod["params"])
        strip(mod["buffers"])
    return live, mod


def autoep_layer_info(engine):
    fn = getattr(engine, "_collect_autoep_layer_info", None) or getattr(engine, "_get_autoep_layer_info", None)
    try:
        return fn() if fn else None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def main():
    phase, spec, rank, world = common.start(watchdog_seconds=400)
    cfg = spec["ds_config"]
    deepspeed.init_distributed(dist_backend="gloo")

    torch.manual_seed(1234 if phase == "train" else 4321)
    mcfg = transformers.MixtralConfig(**spec["mixtral"])
    model = transformers.MixtralForCausalLM(mcfg)
    info = common.model_params(model)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    ep = cfg["expert_parallel"]["autoep_size"]
    epg, ep_rank, ep_world = ep_group(ep)
    vocab = spec["mixtral"]["vocab_size"]

    def step(s):
        ids = batch(s, rank, world, vocab)
        out = engine(input_ids=ids, labels=ids)
        engine.backward(out.loss)
        engine.step()
        return float(out.loss.detach().float())

    K, extra = spec["steps"], spec["extra"]
    res = {"phase": phase, "world_size": world, "ep_world_size": ep_world}
    lay = [None] * world
    groups_of = {}
    for n, p in engine.module.named_parameters():
        # ZeRO-1/2 keep a param's partition group in _dp_group, ZeRO-3 in ds_process_group
        g = getattr(p, "_dp_group", None) or getattr(p, "ds_process_group", None)
        groups_of[n] = None if g is None else dist.get_process_group_ranks(g)
    dist.all_gather_object(lay, {"rank": rank, "ep_rank": ep_rank, "ep_group": dist.get_process_group_ranks(epg),
                                 "zero_group_of_expert_params": sorted({str(v) for n, v in groups_of.items()
                                                                        if is_expert(n)}),
                                 "zero_group_of_dense_params": sorted({str(v) for n, v in groups_of.items()
                                                                       if not is_expert(n)})})
    res["rank_layout"] = lay
    if phase == "train":
        res["model"] = info
        res["engine_params"] = {n: list(p.shape) for n, p in engine.module.named_parameters()}
        res["module_classes"] = {n: f"{type(m).__module__}.{type(m).__qualname__}"
                                 for n, m in engine.module.named_modules() if "layers.1" not in n}
        losses = [step(s) for s in range(K)]
        live, mod = full_state(engine, True, epg, ep_world)
        res["live"], res["module"] = live, mod
        res["lr_at_save"] = [g["lr"] for g in engine.optimizer.param_groups]
        res["param_groups"] = common.param_groups(engine.basic_optimizer)
        res["global_steps"], res["global_samples"] = engine.global_steps, engine.global_samples
        res["skipped_steps"] = engine.skipped_steps
        common.save_and_train_on(engine, spec, "tests/tools/modern/autoep_worker.py", losses, step, K, extra, res)
    else:
        common.load_for_resume(engine, spec, res)
        live, mod = full_state(engine, False, epg, ep_world)
        res["live"], res["module"] = live, mod
        res["global_steps"] = engine.global_steps
        after = [step(s) for s in range(K, K + extra)]
        res["losses_after_per_rank"], res["losses_after"] = common.gather_losses(after)
    common.write_result(spec, phase, json.loads(json.dumps(res, default=str)))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
