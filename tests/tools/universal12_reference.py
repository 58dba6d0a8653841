#!/usr/bin/env python3
"""Independent reference of DeepSpeed 0.14.5 ds_to_universal.py's ZeRO stage-1/2 output (Python + torch, no ucfs;
DeepSpeed's sources are needed only so torch.load can unpickle the classes in the files: LossScaler, ZeroStageEnum,
fragment_address; $ORACLE_WORK/deepspeed-src, default ~/ucfs-oracle, is put on sys.path when not importable).

usage: /usr/bin/python3 universal12_reference.py --src FIXTURE/checkpoint --dst FIXTURE/expected [--tag TAG]

Reads SRC/latest (or --tag), SRC/<tag>/mp_rank_00_model_states.pt and every rank's
[bf16_]zero_pp_rank_{r}_mp_rank_00_optim_states.pt, and writes what ds_to_universal.py's stage<=2 path writes
(without its universal_checkpoint_info requirement, i.e. as with --inject_missing_state):

  DST/latest_universal                           "<tag>_universal" (no newline)
  DST/<tag>_universal/mp_rank_00_model_states.pt byte copy (shutil.copy2) of the source model states
  DST/<tag>_universal/zero/<param>/fp32.pt        {'cat_dim': 0, 'param': fp32 master at the param's full shape}
  DST/<tag>_universal/zero/<param>/exp_avg.pt     same for the Adam moments
  DST/<tag>_universal/zero/<param>/exp_avg_sq.pt
  DST/<tag>_universal/zero/<param>/step.pt        the param group's `step` (as saved: 0-dim tensor)
  DST/<tag>_universal/zero/optimizer_state.pt     rank 0's optimizer_state_dict minus base_optimizer_state,
                                                  param_slice_mappings, single_partition_of_fp32_groups, plus
                                                  param_groups = base_optimizer_state['param_groups']

As in extract_zero_shards/_merge_zero_shards, each rank's fragment of a param is cut out of the flat state with its
param_slice_mappings entry (flat.narrow(0, start, numel).clone()), the fragments are concatenated in rank order and
reshaped to param_shapes' shape. Where DeepSpeed crashes (a 0-dim param: torch.cat of a 0-dim tensor), the param is
written at shape [1]. The step is taken from the first rank holding a fragment, after checking all agree.
torch.save names the zip records after the file's stem, so files are saved directly at their final paths.
"""
import argparse
import glob
import os
import re
import shutil
import sys

import torch

try:
    import deepspeed  # noqa: F401  (unpickling only)
except ImportError:
    _ow = os.environ.get("ORACLE_WORK", os.path.expanduser("~/ucfs-oracle"))
    sys.path[:0] = [os.path.join(_ow, "deepspeed-src"), os.path.join(_ow, "pydeps")]
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

SHARDED = ("base_optimizer_state", "param_slice_mappings", "single_partition_of_fp32_groups")


def natural_keys(text):
    return [int(c) if c.isdigit() else c for c in re.split(r"(\d+)", text)]


def optim_files(tag_dir):
    files = sorted(glob.glob(os.path.join(tag_dir, "*_optim_states.pt")), key=natural_keys)
    if not files:
        raise SystemExit(f"no *_optim_states.pt in {tag_dir}")
    by_rank = {}
    for f in files:
        m = re.search(r"zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt$", f)
        if not m:
            raise SystemExit(f"unexpected optimizer file name {f}")
        by_rank[int(m.group(1))] = f
    ranks = sorted(by_rank)
    if ranks != list(range(len(ranks))):
        raise SystemExit(f"optimizer files of ranks {ranks}: not 0..W-1")
    return [by_rank[r] for r in ranks]


