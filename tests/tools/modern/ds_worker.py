#!/usr/bin/env python3
"""One rank of a plain-DeepSpeed fixture run (make_modern_fixtures.py), started by launch.py inside the modern root.

    launch.py -n W -- ds_worker.py --spec SPEC.json --phase train|resume

SPEC.json: {"ds_config": {...}, "steps": K, "extra": 2, "groups": "two"|"one", "lr_warmup": N, "ckpt": DIR,
            "result": PATH}
train:  torch.manual_seed(1234); TrickyNet(); deepspeed.initialize(model, model_parameters=<groups>, config,
        lr_scheduler=<LambdaLR warmup callable>); K steps on tricky_batch(s); live state (fp32 masters and optimizer
        state, via deepspeed.utils.safe_get_full_*); engine.save_checkpoint(DIR) (default tag global_step<K>,
        client_state {"recipe": ...}); `extra` more steps (losses_after). Rank 0 writes the result JSON.
resume: a model initialised with seed 4321, deepspeed.initialize the same way, engine.load_checkpoint(DIR) (latest),
        the live state again (compared by the generator with train's), then `extra` steps on batches K..K+extra-1.
"""
import os
import sys

import shims

shims.apply()

import torch  # noqa: E402
import deepspeed  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import models  # noqa: E402


def warmup(n):
    return lambda s: min(1.0, (s + 1) / n)


def main():
    phase, spec, rank, world = common.start(watchdog_seconds=240)
    cfg = spec["ds_config"]
    deepspeed.init_distributed(dist_backend="gloo")

    torch.manual_seed(models.INIT_SEED if phase == "train" else 4321)
    model = models.TrickyNet(gate_0dim=spec.get("gate_0dim", False))
    info = common.model_params(model)
    params = models.tricky_param_groups(model) if spec["groups"] == "two" else list(model.parameters())
    names_given = common.group_names(params, model)
    sched = (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, warmup(spec["lr_warmup"]))) \
        if spec.get("lr_warmup") else None
    engine, optimizer, _, lr_scheduler = deepspeed.initialize(model=model, model_parameters=params, config=cfg,
                                                              lr_scheduler=sched)
    assert engine.zero_optimization_stage() == cfg["zero_optimization"]["stage"]
    dtype = engine.get_data_types()[0]

    def step(s):
        x, y = models.tricky_batch(s, rank, world)
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        return float(loss.detach().float())

    K, extra = spec["steps"], spec["extra"]
    res = {"phase": phase, "world_size": world}
    if phase == "train":
        losses = [step(s) for s in range(K)]
        res["live"] = common.live_state(engine)
        res["module"] = common.module_values(engine.module)
        res["lr_at_save"] = [g["lr"] for g in engine.optimizer.param_groups]
        if spec["groups"] == "two":
            # DeepSpeed drops frozen params from its groups
            names = [[n for n in g if n not in info["frozen"]] for g in names_given]
        else:
            # Muon: DeepSpeed split the one group by the use_muon flag deepspeed.initialize set on each param
            names = [[n for n, p in model.named_parameters() if p.requires_grad and bool(getattr(p, "use_muon",
                                                                                                 False)) is flag]
                     for flag in [bool(g.get("use_muon")) for g in engine.basic_optimizer.param_groups]]
            # in the optimizer's order: MuonWithAuxAdam.__init__ sorts a use_muon group's params by size, largest
            # first (deepspeed/runtime/zero/muon/original_muon.py: sorted(group["params"], key=lambda x: x.size(),
            # reverse=True)), which is the order of the flat buffer and of param_shapes
            shapes = {n: torch.Size(common.param_shape(p)) for n, p in model.named_parameters()}  # ZeRO-3: ds_shape
            names = [sorted(ns, key=lambda n: shapes[n], reverse=True) if g.get("use_muon") else ns
                     for ns, g in zip(names, engine.basic_optimizer.param_groups)]
        res["param_groups_given"] = names_given
        res["param_groups"] = common.param_groups(engine.basic_optimizer, names)
        res["engine_param_groups"] = [{k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
                                       for k, v in g.items() if k != "params"} for g in engine.optimizer.param_groups]
        res["global_steps"], res["global_samples"] = engine.global_steps, engine.global_samples
        res["skipped_steps"] = engine.skipped_steps
        ls = getattr(engine.optimizer, "loss_scaler", None)
        res["loss_scale"] = float(ls.cur_scale) if ls is not None and hasattr(ls, "cur_scale") else None
        common.save_and_train_on(engine, spec, "tests/tools/modern/ds_worker.py", losses, step, K, extra, res)
        res["lr_scheduler_class"] = type(lr_scheduler).__qualname__ if lr_scheduler is not None else None
        res["model"] = info
    else:
        common.load_for_resume(engine, spec, res)
        res["live"] = common.live_state(engine, values=False)
        res["module"] = common.module_values(engine.module, values=False)
        res["global_steps"] = engine.global_steps
        after = [step(s) for s in range(K, K + extra)]
        res["losses_after_per_rank"], res["losses_after"] = common.gather_losses(after)
    res["lp_dtype"] = str(dtype)
    common.write_result(spec, phase, res)
    deepspeed.comm.barrier()
    deepspeed.comm.destroy_process_group()


if __name__ == "__main__":
    main()
