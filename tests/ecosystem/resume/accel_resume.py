#!/usr/bin/env python3
"""One rank of an accelerate load_state through a ucfs mount at N ranks (resume_checks.sh), inside the modern root.

    launch.py -n N -- accel_resume.py --spec SPEC.json

SPEC.json: {"modern": <fixture's MODERN.json>, "input_dir": MNT/checkpoints/checkpoint_0 (the run mounted
            --world-size N), "micro": m, "gas": g, "source_dir": <the fixture copy's run/checkpoints/checkpoint_0>,
            "world_size_saved": W, "result": PATH}
The fixture's set-up (tests/tools/modern/accel_worker.py): one Accelerator with a DeepSpeed plugin, TrickyNet with
torch AdamW (the two tricky groups) and a LambdaLR accelerate keeps, ValueNet with its AdamW, two DeepSpeed engines,
here with the DeepSpeed config's micro batch and gradient accumulation set so that the global batch is the saving
run's. accelerator.load_state(MNT/checkpoints/checkpoint_0) (both engines' tags pytorch_model and pytorch_model_1,
scheduler.bin, random_states_<rank>.pkl), then right after it both engines' live fp32 masters and optimizer states,
their modules, accelerator.step, the scheduler, and whether the torch RNG is the saving rank's (r mod W); then the
`extra` steps on the saving run's batches 4 and 5 (inside accelerator.accumulate, as the fixture stepped).
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
import rcommon  # noqa: E402
from rcommon import common, models  # noqa: E402


def main():
    spec, facts, recipe, rank, world = rcommon.start()
    W, micro, gas = spec["world_size_saved"], spec["micro"], spec["gas"]
    ds_config, gb = rcommon.keep_global_batch(facts["ds_config"], micro, gas, world)
    plugin = DeepSpeedPlugin(hf_ds_config=ds_config)
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision="bf16" if recipe["dtype"] == "bf16" else "no",
                              project_config=ProjectConfiguration(project_dir=spec["scratch_project"],
                                                                  automatic_checkpoint_naming=True))
    assert accelerator.num_processes == world
    set_seed(4321)
    m0, m1 = models.TrickyNet(), models.ValueNet()
    opt0 = torch.optim.AdamW(models.tricky_param_groups(m0), lr=1e-2, weight_decay=0.1)
    opt1 = torch.optim.AdamW(m1.parameters(), lr=2e-2, weight_decay=0.0)
    sched0 = torch.optim.lr_scheduler.LambdaLR(opt0, lambda s: min(1.0, (s + 1) / 3))
    e0, opt0, sched0 = accelerator.prepare(m0, opt0, sched0)
    e1, opt1 = accelerator.prepare(m1, opt1)
    assert isinstance(e0, deepspeed.DeepSpeedEngine) and isinstance(e1, deepspeed.DeepSpeedEngine)

    accelerator.load_state(spec["input_dir"])
    saved_rng = torch.load(os.path.join(spec["source_dir"], f"random_states_{rank % W}.pkl"), weights_only=False)
    res = {"world_size": world, "micro": micro, "gas": gas,
           "torch_rng_is_saving_ranks": bool(torch.equal(torch.random.get_rng_state(), saved_rng["torch_manual_seed"])),
           "accelerator_step": accelerator.step}
    res["live"] = {"pytorch_model": common.live_state(e0), "pytorch_model_1": common.live_state(e1)}
    res["module"] = {"pytorch_model": common.module_values(e0.module),
                     "pytorch_model_1": common.module_values(e1.module)}
    res["engines"] = {t: {"global_steps": e.global_steps, "global_samples": e.global_samples,
                          "param_groups": rcommon.group_hyper(e.optimizer)}
                      for t, e in (("pytorch_model", e0), ("pytorch_model_1", e1))}
    res["scheduler"] = rcommon.lr_scheduler_state(sched0.scheduler)
    res["scheduler_saved"] = rcommon.lr_scheduler_state_dict(
        torch.load(os.path.join(spec["source_dir"], "scheduler.bin"), weights_only=False))

    K, extra = 4, 2
    local0, local1 = [], []
    for s in range(K, K + extra):
        x, y = rcommon.tricky_global(s, gb)
        x1, y1 = rcommon.value_global(s, gb)
        p0, p1 = [], []
        for j in range(gas):
            with accelerator.accumulate(e0, e1):
                xb, yb = rcommon.rows((x, y), rank, j, micro, gas)
                l0 = e0(xb.contiguous(), yb.contiguous())
                accelerator.backward(l0)
                xb1, yb1 = rcommon.rows((x1, y1), rank, j, micro, gas)
                l1 = e1(xb1.contiguous(), yb1.contiguous())
                e1.backward(l1)
                e1.step()
                sched0.step()
            p0.append(float(l0.detach().float()))
            p1.append(float(l1.detach().float()))
        local0.append(rcommon.step_losses(p0, gas))
        local1.append(rcommon.step_losses(p1, gas))
    _, res["losses_after_model_0"] = common.gather_losses(local0)
    _, res["losses_after_model_1"] = common.gather_losses(local1)
    res["global_steps_after"] = {"pytorch_model": e0.global_steps, "pytorch_model_1": e1.global_steps}
    import torch.distributed as dist
    flags = [None] * world
    dist.all_gather_object(flags, res["torch_rng_is_saving_ranks"])
    res["torch_rng_is_saving_ranks_all"] = flags
    if rank == 0:
        rcommon.write_result(spec, res)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
