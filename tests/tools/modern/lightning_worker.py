#!/usr/bin/env python3
"""One rank of the Lightning fixture run (make_modern_fixtures.py), started by launch.py inside the root.

    launch.py -n W -- lightning_worker.py --spec SPEC.json --phase train|resume

SPEC.json: {"stage": 2|3, "dtype": "bf16"|"fp32", "steps_per_epoch": E, "extra": 2, "run": DEFAULT_ROOT_DIR,
            "result": PATH, "ckpt": CKPT_DIR (resume only)}
lightning.pytorch.Trainer(accelerator="cpu", devices=W, strategy=<harness CPU DeepSpeedStrategy>(stage=S),
precision="bf16-mixed" | "32-true", default_root_dir=DIR, max_epochs=1) with the default logger and the default
ModelCheckpoint, so the checkpoint lands at DIR/lightning_logs/version_0/checkpoints/epoch=0-step=E.ckpt/ (a
directory: tag `checkpoint`, `latest`, zero_to_fp32.py, zero_to_torch.py). The module wraps TrickyNet (the
tricky param groups in a torch AdamW from configure_optimizers); data: E batches per epoch of models.tricky_batch
(step s = batch s; an explicit DistributedSampler(shuffle=False) with use_distributed_sampler=False hands rank r
its rows: Lightning's own would shuffle).
Continuing past the checkpoint in the same process is not simple with Lightning (fit ends with the epoch), so the
"losses after" come from the resume phase: a fresh launch with ckpt_path=<the .ckpt dir>, max_epochs=2,
max_steps=E+extra, whose epoch 1 is the batches of steps E..E+extra-1.
"""
import os
import sys

import shims

shims.apply()

import torch  # noqa: E402
import lightning.pytorch as pl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import models  # noqa: E402


class TokenRows(torch.utils.data.Dataset):
    """Rows of S+1 tokens (`items`, laid out by a subclass for a non-shuffling DistributedSampler); item i is its
    row's inputs and labels, tokens[:-1] and tokens[1:] (the split models.tricky_batch makes)."""

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        t = self.items[i]
        return t[:-1], t[1:]


class Rows(TokenRows):
    """Global row i of epoch-step s = row (i % (2W)) of tricky_batch(s)'s global batch; the DistributedSampler
    (shuffle=False) gives rank r indices r, r+W, ..., so batch order and content are fixed by (step, rank)."""

    def __init__(self, steps, world):
        self.items = []
        for s in steps:
            g = torch.Generator().manual_seed(1000 + s)
            tok = torch.randint(0, models.TrickyNet.V, (2 * world, models.TrickyNet.S + 1), generator=g)
            # DistributedSampler gives rank r the dataset indices r, r+W, r+2W, ...; a micro batch of 2 on rank
            # r at step s is indices (2s)W + r and (2s+1)W + r: lay the rows out so that these are rows 2r, 2r+1
            block = [None] * (2 * world)
            for r in range(world):
                block[r] = tok[2 * r]
                block[world + r] = tok[2 * r + 1]
            self.items.extend(block)


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = models.TrickyNet()
        self.rec = []
        self.batch_idx = []
        self.token_sums = []
        self.capture = None
        self.after_load = None
        self.phase = "train"

    def training_step(self, batch, _idx):
        if self.phase == "resume" and self.after_load is None:
            eng = self.trainer.strategy.deepspeed_engine
            self.after_load = {"live": common.live_state(eng, values=False, module=eng.module),
                               "module": common.module_values(eng.module, values=False),
                               "global_step": self.trainer.global_step}
        x, y = batch
        loss = self.net(x, y)
        self.log("train_loss", loss.detach().float(), on_step=True)
        self.rec.append((self.trainer.global_step + 1, float(loss.detach().float())))
        self.batch_idx.append(int(_idx))
        self.token_sums.append(models.fingerprint(x))  # which step's data this was (rank 0's are reported)
        return loss

    def on_save_checkpoint(self, checkpoint):
        eng = self.trainer.strategy.deepspeed_engine
        self.capture = {"live": common.live_state(eng, module=eng.module),
                        "module": common.module_values(eng.module),
                        "param_names_engine": [n for n, _ in eng.module.named_parameters()],
                        "global_step": self.trainer.global_step,
                        "client_state_keys": sorted(checkpoint)}

    def configure_optimizers(self):
        opt = torch.optim.AdamW(models.tricky_param_groups(self.net), lr=1e-2, weight_decay=0.1)
        self.group_names = common.group_names(opt.param_groups, self)
        return opt


