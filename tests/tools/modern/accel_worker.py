#!/usr/bin/env python3
"""One rank of the accelerate fixture run (make_modern_fixtures.py): two models prepared by ONE Accelerator with a
DeepSpeed plugin, saved with accelerator.save_state. Started by launch.py inside the root.

    launch.py -n W -- accel_worker.py --spec SPEC.json --phase train|resume

SPEC.json: {"stage": 2|3, "dtype": "bf16"|"fp32", "steps": K, "extra": 2, "run": PROJECT_DIR, "result": PATH}
Model 0: TrickyNet (torch AdamW, the two tricky param groups, a torch LambdaLR warmup scheduler prepared with it);
model 1: ValueNet (torch AdamW, one group). accelerator.prepare(model0, opt0, sched0) then
accelerator.prepare(model1, opt1): two DeepSpeed engines with the same plugin config. Each step runs inside
accelerator.accumulate(model0, model1): accelerator.backward(loss0) for model 0, engine1.backward/step directly for
model 1 (accelerate 1.14 ties accelerator.backward to the FIRST engine it prepared: a second prepare only warns
"A wrapped DeepSpeed engine reference is currently tied for this `Accelerator()` instance"; backward of model 1's
loss through it runs engine 0's backward and fails in reduce_ipg_grads with IndexError). ProjectConfiguration(automatic_checkpoint_naming=True) makes
save_state() write PROJECT_DIR/checkpoints/checkpoint_0/ with tags pytorch_model (model 0) and pytorch_model_1
(model 1; `latest` names it). K steps, save_state, `extra` more steps (losses_after).
resume: the same set-up with other initial weights, accelerator.load_state() (the newest checkpoint_N), `extra`
steps.
"""
import os
import sys

import shims

shims.apply(hf=True)

import torch  # noqa: E402
import deepspeed  # noqa: E402
from accelerate import Accelerator, DeepSpeedPlugin  # noqa: E402
from accelerate.utils import ProjectConfiguration, set_seed  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import models  # noqa: E402


def main():
    phase, spec, rank, world = common.start(watchdog_seconds=300)
    zero = {"stage": spec["stage"]}
    ds_config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                 "train_batch_size": 2 * world, "gradient_clipping": 1.0, "zero_optimization": zero,
                 "steps_per_print": 1000}
    if spec["dtype"] == "bf16":
        ds_config["bf16"] = {"enabled": True}
    plugin = DeepSpeedPlugin(hf_ds_config=ds_config)
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision="bf16" if spec["dtype"] == "bf16" else "no",
                              project_config=ProjectConfiguration(project_dir=spec["run"],
                                                                  automatic_checkpoint_naming=True))
    assert accelerator.num_processes == world
    set_seed(models.INIT_SEED if phase == "train" else 4321)
    m0, m1 = models.TrickyNet(), models.ValueNet()
    info = {"model_0": common.model_params(m0), "model_1": common.model_params(m1)}
    opt0 = torch.optim.AdamW(models.tricky_param_groups(m0), lr=1e-2, weight_decay=0.1)
    opt1 = torch.optim.AdamW(m1.parameters(), lr=2e-2, weight_decay=0.0)
    names = {"pytorch_model": [[n for n in g if n not in info["model_0"]["frozen"]]
                               for g in common.group_names(opt0.param_groups, m0)],
             "pytorch_model_1": common.group_names(opt1.param_groups, m1)}
    sched0 = torch.optim.lr_scheduler.LambdaLR(opt0, lambda s: min(1.0, (s + 1) / 3))
    e0, opt0, sched0 = accelerator.prepare(m0, opt0, sched0)
    e1, opt1 = accelerator.prepare(m1, opt1)
    assert isinstance(e0, deepspeed.DeepSpeedEngine) and isinstance(e1, deepspeed.DeepSpeedEngine)

    def step(s):
        with accelerator.accumulate(e0, e1):
            x, y = models.tricky_batch(s, rank, world)
            l0 = e0(x, y)
            accelerator.backward(l0)  # engine 0: accelerate's DeepSpeedEngineWrapper does backward + step
            x1, y1 = models.value_batch(s, rank, world)
            l1 = e1(x1, y1)
            e1.backward(l1)
            e1.step()
            sched0.step()  # accelerate's AcceleratedScheduler (not handed to DeepSpeed: engine0.lr_scheduler is None)
        return float(l0.detach().float()), float(l1.detach().float())

    K, extra = spec["steps"], spec["extra"]
    res = {"phase": phase, "world_size": world}
    if phase == "train":
        losses = [step(s) for s in range(K)]
        res["live"] = {"pytorch_model": common.live_state(e0), "pytorch_model_1": common.live_state(e1)}
        res["module"] = {"pytorch_model": common.module_values(e0.module),
                         "pytorch_model_1": common.module_values(e1.module)}
        res["accelerator_step"] = accelerator.step
        res["engines"] = {
            t: {**common.optimizer_classes(e),
                "param_groups": common.param_groups(e.basic_optimizer, names[t]),
                "lr_scheduler": type(e.lr_scheduler).__qualname__ if e.lr_scheduler else None,
                "global_steps": e.global_steps, "data_types": [str(t) for t in e.get_data_types()]}
            for t, e in (("pytorch_model", e0), ("pytorch_model_1", e1))}
        accelerator.save_state()
        after = [step(s) for s in range(K, K + extra)]
        for i in (0, 1):
            res[f"losses_per_rank_model_{i}"], res[f"losses_model_{i}"] = common.gather_losses([x[i] for x in losses])
            res[f"losses_after_per_rank_model_{i}"], res[f"losses_after_model_{i}"] = \
                common.gather_losses([x[i] for x in after])
        res.update(model=info, versions=common.versions(), ds_config_given=ds_config,
                   ds_config_resolved=plugin.deepspeed_config,
                   accelerate_scheduler_class=type(sched0).__qualname__)
    else:
        accelerator.load_state()
        res["live"] = {"pytorch_model": common.live_state(e0, values=False),
                       "pytorch_model_1": common.live_state(e1, values=False)}
        res["module"] = {"pytorch_model": common.module_values(e0.module, values=False),
                         "pytorch_model_1": common.module_values(e1.module, values=False)}
        res["accelerator_step"] = accelerator.step
        after = [step(s) for s in range(K, K + extra)]
        for i in (0, 1):
            res[f"losses_after_per_rank_model_{i}"], res[f"losses_after_model_{i}"] = \
                common.gather_losses([x[i] for x in after])
    common.write_result(spec, phase, res)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
