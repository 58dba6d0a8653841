"""Fixtures of make_modern_fixtures.py for the optimizer layouts DeepSpeed grew after 0.14.5 (issue 37), all plain
DeepSpeed engine.save_checkpoint runs of TrickyNet (kind "ds", ds_worker.py):

  muon_z1_fp32_ws2, muon_z2_fp32_ws3, muon_z3_fp32_ws2: DeepSpeed's Muon (MuonWithAuxAdam). The one group given is
      split by deepspeed.initialize into "muon-params" (2-D weights whose names have neither 'embed' nor 'lm_head':
      fc1.weight [20,12], fc2.weight [12,25]) and "adam-params" (the other 10 trainable params: gate [1], tri [3],
      embed.weight [24,12], layer norms, biases). W = 3 at ZeRO-2 puts partition boundaries inside both Muon
      params. ZeRO-3 needs "reduce_scatter": false (/work/shared/reference/modern-stack.md).
  bf16masters_z1_ws2, bf16masters_z2_ws2, bf16masters_z3_ws2: bf16 training with bf16.bf16_master_weights_and_grads
      and bf16.bf16_optimizer_states (DeepSpeed 0.19.8 precision_config.py DeepSpeedBF16Config; config.py asserts
      ZeRO 1-3 and that the second needs the first).
  align_z1_fp32_ws2, align_z2_fp32_ws3: zero_optimization.parameter_alignment (zero/config.py), which pads every
      param but the last of each flat group to 16 bytes (fp32: 4 elements) inside the flat buffer; TrickyNet's tri [3]
      and gate [1] get paddings 1 and 3 (param_alignment_paddings in the optimizer files).

register(fixture, ds_config, MUON) is called by make_modern_fixtures.py with its own helpers.
"""


def register(fixture, ds_config, MUON):
    def bf16_masters(W, stage, extra_zero=None):
        cfg = ds_config(W, stage, "bf16", extra_zero)
        cfg["bf16"].update(bf16_master_weights_and_grads=True, bf16_optimizer_states=True)
        return cfg

    fixture("muon_z1_fp32_ws2", kind="ds", W=2, stage=1, dtype="fp32", old="z1_tricky_fp32_ws4", groups="one",
            ds_config=ds_config(2, 1, "fp32", optimizer=MUON))
    fixture("muon_z2_fp32_ws3", kind="ds", W=3, stage=2, dtype="fp32", old="z2_tricky_fp32_ws2", groups="one",
            ds_config=ds_config(3, 2, "fp32", optimizer=MUON))
    fixture("muon_z3_fp32_ws2", kind="ds", W=2, stage=3, dtype="fp32", old="z3_tricky_fp32_ws4", groups="one",
            ds_config=ds_config(2, 3, "fp32", {"reduce_scatter": False}, optimizer=MUON))
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