def save(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(obj, path)


def convert(src, dst, tag=None, log=print):
    if tag is None:
        with open(os.path.join(src, "latest")) as f:
            tag = f.read().strip()
    tag_dir = os.path.join(src, tag)
    ms_files = sorted(glob.glob(os.path.join(tag_dir, "mp_rank_*_model_states.pt")))
    if len(ms_files) != 1:
        raise SystemExit(f"expected one mp_rank_*_model_states.pt in {tag_dir}, found {ms_files}")
    ms = torch.load(ms_files[0], map_location="cpu")
    shapes = {}
    for d in ms["param_shapes"]:
        shapes.update(d)

    files = optim_files(tag_dir)
    sds = [torch.load(f, map_location="cpu")["optimizer_state_dict"] for f in files]
    stage = sds[0].get("zero_stage", 1)
    if int(stage) > 2:
        raise SystemExit(f"{tag_dir}: zero_stage {stage}, this is the stage-1/2 converter")

    out = os.path.join(dst, f"{tag}_universal")
    zero = os.path.join(out, "zero")
    # fragments[name][state] = [(rank, tensor)]
    frags = {}
    steps = {}
    for r, sd in enumerate(sds):
        state_groups = sd["base_optimizer_state"]["state"]
        fp32_groups = sd["single_partition_of_fp32_groups"]
        for g in range(len(state_groups)):
            flat = {"exp_avg": state_groups[g]["exp_avg"], "exp_avg_sq": state_groups[g]["exp_avg_sq"],
                    "fp32": fp32_groups[g]}
            for name, m in sd["param_slice_mappings"][g].items():
                for key, t in flat.items():
                    frags.setdefault(name, {}).setdefault(key, []).append(
                        (r, t.narrow(0, m.start, m.numel).clone()))
                if "step" in state_groups[g]:
                    steps.setdefault(name, []).append(state_groups[g]["step"])

    written = []
    for name, shape in shapes.items():
        if name not in frags:
            raise SystemExit(f"param {name} of param_shapes has no fragment in any rank's param_slice_mappings")
        full_shape = list(shape) if len(shape) else [1]
        if name in steps:
            st = steps[name]
            if not all(bool(v == st[0]) for v in st):
                raise SystemExit(f"{name}: ranks disagree on step {st}")
            save(os.path.join(zero, name, "step.pt"), st[0])
            written.append(f"zero/{name}/step.pt")
        for key in ("fp32", "exp_avg", "exp_avg_sq"):
            parts = [t for _, t in sorted(frags[name][key], key=lambda x: x[0])]
            merged = torch.cat(parts, dim=0)
            n = int(torch.Size(full_shape).numel())
            if merged.numel() != n:
                raise SystemExit(f"{name}/{key}: fragments hold {merged.numel()} elements, shape {list(shape)} "
                                 f"needs {n}")
            param = torch.cat([merged.reshape(full_shape)], dim=0)
            save(os.path.join(zero, name, f"{key}.pt"), {"cat_dim": 0, "param": param})
            written.append(f"zero/{name}/{key}.pt")
    extra = sorted(set(frags) - set(shapes))
    if extra:
        raise SystemExit(f"fragments of params missing from param_shapes: {extra}")

    sd0 = sds[0]
    out_sd = {k: v for k, v in sd0.items() if k not in SHARDED}
    out_sd["param_groups"] = sd0["base_optimizer_state"]["param_groups"]
    save(os.path.join(zero, "optimizer_state.pt"), out_sd)
    written.append("zero/optimizer_state.pt")
    shutil.copy2(ms_files[0], out)
    written.append(os.path.basename(ms_files[0]))
    with open(os.path.join(dst, "latest_universal"), "w") as f:
        f.write(f"{tag}_universal")
    log(f"universal12_reference: {len(written)} files in {out}, latest_universal -> {tag}_universal "
        f"({len(files)} ranks, {len(shapes)} params)")
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="checkpoint dir holding `latest` and the tag dir")
    ap.add_argument("--dst", required=True, help="output dir (gets latest_universal and <tag>_universal/)")
    ap.add_argument("--tag", default=None)
    a = ap.parse_args()
    if os.path.exists(os.path.join(a.dst, "latest_universal")):
        print(f"{a.dst} already holds a universal checkpoint; refusing to overwrite", file=sys.stderr)
        return 2
    convert(a.src, a.dst, a.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
