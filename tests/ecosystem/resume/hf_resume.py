#!/usr/bin/env python3
"""One rank of an HF Trainer resume through a writable ucfs mount at N ranks (resume_checks.sh), inside the root.

    launch.py -n N -- hf_resume.py --spec SPEC.json

SPEC.json: {"modern": <fixture's MODERN.json>, "output_dir": MNT (the run, mounted --world-size N --upper DIR),
            "resume_from": MNT/checkpoint-K, "per_device": b, "gas": g, "source_checkpoint": <the fixture copy's
            run/checkpoint-K>, "world_size_saved": W, "result": PATH}
The fixture's own recipe (tests/tools/modern/hf_worker.py: the tiny Llama, PEFT LoRA where it had it, the same
DeepSpeed config and TrainingArguments), with output_dir = the mount, the per-device batch and gradient accumulation
changed so that the global batch is the saving run's, and without the fixture's veto callback: the Trainer trains
steps K+1..max_steps, then saves checkpoint-<max_steps> through the mount (rotating per save_total_limit).
trainer.train(resume_from_checkpoint=MNT/checkpoint-K). Records, at the first step after the load, the live fp32
masters and optimizer state (common.live_state, values), the module's gathered params, global_step, the lr
scheduler and param groups; which RNG file the Trainer loaded and whether the torch RNG it set is that file's and the
saving rank's (rank r mod W); the losses of the next steps (per step: the mean over ranks of the sum of each rank's
micro-batch losses, which is the mean over the global batch as the Trainer normalises it).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rcommon  # noqa: E402  (puts tests/tools/modern on sys.path)
import hf_worker  # noqa: E402  (the fixture's recipe; applies shims.apply(hf=True))
from rcommon import common, models  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402


def training_args(recipe, ds_config, output_dir, per_device, gas):
    """hf_worker.training_args (the fixture's TrainingArguments) with output_dir, the per-device batch and the
    gradient accumulation replaced."""
    real = transformers.TrainingArguments

    def patched(**kw):
        kw.update(per_device_train_batch_size=per_device, gradient_accumulation_steps=gas)
        return real(**kw)

    transformers.TrainingArguments = patched
    try:
        return hf_worker.training_args(dict(recipe, run=output_dir), ds_config)
    finally:
        transformers.TrainingArguments = real


class AfterLoad(hf_worker.Capture):
    """The live state (with values) at the first step after the load, and the new checkpoint's save step."""

    def __init__(self):
        super().__init__("resume")
        self.saves = []

    def on_step_begin(self, args, state, control, **kw):
        if self.after_load is None:
            tr = self.trainer
            self.after_load = dict(self._grab(True), global_step=state.global_step,
                                   lr_scheduler=rcommon.lr_scheduler_state(tr.lr_scheduler),
                                   param_groups=rcommon.group_hyper(tr.model_wrapped.optimizer))

    def on_save(self, args, state, control, **kw):
        self.saves.append(state.global_step)
        engine = self.trainer.model_wrapped
        self.module_at_save = common.module_values(engine.module)  # collective under ZeRO-3


def new_checkpoint_weights(spec, recipe, trainer, cap):
    """The checkpoint the Trainer just saved through the mount, seen through it: where it holds config.json and no
    weights (ZeRO-3 without 16-bit gathering), ucfs shows model.safetensors once the tag is whole. Its tensors must be
    the module's at the save (gathered, in the training dtype), and from_pretrained must load it."""
    d = os.path.join(spec["output_dir"], f"checkpoint-{trainer.state.global_step}")
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    out = {"dir": d, "listing": names}
    if "config.json" not in names or getattr(cap, "module_at_save", None) is None:
        return out
    if "model.safetensors" not in names:
        out["error"] = "no model.safetensors beside config.json"
        return out
    # The Trainer looked model.safetensors up before the tag existed (remove_dummy_checkpoint's isfile): a lookup
    # now may meet that cached ENOENT though the listing shows the file (see resume_checks' own check of it)
    import time
    t0 = time.time()
    while not os.path.exists(os.path.join(d, "model.safetensors")) and time.time() - t0 < 10:
        time.sleep(0.02)
    out["listed_but_enoent_for_s"] = round(time.time() - t0, 2)
    from safetensors.torch import load_file
    sd = load_file(os.path.join(d, "model.safetensors"))
    want = cap.module_at_save["params"]
    bad = []
    for name, rec in want.items():
        t = sd.get(name)
        if t is None and name == "lm_head.weight" and recipe.get("tie"):
            continue  # tied to embed_tokens: saved once
        if t is None or common.trec(t, values=False)["sha256"] != rec["sha256"]:
            bad.append(name)
    out["compared"], out["differ"], out["extra"] = len(want), bad, sorted(set(sd) - set(want))
    # training is over: a plain load, not the ZeRO-3 partitioned one the Trainer's DeepSpeed config would ask for
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config
    unset_hf_deepspeed_config()
    model = transformers.AutoModelForCausalLM.from_pretrained(d)
    out["from_pretrained_dtype"] = str(next(model.parameters()).dtype)
    msd = model.state_dict()
    out["from_pretrained_differ"] = [n for n, rec in want.items()
                                     if n not in msd or common.trec(msd[n], values=False)["sha256"] != rec["sha256"]]
    return out


def main():
    spec, _, recipe, rank, world = rcommon.start(watchdog_seconds=600)
    W = spec["world_size_saved"]

    ds_config = hf_worker.ds_config_for(recipe)
    args = training_args(recipe, ds_config, spec["output_dir"], spec["per_device"], spec["gas"])
    model = hf_worker.build_model(recipe, args.seed)
    cap = AfterLoad()
    rng = {}

    class Trainer(hf_worker.RecTrainer):
        def _load_rng_state(self, checkpoint):
            super()._load_rng_state(checkpoint)
            name = f"rng_state_{self.args.process_index}.pth" if self.args.world_size > 1 else "rng_state.pth"
            rng["file"] = name
            rng["found"] = os.path.isfile(os.path.join(checkpoint, name))
            saved = torch.load(os.path.join(spec["source_checkpoint"], f"rng_state_{rank % W}.pth"),
                               weights_only=False)
            rng["torch_rng_is_saving_ranks"] = bool(torch.equal(torch.random.get_rng_state(), saved["cpu"]))

    trainer = Trainer(model=model, args=args, train_dataset=models.llama_dataset(), callbacks=[cap])
    trainer.rec_losses = []
    cap.trainer = trainer
    assert trainer.accelerator.num_processes == world
    trainer.train(resume_from_checkpoint=spec["resume_from"])

    by_step = {}
    for s, v in trainer.rec_losses:
        by_step.setdefault(s, []).append(v)
    steps = sorted(by_step)
    per_rank, mean = common.gather_losses([sum(by_step[s]) for s in steps])
    import torch.distributed as dist
    rngs = [None] * world
    dist.all_gather_object(rngs, rng)
    res = {"world_size": world, "per_device": spec["per_device"], "gas": spec["gas"], "steps": steps,
           "micro_batches_per_step": [len(by_step[s]) for s in steps], "losses_after": mean,
           "losses_after_per_rank": per_rank, "global_step": trainer.state.global_step, "after_load": cap.after_load,
           "saves": cap.saves, "rng": rngs,
           "ds_config_resolved": trainer.accelerator.state.deepspeed_plugin.deepspeed_config}
    res["new_checkpoint_weights"] = new_checkpoint_weights(spec, recipe, trainer, cap) if rank == 0 else None
    res["lr_scheduler_saved"] = rcommon.lr_scheduler_state_dict(
        torch.load(os.path.join(spec["source_checkpoint"], "scheduler.pt"), weights_only=False))
    if rank == 0:
        rcommon.write_result(spec, res)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
