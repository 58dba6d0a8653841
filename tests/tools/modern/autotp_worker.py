#!/usr/bin/env python3
"""One rank of an AutoTP fixture run (fixtures_model_parallel.py), started by launch.py inside the modern root.

    launch.py -n W -- autotp_worker.py --spec SPEC.json --phase train|resume

SPEC.json: {"ds_config": {... "tensor_parallel": {"autotp_size": T}}, "llama": {LlamaConfig kwargs}, "steps": K,
            "extra": 2, "ckpt": DIR, "result": PATH}
train:  torch.manual_seed(1234); transformers.LlamaForCausalLM(LlamaConfig(**llama)) built in-process (no download);
        deepspeed.initialize(model, model.parameters(), config) -- the engine shards the model with AutoTP
        (tensor_parallel.autotp_size T; DeepSpeed makes T x D groups, D = W / T); K steps; each data-parallel rank d
        takes rows [2d, 2d+2) of step s's batch (every rank of a TP group sees the same rows); live state; engine.
        save_checkpoint(DIR); `extra` more steps (losses_after). Rank 0 writes the result JSON.
live state: common.live_state on every rank gives each param's TP shard whole over the data-parallel group (ZeRO's
        own fragments, all_reduce over p._dp_group); the shards of the T ranks of a TP group are gathered
        (all_gather_object) and put together into the full (logical) param twice: by DeepSpeed's own affine map
        (deepspeed.checkpoint.affine.ParamAffineMap.rebuild on the model's ds_universal_checkpoint_info) and by a
        plain rule (equal shards = replicated; else torch.cat along the one dim where the shard shapes differ from
        the logical shape); the two must agree (recorded per param). The module values (lp params, buffers) the same
        way.
resume: a model initialised with seed 4321, deepspeed.initialize the same way, engine.load_checkpoint(DIR), the live
        state again, then `extra` steps on batches K..K+extra-1.
"""
import os
import re
import sys

import shims

shims.apply()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import deepspeed  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def tp_dp():
    from deepspeed.utils import groups
    tpg = groups.get_tensor_model_parallel_group()
    dpg = groups.get_data_parallel_group()
    return (tpg, dist.get_rank(group=tpg), dist.get_world_size(group=tpg),
            dpg, dist.get_rank(group=dpg), dist.get_world_size(group=dpg))


def batch(step, dp_rank, dp_world, vocab, mb=2, seq=8):
    g = torch.Generator().manual_seed(1000 + step)
    tok = torch.randint(0, vocab, (mb * dp_world, seq), generator=g)
    return tok[dp_rank * mb:(dp_rank + 1) * mb]


def uc_info(module):
    from deepspeed.checkpoint.constants import UNIVERSAL_CHECKPOINT_INFO
    return getattr(module, UNIVERSAL_CHECKPOINT_INFO, None)


def affine_entry(info, name):
    params = ((info or {}).get("affine_map") or {}).get("params") or {}
    for pat, ent in params.items():
        if re.match(pat, name):
            return pat, ent
    return None, None


def logical_shape(info, name):
    _, ent = affine_entry(info, name)
    return list(ent["logical_shape"]) if ent else None


def plain_rebuild(shards, logical):
    """Full tensor from TP shards without DeepSpeed: equal shards = replicated; else cat along the dim whose size
    differs from the logical shape."""
    if all(s.shape == shards[0].shape and torch.equal(s, shards[0]) for s in shards[1:]) and \
            (logical is None or list(shards[0].shape) == logical):
        return shards[0], "replicated"
    dims = [d for d in range(shards[0].dim()) if logical is None or shards[0].shape[d] != logical[d]]
    dim = dims[0] if len(dims) == 1 else 0
    return torch.cat(shards, dim=dim), f"cat dim {dim}"


def combine(recs, info, name):
    """recs: one record per TP rank (with b64) of the same param -> (full record, how)."""
    from deepspeed.checkpoint.affine import ParamAffineMap
    import base64
    shards = []
    for r in recs:
        dt = getattr(torch, r["dtype"])
        raw = bytearray(base64.b64decode(r["b64"]))
        t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        shards.append(t.reshape(r["shape"]).clone())
    logical = logical_shape(info, name)
    plain, how = plain_rebuild(shards, logical)
    out = {"plain": how, "shard_shapes": [list(s.shape) for s in shards]}
    pat, ent = affine_entry(info, name)
    if ent is not None:
        try:
            amap = ParamAffineMap.from_dict(ent)
            full = amap.rebuild({i: s.float() for i, s in enumerate(shards)}).to(shards[0].dtype)
            out["affine_pattern"] = pat
            out["affine_equals_plain"] = bool(full.shape == plain.shape and torch.equal(full, plain))
        except Exception as e:  # noqa: BLE001
            out["affine_error"] = f"{type(e).__name__}: {e}"[:300]
    return common.trec(plain), out


