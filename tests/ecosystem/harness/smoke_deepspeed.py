#!/usr/bin/env python3
"""Smoke test of the environment: DeepSpeed trains, saves and resumes on CPU ranks over gloo.

One rank of a launch.py run. Two phases, each its own launch (fresh processes):

  save: deepspeed.initialize a tiny model (ZeRO stage and dtype from the arguments), train STEPS steps, save_checkpoint
        (tag "smoke"), write what each rank holds then (full 16-bit/fp32 params, its fp32 master partition, its Adam
        moments and step, a fixed batch's loss) to ref_rank{R}.pt, train one more step and record the params after it.
  load: a model initialised differently, deepspeed.initialize, load_checkpoint, compare every recorded value bit for
        bit, then the extra step, compared bit for bit too (the optimizer state came back, not only the weights).

    python3 launch.py -n 2 -- smoke_deepspeed.py --stage 2 --dtype bf16 --dir /tmp/x --phase save
    python3 launch.py -n 2 -- smoke_deepspeed.py --stage 2 --dtype bf16 --dir /tmp/x --phase load
"""
import argparse
import os
import sys

import shims

shims.apply()

import torch  # noqa: E402
import deepspeed  # noqa: E402

STEPS = 3
TAG = "smoke"


class Tiny(torch.nn.Module):
    # Odd sizes, so flat partitions need padding and a parameter straddles the two ranks' partitions.
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(13, 24)
        self.norm = torch.nn.LayerNorm(24)
        self.head = torch.nn.Linear(24, 5, bias=False)

    def forward(self, x):
        return self.head(torch.nn.functional.gelu(self.norm(self.embed(x))))


def batch(step, rank, dtype):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(4, 13, generator=g).to(dtype)
    y = torch.randn(4, 5, generator=g).to(dtype)
    return x, y


def loss_of(engine, x, y):
    out = engine(x)
    return torch.nn.functional.mse_loss(out.float(), y.float())


def train_step(engine, step, rank, dtype):
    x, y = batch(step, rank, dtype)
    loss = loss_of(engine, x, y)
    engine.backward(loss)
    engine.step()
    return loss.detach()


def full_params(engine, stage):
    """Every parameter, whole, as the module holds it (gathered under ZeRO-3)."""
    params = list(engine.module.named_parameters())
    if stage == 3:
        with deepspeed.zero.GatheredParameters([p for _, p in params]):
            return {n: p.detach().clone() for n, p in params}
    return {n: p.detach().clone() for n, p in params}


def rank_state(engine, stage):
    """This rank's fp32 master partition(s) and their Adam state."""
    opt = engine.optimizer
    masters = opt.fp32_partitioned_groups_flat if stage == 3 else opt.single_partition_of_fp32_groups
    state = {}
    for i, m in enumerate(masters):
        state[f"master{i}"] = m.detach().clone()
        for k, v in opt.optimizer.state[m].items():
            state[f"{k}{i}"] = v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
    return state


def snapshot(engine, stage, rank, dtype):
    x, y = batch(99, rank, dtype)
    with torch.no_grad():
        loss = loss_of(engine, x, y)
    return {"params": full_params(engine, stage), "state": rank_state(engine, stage), "loss": loss,
            "global_steps": engine.global_steps}


def compare(name, got, want, errors):
    if isinstance(want, dict):
        if set(got) != set(want):
            errors.append(f"{name}: keys {sorted(got)} != {sorted(want)}")
        for k in want:
            if k in got:
                compare(f"{name}.{k}", got[k], want[k], errors)
    elif torch.is_tensor(want):
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            errors.append(f"{name}: {got.dtype}{tuple(got.shape)} differs from {want.dtype}{tuple(want.shape)}"
                          f" (max abs diff {(got.float() - want.float()).abs().max().item() if got.shape == want.shape else 'n/a'})")
    elif got != want:
        errors.append(f"{name}: {got!r} != {want!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, choices=(1, 2, 3), required=True)
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--phase", choices=("save", "load"), required=True)
    a = ap.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 4 * world,
        # torch_adam: DeepSpeed would otherwise JIT-build FusedAdam (no compiler in the root).
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": a.stage},
        "gradient_clipping": 1.0,
        "steps_per_print": 1000,
    }
    if a.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif a.dtype == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 8}

    deepspeed.init_distributed(dist_backend="gloo")
    # Different initial weights in the two phases: the load must overwrite them.
    torch.manual_seed(1 if a.phase == "save" else 2)
    model = Tiny()
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    assert engine.zero_optimization_stage() == a.stage, engine.zero_optimization_stage()
    ref_path = os.path.join(a.dir, f"ref_rank{rank}.pt")

    if a.phase == "save":
        losses = [train_step(engine, s, rank, dtype).item() for s in range(STEPS)]
        engine.save_checkpoint(a.dir, tag=TAG, client_state={"smoke_losses": losses})
        ref = snapshot(engine, a.stage, rank, dtype)
        train_step(engine, STEPS, rank, dtype)
        ref["after_next_step"] = full_params(engine, a.stage)
        torch.save(ref, ref_path)
        if rank == 0:
            files = sorted(os.listdir(os.path.join(a.dir, TAG)))
            print(f"[smoke] stage {a.stage} {a.dtype}: losses {['%.4f' % l for l in losses]}; saved {files}")
    else:
        load_path, client = engine.load_checkpoint(a.dir, tag=TAG)
        assert load_path is not None, "load_checkpoint found nothing"
        ref = torch.load(ref_path, weights_only=False)
        got = snapshot(engine, a.stage, rank, dtype)
        errors = []
        compare("after load", got, {k: v for k, v in ref.items() if k != "after_next_step"}, errors)
        if len(client.get("smoke_losses", [])) != STEPS:
            errors.append(f"client_state: {client.get('smoke_losses')!r}")
        train_step(engine, STEPS, rank, dtype)
        compare("after next step", full_params(engine, a.stage), ref["after_next_step"], errors)
        n = sum(t.numel() for t in got["params"].values())
        if errors:
            sys.stdout.write(f"[smoke] rank {rank} stage {a.stage} {a.dtype}: {len(errors)} mismatches:\n  "
                             + "\n  ".join(errors) + "\n")
            sys.exit(1)
        dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in got["params"].values()})
        sys.stdout.write(f"[smoke] rank {rank} stage {a.stage} {a.dtype}: load_checkpoint restored {n} parameter "
                         f"elements ({', '.join(dtypes)}), {len(got['state'])} optimizer tensors, step "
                         f"{got['global_steps']}, loss {got['loss'].item():.6f}, and the next step, bit for bit\n")
    deepspeed.comm.barrier()
    deepspeed.comm.destroy_process_group()


if __name__ == "__main__":
    main()
