#!/usr/bin/python3
"""Makes tests/data/tp_fixtures/{tp_z1_fp32_t2d2,tp1_z1_megatron_d2}_merges: the merges Megatron never asks for.

A developer's tool, not run by the suite: it needs the oracle's environment (setup_env.sh, for DeepSpeed
0.14.5's ds_to_universal.py). It copies tp_z1_fp32_t2d2's checkpoint (real DeepSpeed 0.14.5, T = 2, D = 2),
and tp1_z1_megatron_d2's (T = 1, D = 2), and lays over their universal_checkpoint_info, with torch.save as
DeepSpeed saves it, in every model-states file:

  parameter_to_average_patterns   the query_key_value biases: their two slices differ, so the mean is a
                                  real computation
  parameter_with_sub_params       asdict(SubparamShape) as DeepSpeed's own code builds them: layer 0's
                                  query_key_value.weight as q, k, v of 8 rows split along dim 0, and layer
                                  1's dense_h_to_4h.weight viewed as [32, 4] with two sub-params along dim 1

Then DeepSpeed 0.14.5's ds_to_universal.py, unmodified, converts it into expected/ (with latest_universal).
Nothing else in the checkpoint changes: the optimizer files are the run's.

usage: make_merge_rules_fixture.py TP_FIXTURES_DIR   (tests/data/tp_fixtures)
"""
import dataclasses
import os
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE_WORK = os.environ.get("ORACLE_WORK", os.path.expanduser("~/ucfs-oracle"))
DS_SRC = os.path.join(ORACLE_WORK, "deepspeed-src")
PYDEPS = os.path.join(ORACLE_WORK, "pydeps")
LAYERS = "language_model.encoder.layers."


def sub_params():
    sys.path.insert(0, DS_SRC)
    sys.path.insert(0, PYDEPS)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.checkpoint.universal_checkpoint import SubparamShape  # the real dataclass
    return [
        dataclasses.asdict(SubparamShape(patterns=[LAYERS + "0.self_attention.query_key_value.weight"],
                                         shape=((8, 8, 8), 8), partition_dim=0)),
        dataclasses.asdict(SubparamShape(patterns=[LAYERS + "1.mlp.dense_h_to_4h.weight"],
                                         shape=(32, (4, 4)), partition_dim=1)),
    ]


def make(source, dest, shapes):
    if os.path.exists(dest):
        shutil.rmtree(dest)
    shutil.copytree(os.path.join(source, "checkpoint"), os.path.join(dest, "checkpoint"))
    tag = open(os.path.join(dest, "checkpoint", "latest")).read().strip()
    tag_dir = os.path.join(dest, "checkpoint", tag)
    for name in sorted(os.listdir(tag_dir)):
        if not (name.startswith("mp_rank_") and name.endswith("_model_states.pt")):
            continue
        path = os.path.join(tag_dir, name)
        sd = torch.load(path, map_location="cpu")
        info = sd["universal_checkpoint_info"]
        info["parameter_to_average_patterns"] = [LAYERS + r"\d+.self_attention.query_key_value.bias"]
        info["parameter_with_sub_params"] = shapes
        torch.save(sd, path)
    out = os.path.join(dest, "expected", tag + "_universal")
    env = dict(os.environ, PYTHONPATH=DS_SRC + ":" + PYDEPS, DS_ACCELERATOR="cpu")
    subprocess.run([sys.executable, os.path.join(DS_SRC, "deepspeed", "checkpoint", "ds_to_universal.py"),
                    "--input_folder", tag_dir, "--output_folder", out, "--num_extract_workers", "1",
                    "--num_merge_workers", "1"], check=True, env=env, cwd="/tmp")
    with open(os.path.join(dest, "expected", "latest_universal"), "w") as f:
        f.write(tag + "_universal")


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    fixtures = os.path.abspath(argv[1])
    shapes = sub_params()
    for name in ("tp_z1_fp32_t2d2", "tp1_z1_megatron_d2"):
        make(os.path.join(fixtures, name), os.path.join(fixtures, name + "_merges"), shapes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
