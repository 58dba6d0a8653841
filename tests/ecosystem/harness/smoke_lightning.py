#!/usr/bin/env python3
"""Smoke test of shims.cpu_deepspeed_strategy: Lightning 2.6 trains with DeepSpeed on CPU ranks, saves, resumes.

One rank of a launch.py run (Lightning sees LOCAL_RANK and leaves process creation to the launcher):

    python3 launch.py -n 2 -- smoke_lightning.py --dir D --phase save    # 1 epoch = 3 steps, ZeRO-2 bf16; checkpoint
    python3 launch.py -n 2 -- smoke_lightning.py --dir D --phase load    # resumes from it for a 2nd epoch

The resumed run checks, at its first training step, that the global step is 3 and that the module's weights equal,
bit for bit, the ones the first run had when it saved (recorded by each rank in D/weights_rank{R}.pt).
"""
import glob
import os
import sys

import shims

shims.apply()

import smoke_common  # noqa: E402

import torch  # noqa: E402
import lightning.pytorch as pl  # noqa: E402


class Tiny(pl.LightningModule):
    def __init__(self, out_dir, phase):
        super().__init__()
        self.out_dir, self.phase = out_dir, phase
        self.net = torch.nn.Sequential(torch.nn.Linear(13, 24), torch.nn.GELU(), torch.nn.Linear(24, 5))
        self.checked = None

    def training_step(self, batch, _idx):
        if self.phase == "load" and self.checked is None:
            self.checked = self._check_resumed()
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).float(), y.float())

    def _weights(self):
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}

    def on_save_checkpoint(self, checkpoint):
        torch.save({"global_step": self.trainer.global_step, "weights": self._weights()},
                   os.path.join(self.out_dir, f"weights_rank{self.global_rank}.pt"))

    def _check_resumed(self):
        ref = torch.load(os.path.join(self.out_dir, f"weights_rank{self.global_rank}.pt"))
        got = self._weights()
        bad = [k for k in ref["weights"] if not torch.equal(got[k], ref["weights"][k])]
        if bad or self.trainer.global_step != ref["global_step"]:
            raise AssertionError(f"resume: global_step {self.trainer.global_step} (saved at {ref['global_step']}), "
                                 f"weights differ: {bad}")
        return self.trainer.global_step, sorted({str(v.dtype) for v in got.values()})

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def main():
    a = smoke_common.phase_args()
    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])

    pl.seed_everything(1 if a.phase == "save" else 2, verbose=False)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(12 * world, 13, generator=g), torch.randn(12 * world, 5, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=4)  # Lightning adds the DistributedSampler: 3 steps/epoch
    Strategy = shims.cpu_deepspeed_strategy()
    trainer = pl.Trainer(accelerator="cpu", devices=world, num_nodes=1, precision="bf16-mixed",
                         strategy=Strategy(stage=2), max_epochs=1 if a.phase == "save" else 2,
                         default_root_dir=a.dir, logger=pl.loggers.CSVLogger(a.dir, name="lightning_logs", version=0),
                         enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    model = Tiny(a.dir, a.phase)
    ckpt = None
    if a.phase == "load":
        found = sorted(glob.glob(os.path.join(a.dir, "lightning_logs", "version_0", "checkpoints", "*.ckpt")))
        assert found, "no checkpoint to resume from"
        ckpt = found[-1]
    trainer.fit(model, loader, ckpt_path=ckpt)
    if a.phase == "save":
        found = sorted(glob.glob(os.path.join(a.dir, "lightning_logs", "version_0", "checkpoints", "*.ckpt", "*")))
        if rank == 0:
            sys.stdout.write(f"[lightning] ZeRO-2 bf16: 1 epoch, {trainer.global_step} steps; saved "
                             f"{[os.path.relpath(f, a.dir) for f in found]}\n")
    else:
        smoke_common.report_resumed("lightning", rank, model.checked, trainer.global_step)


if __name__ == "__main__":
    main()