def gather_tp(rec_tree, tpg, tp_world, info, path_keys):
    """rec_tree: {name: {key: record}} (or {name: record}) of this rank; gathered over the TP group and combined."""
    parts = [None] * tp_world
    dist.all_gather_object(parts, rec_tree, group=tpg)
    full, how = {}, {}
    for name, ent in parts[0].items():
        if path_keys:
            full[name], how[name] = {}, {}
            for k, r in ent.items():
                if isinstance(r, dict) and "b64" in r:
                    full[name][k], how[name][k] = combine([p[name][k] for p in parts], info, name)
                else:
                    full[name][k] = r
        else:
            full[name], how[name] = combine([p[name] for p in parts], info, name)
    return full, how, [{n: ({k: r.get("shape") for k, r in e.items() if isinstance(r, dict)} if path_keys
                            else e.get("shape")) for n, e in p.items()} for p in parts]


def strip(tree):
    for ent in tree.values():
        for r in (ent.values() if isinstance(ent, dict) and "b64" not in ent else [ent]):
            if isinstance(r, dict):
                r.pop("b64", None)
    return tree


def full_state(engine, values, tpg, tp_world):
    info = uc_info(engine.module)
    live = common.live_state(engine, values=True)
    params, how, shard_shapes = gather_tp(live["params"], tpg, tp_world, info, True)
    live["params"] = params
    live["tp_gather"] = {"how": how, "tp_shard_shapes_per_tp_rank": shard_shapes}
    mod = common.module_values(engine.module, values=True)
    mp, mhow, _ = gather_tp(mod["params"], tpg, tp_world, info, False)
    mb, bhow, _ = gather_tp(mod["buffers"], tpg, tp_world, info, False)
    mod = {"params": mp, "buffers": mb, "tp_gather": {"params": mhow, "buffers": bhow}}
    if not values:
        strip(live["params"])
        strip(mod["params"])
        strip(mod["buffers"])
    return live, mod


def dp_group_facts(engine):
    """Which process group ZeRO partitions each param over (ranks), to show it is the DP group."""
    out = {}
    for n, p in engine.module.named_parameters():
        g = getattr(p, "_dp_group", None)
        if g is None:
            g = getattr(p, "ds_process_group", None)
        out[n] = None if g is None else dist.get_process_group_ranks(g)
    return out


def main():
    phase, spec, rank, world = common.start(watchdog_seconds=400)
    cfg = spec["ds_config"]
    deepspeed.init_distributed(dist_backend="gloo")

    torch.manual_seed(1234 if phase == "train" else 4321)
    lcfg = transformers.LlamaConfig(**spec["llama"])
    model = transformers.LlamaForCausalLM(lcfg)
    info = common.model_params(model)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    tpg, tp_rank, tp_world, dpg, dp_rank, dp_world = tp_dp()
    vocab = spec["llama"]["vocab_size"]

    def step(s):
        ids = batch(s, dp_rank, dp_world, vocab)
        out = engine(input_ids=ids, labels=ids)
        engine.backward(out.loss)
        engine.step()
        return float(out.loss.detach().float())

    K, extra = spec["steps"], spec["extra"]
    res = {"phase": phase, "world_size": world, "tp_world_size": tp_world, "dp_world_size": dp_world}
    pg = [None] * world
    dist.all_gather_object(pg, {"rank": rank, "tp_rank": tp_rank, "dp_rank": dp_rank,
                                "tp_group": dist.get_process_group_ranks(tpg),
                                "dp_group": dist.get_process_group_ranks(dpg)})
    res["rank_layout"] = pg
    if phase == "train":
        losses = [step(s) for s in range(K)]
        live, mod = full_state(engine, True, tpg, tp_world)
        res["live"], res["module"] = live, mod
        res["lr_at_save"] = [g["lr"] for g in engine.optimizer.param_groups]
        res["param_groups"] = common.param_groups(engine.basic_optimizer)
        res["global_steps"], res["global_samples"] = engine.global_steps, engine.global_samples
        res["skipped_steps"] = engine.skipped_steps
        res["zero_partition_groups_of_params"] = dp_group_facts(engine)
        res["module_classes"] = {n: f"{type(m).__module__}.{type(m).__qualname__}"
                                 for n, m in engine.module.named_modules() if "layers.1" not in n}
        res["universal_checkpoint_info_live"] = common.finite(
            __import__("json").loads(__import__("json").dumps(uc_info(engine.module), default=str)))
        common.save_and_train_on(engine, spec, "tests/tools/modern/autotp_worker.py", losses, step, K, extra, res)
        res["model"] = info
    else:
        common.load_for_resume(engine, spec, res)
        live, mod = full_state(engine, False, tpg, tp_world)
        res["live"], res["module"] = live, mod
        res["global_steps"] = engine.global_steps
        after = [step(s) for s in range(K, K + extra)]
        res["losses_after_per_rank"], res["losses_after"] = common.gather_losses(after)
    common.write_result(spec, phase, res)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
