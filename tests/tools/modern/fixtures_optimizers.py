"""Fixtures of make_modern_fixtures.py for the optimizer layouts DeepSpeed grew after 0.14.5 (issue 37), all plain
DeepSpeed engine.save_checkpoint runs of TrickyNet (kind "ds", ds_worker.py):

  muon_z1_fp32_ws2, muon_z2_fp32_ws3, muon_z3_fp32_ws2: DeepSpeed's Muon (MuonWithAuxAdam) on MuonTrickyNet
      (TrickyNet plus two odd-sized matrices, mixer [7,9] and spread [5,3]; rank program ds_worker_muon.py). The one
      group given is split by deepspeed.initialize into "muon-params" (2-D weights whose names have neither 'embed'
      nor 'lm_head': fc1.weight [20,12], fc2.weight [12,25], mixer [7,9], spread [5,3]) and "adam-params" (the other
      10 trainable params: gate [1], tri [3], embed.weight [24,12], layer norms, biases). The ZeRO-1/2 partitions
      cut through params of both groups (W = 3 at ZeRO-2: inside fc1.weight and fc2.weight). ZeRO-3 needs
      "reduce_scatter": false (/work/shared/reference/modern-stack.md).
  bf16masters_z1_ws2, bf16masters_z2_ws2, bf16masters_z3_ws2: bf16 training with bf16.bf16_master_weights_and_grads
      and bf16.bf16_optimizer_states (DeepSpeed 0.19.8 precision_config.py DeepSpeedBF16Config; config.py asserts
      ZeRO 1-3 and that the second needs the first).
  align_z1_fp32_ws2, align_z2_fp32_ws3, align_z2_bf16_ws2: zero_optimization.parameter_alignment (zero/config.py),
      which pads every param but the last of each flat group to 16 bytes of the training dtype (fp32: 4 elements,
      bf16: 8) inside the flat buffer; TrickyNet's tri [3] and gate [1] get paddings 1 and 3 in fp32
      (param_alignment_paddings in the optimizer files).

register(fixture, ds_config, MUON) is called by make_modern_fixtures.py with its own helpers.
"""
import torch
import torch.nn.functional as F

import models

MUON_MODEL = ("MuonTrickyNet (tests/tools/modern/fixtures_optimizers.py): TrickyNet (tests/tools/modern/models.py: "
              "gate [1], tri [3], embed.weight [24,12] tied with head.weight, ln1 [12]+[12], fc1 [20,12]+[20], proj "
              "[5,20]+[5] FROZEN, fc2 [12,25]+[12], ln2 [12]+[12], head.bias [24]; buffers mix [12] (persistent), pos "
              "[6] (non-persistent)) plus mixer [7,9] and spread [5,3], registered after TrickyNet's params (drawn "
              "after them from the same seeded generator); y += pad(h[..., :9] @ mixer^T) + pad(x[..., :3] @ "
              "spread^T) before ln2; computes in fp32")


class MuonTrickyNet(models.TrickyNet):
    """TrickyNet with two more odd-sized matrices (Muon takes every 2-D param not named embed/lm_head)."""

    def __init__(self, gate_0dim=False):
        super().__init__(gate_0dim=gate_0dim)
        self.mixer = torch.nn.Parameter(0.1 * torch.randn(7, 9))
        self.spread = torch.nn.Parameter(0.1 * torch.randn(5, 3))

    def forward(self, tokens, labels):
        D = self.D
        x = self.embed(tokens)
        x = self.ln1(x) * self.mix.float() + 0.01 * self.pos.float()[None, :, None]
        h = torch.tanh(self.fc1(x) * self.gate.float())
        z = torch.cat([h, self.proj(h)], dim=-1)
        t = self.tri.float()
        y = self.fc2(z) + t[0] * x + t[1] * x.roll(1, dims=1) + t[2] * x.roll(2, dims=1)
        y = y + F.pad(h[..., :9] @ self.mixer.float().t(), (0, D - 7)) + \
            F.pad(x[..., :3] @ self.spread.float().t(), (0, D - 5))
        logits = self.head(self.ln2(y))
        return F.cross_entropy(logits.reshape(-1, self.V), labels.reshape(-1))


def register(fixture, ds_config, MUON):
    def bf16_masters(W, stage, extra_zero=None):
        cfg = ds_config(W, stage, "bf16", extra_zero)
        cfg["bf16"].update(bf16_master_weights_and_grads=True, bf16_optimizer_states=True)
        return cfg

    muon = dict(kind="ds", dtype="fp32", groups="one", program="ds_worker_muon.py", model_definition=MUON_MODEL)
    fixture("muon_z1_fp32_ws2", W=2, stage=1, old="z1_tricky_fp32_ws4",
            ds_config=ds_config(2, 1, "fp32", optimizer=MUON), **muon)
    fixture("muon_z2_fp32_ws3", W=3, stage=2, old="z2_tricky_fp32_ws2",
            ds_config=ds_config(3, 2, "fp32", optimizer=MUON), **muon)
    fixture("muon_z3_fp32_ws2", W=2, stage=3, old="z3_tricky_fp32_ws4",
            ds_config=ds_config(2, 3, "fp32", {"reduce_scatter": False}, optimizer=MUON), **muon)
    fixture("bf16masters_z1_ws2", kind="ds", W=2, stage=1, dtype="bf16", old="z1_tricky_fp32_ws4",
            ds_config=bf16_masters(2, 1))
    fixture("bf16masters_z2_ws2", kind="ds", W=2, stage=2, dtype="bf16", old="z2_tricky_bf16_ws4",
            ds_config=bf16_masters(2, 2))
    fixture("bf16masters_z3_ws2", kind="ds", W=2, stage=3, dtype="bf16", old="z3_tricky_fp32_ws4",
            ds_config=bf16_masters(2, 3, {"sub_group_size": 200}))
    fixture("align_z1_fp32_ws2", kind="ds", W=2, stage=1, dtype="fp32", old="z1_tricky_fp32_ws4",
            ds_config=ds_config(2, 1, "fp32", {"parameter_alignment": True}))
    fixture("align_z2_fp32_ws3", kind="ds", W=3, stage=2, dtype="fp32", old="z2_tricky_fp32_ws2",
            ds_config=ds_config(3, 2, "fp32", {"parameter_alignment": True}))
    fixture("align_z2_bf16_ws2", kind="ds", W=2, stage=2, dtype="bf16", old="z2_tricky_bf16_ws4",
            ds_config=ds_config(2, 2, "bf16", {"parameter_alignment": True}))