def make_loader(data, world, rank, batch):
    """A DataLoader over `data` with an explicit non-shuffling DistributedSampler: Lightning would swap in one with
    shuffle=True (seeded by seed_everything); this one (use_distributed_sampler=False) keeps step s on the rows laid
    out for it."""
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    return torch.utils.data.DataLoader(data, batch_size=batch, sampler=sampler)


def make_trainer(spec, world, root, **limits):
    """The fixture's Trainer: `world` CPU ranks, the harness's CPU DeepSpeedStrategy at spec's stage and precision,
    the default logger and ModelCheckpoint below `root`; `limits`: its max_epochs / max_steps."""
    Strategy = shims.cpu_deepspeed_strategy()
    return pl.Trainer(accelerator="cpu", devices=world, num_nodes=1,
                      precision="bf16-mixed" if spec["dtype"] == "bf16" else "32-true",
                      strategy=Strategy(stage=spec["stage"]), default_root_dir=root,
                      enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
                      num_sanity_val_steps=0, use_distributed_sampler=False, **limits)


def train_facts(trainer, model, info):
    """What the generator keeps of the training phase besides the losses: the save-time capture, the model, the
    versions, and what DeepSpeed and Lightning chose (config, optimizer classes and groups, dtypes, logger)."""
    eng = trainer.strategy.deepspeed_engine
    return dict(capture=model.capture, model=info, versions=common.versions(),
                ds_config_resolved=trainer.strategy.config,
                **common.optimizer_classes(eng),
                data_types=[str(t) for t in eng.get_data_types()],
                param_groups=common.param_groups(eng.basic_optimizer,
                                                 [[n for n in g if n not in info["frozen"]]
                                                  for g in model.group_names]),
                logger=type(trainer.logger).__qualname__ if trainer.logger else None)


def main():
    phase, spec, rank, world = common.start(watchdog_seconds=300)
    E, extra = spec["steps_per_epoch"], spec["extra"]
    pl.seed_everything(models.INIT_SEED if phase == "train" else 4321, verbose=False)
    torch.manual_seed(models.INIT_SEED if phase == "train" else 4321)
    model = Module()
    model.phase = phase
    info = common.model_params(model)
    # resume: the saved loop state says epoch 0 is done, so fit starts epoch 1 at its first batch; that epoch's
    # data are the batches of steps E..E+extra-1, so each step s still sees tricky_batch(s)
    data = Rows(range(E, E + extra), world) if phase == "resume" else Rows(range(E), world)
    loader = make_loader(data, world, rank, 2)  # models.tricky_batch's 2 rows per rank
    limits = dict(max_epochs=1) if phase == "train" else dict(max_epochs=-1, max_steps=E + extra)
    trainer = make_trainer(spec, world, spec["run"], **limits)
    trainer.fit(model, loader, ckpt_path=spec.get("ckpt"))
    res = common.losses_record(phase, world, model.rec, trainer.global_step)
    res.update(batch_idx=model.batch_idx, token_sums_rank0=model.token_sums)
    dl = trainer.train_dataloader
    smp = getattr(dl, "sampler", None)
    res["sampler"] = {"class": type(smp).__qualname__, "shuffle": getattr(smp, "shuffle", None),
                      "seed": getattr(smp, "seed", None), "drop_last": getattr(smp, "drop_last", None),
                      "batch_sampler": type(getattr(dl, "batch_sampler", None)).__qualname__}
    res.update(train_facts(trainer, model, info) if phase == "train" else {"after_load": model.after_load})
    common.write_result(spec, phase, res)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
