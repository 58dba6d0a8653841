#!/usr/bin/env python3
"""Smoke test of shims.apply(hf=True): transformers' Trainer (through accelerate) trains a tiny Llama made from a
config (no download) with DeepSpeed ZeRO-3 bf16 on CPU ranks, saves, and resumes. One rank of a launch.py run:

    python3 launch.py -n 2 -- smoke_hf.py --dir D --phase save   # 3 steps, checkpoint-3/
    python3 launch.py -n 2 -- smoke_hf.py --dir D --phase load   # resume_from_checkpoint=True, to step 5

The resumed run checks, before its first step, that the global step is 3 and that the gathered weights equal, bit for
bit, those the first run had when it saved (recorded by each rank in D/weights_rank{R}.pt).
"""
import os
import sys

import shims

shims.apply(hf=True)

import smoke_common  # noqa: E402

import torch  # noqa: E402
import deepspeed  # noqa: E402
import transformers  # noqa: E402


def gathered(model):
    params = list(model.named_parameters())
    with deepspeed.zero.GatheredParameters([p for _, p in params]):
        return {n: p.detach().clone() for n, p in params}


class Check(transformers.TrainerCallback):
    def __init__(self, out_dir, phase, rank):
        self.path = os.path.join(out_dir, f"weights_rank{rank}.pt")
        self.phase, self.result = phase, None

    def on_save(self, args, state, control, model=None, **kw):
        if self.phase == "save":
            torch.save({"global_step": state.global_step, "weights": gathered(model)}, self.path)

    def on_step_begin(self, args, state, control, model=None, **kw):
        if self.phase == "load" and self.result is None:
            ref = torch.load(self.path)
            got = gathered(model)
            bad = [k for k in ref["weights"] if not torch.equal(got[k], ref["weights"][k])]
            if bad or state.global_step != ref["global_step"]:
                raise AssertionError(f"resume: global_step {state.global_step} (saved {ref['global_step']}); "
                                     f"weights differ: {bad}")
            self.result = (state.global_step, sorted({str(v.dtype) for v in got.values()}))


def main():
    a = smoke_common.phase_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    ds_config = {
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
        "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True},
    }
    args = transformers.TrainingArguments(
        output_dir=a.dir, per_device_train_batch_size=2, max_steps=3 if a.phase == "save" else 5, save_steps=3,
        learning_rate=1e-2, bf16=True, deepspeed=ds_config, report_to=[], logging_steps=1, save_only_model=False,
        seed=1 if a.phase == "save" else 2, disable_tqdm=True)
    transformers.set_seed(args.seed)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(config)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (40, 8), generator=g)
    data = [{"input_ids": r, "labels": r} for r in ids]
    check = Check(a.dir, a.phase, rank)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[check])
    assert trainer.accelerator.num_processes == world, trainer.accelerator.num_processes
    trainer.train(resume_from_checkpoint=a.phase == "load")
    if a.phase == "save":
        if rank == 0:
            ck = os.path.join(a.dir, "checkpoint-3")
            sys.stdout.write(f"[hf] ZeRO-3 bf16 Trainer: {trainer.state.global_step} steps; checkpoint-3: "
                             f"{sorted(os.listdir(ck))}, tag: {sorted(os.listdir(os.path.join(ck, 'global_step3')))}\n")
    else:
        smoke_common.report_resumed("hf", rank, check.result, trainer.state.global_step)


if __name__ == "__main__":
    main()
