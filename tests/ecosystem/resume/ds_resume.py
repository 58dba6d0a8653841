#!/usr/bin/env python3
"""One rank of a plain-DeepSpeed resume through a ucfs mount at N ranks (resume_checks.sh), inside the modern root.

    launch.py -n N -- ds_resume.py --spec SPEC.json

SPEC.json: {"modern": <fixture's MODERN.json>, "ckpt": MNT, "mode": "native"|"universal", "micro": m, "gas": g,
            "result": PATH, "source_model_states": PATH, "fix_ds_zero3_universal": bool}
Builds what tests/tools/modern/ds_worker.py builds for the fixture's resume phase (TrickyNet, or for the muon_*
fixtures ds_worker_muon.py's MuonTrickyNet, initialised with seed
4321, or for mode universal the training seed (see below); the recipe's two param groups, its ds_config and LambdaLR
warmup callable), with the global batch of the saving run kept at N (micro batch m, gradient accumulation g:
GB = N*g*m) and, for mode universal, "checkpoint": {"load_universal": true}. Then engine.load_checkpoint(MNT), and
right after it the live state (common.live_state: every param's full fp32 master and optimizer state, gathered), the
module's params and buffers, the optimizer's steps, the param groups, global_steps/global_samples/skipped_steps, the
loss scale and the lr scheduler; then the recipe's `extra` steps on the saving run's batches K.. (losses: mean over
the global batch).
fix_ds_zero3_universal: after recording what DeepSpeed loaded, undo the two things DeepSpeed 0.19.8's ZeRO-3
universal loader (stage3.py load_hp_checkpoint_state_from_checkpoint_dir_stage3) gets wrong whatever the files hold,
before training on: it copies group 0's hyper-parameters into every group, and gives every sub-group one shared
'step' tensor (incremented once per sub-group per step). source_model_states: the source's own model-states file (the
fixture's copy), for the lr scheduler state it saved.
Rank 0 writes the result JSON; the judging is the host's (resume/judge.py).
"""
import ast
import os
import sys
import time

import shims

shims.apply()

import torch  # noqa: E402
import deepspeed  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rcommon  # noqa: E402
from rcommon import common, models  # noqa: E402


