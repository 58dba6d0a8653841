#!/usr/bin/env python3
"""One rank of a Lightning resume through a writable ucfs mount at N ranks (resume_checks.sh), inside the root.

    launch.py -n N -- lightning_resume.py --spec SPEC.json

SPEC.json: {"modern": <fixture's MODERN.json>, "root": MNT (the run, mounted --world-size N --upper DIR),
            "ckpt": MNT/lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt, "batch": b, "result": PATH}
The fixture's own module and Trainer (tests/tools/modern/lightning_worker.py: TrickyNet in a LightningModule, torch
AdamW over the tricky groups, the harness's CPU DeepSpeedStrategy at the fixture's stage, its precision,
default_root_dir = the mount), resumed as the fixture's resume phase was (max_steps E+extra, a loader of the
batches of steps E..E+extra-1) with a DataLoader batch of b = global batch / N rows: the same global batches, dealt
so that the explicit DistributedSampler(shuffle=False) gives rank r rows [r*b, (r+1)*b) of each.
trainer.fit(model, loader, ckpt_path=MNT/...ckpt). Records at the first training step after the load the live fp32
masters and optimizer state (values), the module, global_step; the losses of the resumed steps; what Lightning saved
through the mount is judged on the host (DIR).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rcommon  # noqa: E402  (puts tests/tools/modern on sys.path)
import lightning_worker  # noqa: E402  (the fixture's module; applies shims.apply())
from rcommon import common, models  # noqa: E402

import torch  # noqa: E402
import lightning.pytorch as pl  # noqa: E402


class Rows(lightning_worker.TokenRows):
    """The global batch of step s (models.tricky_batch's GB rows) at dataset indices laid out for N replicas of a
    non-shuffling DistributedSampler (rank r gets indices r, r+N, ...) and batch b: rank r's k-th batch is global
    batch k's rows [r*b, (r+1)*b)."""

    def __init__(self, steps, world, b):
        self.items = []
        for s in steps:
            x, y = rcommon.tricky_global(s, world * b)
            tok = torch.cat([x, y[:, -1:]], dim=1)  # the S+1 tokens of each row
            block = [None] * (world * b)
            for r in range(world):
                for i in range(b):
                    block[i * world + r] = tok[r * b + i]
            self.items.extend(block)


class Module(lightning_worker.Module):
    def training_step(self, batch, idx):
        if self.after_load is None:
            eng = self.trainer.strategy.deepspeed_engine
            self.after_load = {"live": common.live_state(eng, module=eng.module),
                               "module": common.module_values(eng.module),
                               "global_step": self.trainer.global_step,
                               "param_groups": rcommon.group_hyper(eng.optimizer)}
        return super().training_step(batch, idx)


def main():
    spec, _, recipe, rank, world = rcommon.start()
    E, extra, b = recipe["steps_per_epoch"], recipe["extra"], spec["batch"]
    pl.seed_everything(4321, verbose=False)
    torch.manual_seed(4321)
    model = Module()
    model.phase = "resume"
    data = Rows(range(E, E + extra), world, b)
    loader = lightning_worker.make_loader(data, world, rank, b)
    trainer = lightning_worker.make_trainer(recipe, world, spec["root"], max_epochs=-1, max_steps=E + extra)
    trainer.fit(model, loader, ckpt_path=spec["ckpt"])
    per_rank, mean = common.gather_losses([v for _, v in model.rec])
    sums = {models.fingerprint(rcommon.rows(rcommon.tricky_global(s, world * b), 0, 0, b, 1)[0]): s
            for s in range(E + extra)}
    res = {"world_size": world, "batch": b, "steps": [s for s, _ in model.rec], "losses_after": mean,
           "losses_after_per_rank": per_rank, "global_step": trainer.global_step, "batch_idx": model.batch_idx,
           "data_of_steps": [sums.get(x) for x in model.token_sums], "after_load": model.after_load,
           "log_dir": trainer.log_dir}
    if rank == 0:
        rcommon.write_result(spec, res)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
