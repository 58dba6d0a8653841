#!/usr/bin/env python3
"""One rank of an HF Trainer + DeepSpeed fixture run (make_modern_fixtures.py), started by launch.py in the root.

    launch.py -n W -- hf_worker.py --spec SPEC.json --phase train|resume

SPEC.json: {"model": "llama"|"peft", "stage": 2|3, "dtype": "bf16"|"fp32", "tie": bool, "max_steps": N,
            "save_steps": S, "last_save": L, "save_total_limit": T|null, "run": OUTPUT_DIR, "result": PATH,
            "resume_from": CHECKPOINT_DIR (resume only)}
A tiny LlamaForCausalLM built from a config (models.llama_config; no download), optionally wrapped by PEFT LoRA
(r=4 on q_proj/v_proj), trained by transformers.Trainer with the DeepSpeed config below ("auto" batch/clip/bf16,
no optimizer or scheduler in it: the Trainer's own AdamW groups and linear schedule go to DeepSpeed as client
objects). Saves every S steps into OUTPUT_DIR/checkpoint-<step>/ (the Trainer's own _save_checkpoint), keeps T of
them; a callback vetoes saves after step L, so steps L+1..N are the "losses after" the last checkpoint, in the same
process. At each save every rank records the live fp32 masters / optimizer state (DeepSpeed's safe_get_full_* view)
and the module's gathered values.
resume: trainer.train(resume_from_checkpoint=DIR) with the same arguments; records the next steps' losses and the
live state at the first step after loading.
"""
import os
import sys

import shims

shims.apply(hf=True)

import torch  # noqa: E402
import deepspeed  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import models  # noqa: E402


def ds_config_for(spec):
    zero = {"stage": spec["stage"]}
    if spec["stage"] == 3:
        zero.update(stage3_gather_16bit_weights_on_model_save=False, sub_group_size=4000)
    cfg = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "train_batch_size": "auto", "gradient_clipping": "auto", "zero_optimization": zero,
           "steps_per_print": 1000}
    if spec["dtype"] == "bf16":
        cfg["bf16"] = {"enabled": "auto"}
    return cfg


def build_model(spec, seed):
    """transformers.set_seed(seed), then the fixture's model: the tiny Llama, wrapped by PEFT LoRA for "peft"."""
    transformers.set_seed(seed)
    model = transformers.LlamaForCausalLM(models.llama_config(tie=spec.get("tie", False)))
    if spec["model"] == "peft":
        import peft
        lcfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                               task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lcfg)
    return model


def training_args(spec, ds_config):
    return transformers.TrainingArguments(
        output_dir=spec["run"], per_device_train_batch_size=2, gradient_accumulation_steps=1,
        max_steps=spec["max_steps"], save_strategy="steps", save_steps=spec["save_steps"],
        save_total_limit=spec["save_total_limit"], learning_rate=5e-3, weight_decay=0.01, warmup_steps=2,
        lr_scheduler_type="linear", max_grad_norm=1.0, logging_steps=1, bf16=spec["dtype"] == "bf16",
        deepspeed=ds_config, report_to=[], seed=42, data_seed=42, disable_tqdm=True, save_only_model=False,
        dataloader_num_workers=0)


class RecTrainer(transformers.Trainer):
    """The Trainer, recording each micro-batch loss training_step returns (log_history rounds to 4 digits)."""

    rec_losses = None

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.rec_losses.append((self.state.global_step + 1, float(loss.detach().float())))
        return loss


class NoSaveAfter(transformers.TrainerCallback):
    """Vetoes the Trainer's saves after step L (DefaultFlowCallback asks for one at max_steps)."""

    def __init__(self, last):
        self.last = last

    def on_step_end(self, args, state, control, **kw):
        if state.global_step > self.last:
            control.should_save = False
        return control


class Capture(transformers.TrainerCallback):
    def __init__(self, phase):
        self.phase, self.trainer, self.captures, self.after_load = phase, None, {}, None

    def _grab(self, values):
        engine = self.trainer.model_wrapped
        return {"live": common.live_state(engine, values=values, module=engine.module),
                "module": common.module_values(engine.module, values=values)}

    def on_save(self, args, state, control, **kw):
        if self.phase == "train":
            self.captures[str(state.global_step)] = self._grab(True)

    def on_step_begin(self, args, state, control, **kw):
        if self.phase == "resume" and self.after_load is None:
            self.after_load = dict(self._grab(False), global_step=state.global_step)


def train_facts(trainer, cap, info, ds_config, args):
    """What the generator keeps of the training phase besides the losses: the captures at each save, the model, the
    versions, the configs and arguments, the log, and what DeepSpeed and the Trainer chose (classes, groups, dtypes)."""
    engine = trainer.model_wrapped
    return dict(captures=cap.captures, model=info, versions=common.versions(), ds_config_given=ds_config,
                ds_config_resolved=trainer.accelerator.state.deepspeed_plugin.deepspeed_config,
                training_args={k: v for k, v in args.to_dict().items()
                               if isinstance(v, (int, float, str, bool, type(None), list))},
                log_history=trainer.state.log_history,
                **common.optimizer_classes(engine),
                decay_parameter_names=trainer.get_decay_parameter_names(trainer.model),
                lr_scheduler_class=type(trainer.lr_scheduler).__qualname__,
                engine_lr_scheduler=type(engine.lr_scheduler).__qualname__ if engine.lr_scheduler else None,
                data_types=[str(t) for t in engine.get_data_types()],
                module_class=type(engine.module).__qualname__)


def main():
    phase, spec, _, world = common.start(watchdog_seconds=600)

    ds_config = ds_config_for(spec)
    args = training_args(spec, ds_config)
    model = build_model(spec, args.seed)
    info = common.model_params(model)
    cap = Capture(phase)
    trainer = RecTrainer(model=model, args=args, train_dataset=models.llama_dataset(),
                         callbacks=[cap, NoSaveAfter(spec["last_save"])])
    trainer.rec_losses = []
    cap.trainer = trainer
    assert trainer.accelerator.num_processes == world
    trainer.train(resume_from_checkpoint=spec.get("resume_from"))

    res = common.losses_record(phase, world, trainer.rec_losses, trainer.state.global_step)
    res.update(train_facts(trainer, cap, info, ds_config, args) if phase == "train" else {"after_load": cap.after_load})
    common.write_result(spec, phase, res)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