def main():
    spec, facts, recipe, rank, world = rcommon.start()
    if facts["recipe"]["program"].startswith("tests/tools/modern/ds_worker_muon.py"):
        # The muon_* fixtures' model (ds_worker_muon.py): TrickyNet with two more odd-sized matrices.
        import fixtures_optimizers
        models.TrickyNet = fixtures_optimizers.MuonTrickyNet
    micro, gas = spec["micro"], spec["gas"]
    cfg, gb = rcommon.keep_global_batch(recipe["ds_config"], micro, gas, world)
    if spec["mode"] == "universal":
        cfg["checkpoint"] = {"load_universal": True}
    deepspeed.init_distributed(dist_backend="gloo")

    # native: not the training init, so what comes back is the checkpoint's (frozen params and buffers included).
    # universal: DeepSpeed 0.19.8 restores neither frozen params nor buffers from a universal checkpoint (engine.py
    # _load_checkpoint skips load_module_state_dict when load_universal is on), so they come from the model's init,
    # as a user's own init would give them: the training init, as DeepSpeed 0.14.5's load_check.py does
    torch.manual_seed(models.INIT_SEED if spec["mode"] == "universal" else 4321)
    model = models.TrickyNet(gate_0dim=recipe.get("gate_0dim", False))
    params = models.tricky_param_groups(model) if recipe["groups"] == "two" else list(model.parameters())
    warm = recipe.get("lr_warmup")
    sched = (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))) if warm else None
    engine, _, _, lr_scheduler = deepspeed.initialize(model=model, model_parameters=params, config=cfg,
                                                      lr_scheduler=sched)
    res = {"world_size": world, "micro": micro, "gas": gas, "mode": spec["mode"],
           "optimizer_class": f"{type(engine.optimizer).__module__}.{type(engine.optimizer).__qualname__}"}
    t0 = time.time()
    load_path, client = engine.load_checkpoint(spec["ckpt"])
    res["load_seconds"] = time.time() - t0
    res["load_path"] = load_path
    assert load_path is not None, "load_checkpoint found nothing"
    res["client_state_keys"] = sorted(client or {})
    res["live"] = common.live_state(engine)
    res["module"] = common.module_values(engine.module)
    res["global_steps"], res["global_samples"] = engine.global_steps, engine.global_samples
    res["skipped_steps"] = engine.skipped_steps
    ls = getattr(engine.optimizer, "loss_scaler", None)
    res["loss_scale"] = float(ls.cur_scale) if ls is not None and hasattr(ls, "cur_scale") else None
    res["lr_scheduler"] = rcommon.lr_scheduler_state(engine.lr_scheduler)
    if spec.get("source_model_states"):  # what the source saved (the fixture's copy, not the mount)
        saved = torch.load(spec["source_model_states"], map_location="cpu", weights_only=False)
        res["lr_scheduler_saved"] = rcommon.lr_scheduler_state_dict(saved.get("lr_scheduler"))
    res["engine_param_groups"] = rcommon.group_hyper(engine.optimizer)
    base = getattr(engine.optimizer, "optimizer", engine.optimizer)
    steps = [st["step"] for st in base.state.values() if torch.is_tensor(st.get("step"))]
    res["step_tensors"] = len(steps)
    res["step_tensors_distinct"] = len({id(t) for t in steps})
    if spec.get("fix_ds_zero3_universal"):
        # Undo, after recording it, what DeepSpeed 0.19.8's ZeRO-3 universal loader gets wrong by itself
        # (stage3.py load_hp_checkpoint_state_from_checkpoint_dir_stage3), so that the next losses judge the files:
        fixed = []
        # 1. it copies param group 0's hyper-parameters into every group: set each group's back to the saved ones
        for i, (g, want) in enumerate(zip(engine.optimizer.param_groups, facts["live_state"]["param_groups_hyper"])):
            for k, v in want.items():
                if k not in g:
                    continue
                v = ast.literal_eval(v) if isinstance(v, str) and v.startswith("(") else v
                if g[k] != v:
                    fixed.append(f"group {i} {k} {g[k]!r} -> {v!r}")
                    g[k] = v
        # 2. it sets every sub-group's 'step' to ONE tensor (optimizer_state.pt's state[0]['step']), which torch's
        # AdamW then increments in place once per sub-group per step: give each sub-group its own copy
        seen = set()
        for st in base.state.values():
            t = st.get("step")
            if torch.is_tensor(t):
                if id(t) in seen:
                    st["step"] = t.clone()
                seen.add(id(st["step"]))
        if res["step_tensors_distinct"] != res["step_tensors"]:
            fixed.append(f"'step': {res['step_tensors']} sub-groups shared {res['step_tensors_distinct']} tensor(s)"
                         f" -> one each")
        res["harness_fixes"] = fixed

    K, extra = facts["training"]["global_steps"], recipe["extra"]
    local = []
    for s in range(K, K + extra):
        x, y = rcommon.tricky_global(s, gb)
        per = []
        for j in range(gas):
            xb, yb = rcommon.rows((x, y), rank, j, micro, gas)
            loss = engine(xb.contiguous(), yb.contiguous())
            engine.backward(loss)
            engine.step()
            per.append(float(loss.detach().float()))
        local.append(rcommon.step_losses(per, gas))
    res["losses_after_per_rank"], res["losses_after"] = common.gather_losses(local)
    res["adam_steps_after"] = sorted({float(st["step"]) for st in getattr(engine.optimizer, "optimizer",
                                                                          engine.optimizer).state.values()
                                      if "step" in st})
    res["skipped_steps_after"] = engine.skipped_steps
    if rank == 0:
        rcommon.write_result(spec, res)
    deepspeed.comm.barrier()
    deepspeed.comm.destroy_process_group()


if __name__ == "__main__":
    main()
