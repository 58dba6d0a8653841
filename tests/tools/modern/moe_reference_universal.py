#!/usr/bin/env python3
"""A reference universal checkpoint for a native DeepSpeed MoE ZeRO-1/2 checkpoint, in the layout
src/design/expert-layouts.md section 4 proposes (DeepSpeed 0.19.8's ds_to_universal cannot convert native MoE).
Only for checking tests/ecosystem/expert_resume_test.py's universal path before ucfs serves that view; run inside
the modern root:

    tests/ecosystem/run.sh python3 tests/tools/modern/moe_reference_universal.py CKPT_DIR OUT_DIR

CKPT_DIR holds `latest`; OUT_DIR gets latest_universal and <tag>_universal/{mp_rank_00_model_states.pt (copied),
zero/optimizer_state.pt, zero/<local name>/{fp32,exp_avg,exp_avg_sq,step}.pt}. Dense params as ds_to_universal
writes them ({'cat_dim': 0, 'param'}); an expert param, by its LOCAL engine name, as
{'param': [EP, *shape] (EP rank e's slot at dim 0), 'cat_dim': 0, 'is_expert_param': True, 'ep_num_experts': EP}:
DeepSpeed's universal loader (checkpoint/universal_checkpoint.py:load_hp_checkpoint_state) gives EP rank e the slice
[e*m, (e+1)*m), m = ep_num_experts / ep_size = 1 at the saved EP, and refuses another EP.
Read from the rank files alone (partition_count, the EDP groups of ds_config's topology flag, param_shapes order),
not from any live value, so a resume from it is a real check.
"""
import os
import shutil
import sys

import torch

STATES = ("exp_avg", "exp_avg_sq")


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def members(g_count, world, ep, dbe):
    """The ranks holding each family's partitions of a group cut over g_count ranks, in partition order."""
    if g_count == world:
        return [list(range(world))]
    d = g_count
    if dbe:  # use_data_before_expert_parallelism: EDP(e) = range(e*D, (e+1)*D)
        return [list(range(e * d, (e + 1) * d)) for e in range(ep)]
    return [list(range(e, world, ep)) for e in range(ep)]  # default: EDP(e) = range(e, W, EP)


def main():
    src, out = sys.argv[1], sys.argv[2]
    tag = open(os.path.join(src, "latest")).read().strip()
    tdir = os.path.join(src, tag)
    ms = load(os.path.join(tdir, "mp_rank_00_model_states.pt"))
    dbe = bool((ms.get("ds_config") or {}).get("use_data_before_expert_parallelism", False))
    world = ms["dp_world_size"]
    ranks = [load(os.path.join(tdir, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))["optimizer_state_dict"]
             for r in range(world)]
    osd0 = ranks[0]
    base0 = osd0["base_optimizer_state"]
    udir = os.path.join(out, tag + "_universal")
    zdir = os.path.join(udir, "zero")
    os.makedirs(zdir)
    for g, shapes in enumerate(ms["param_shapes"]):
        count = osd0["partition_count"][g]
        if any(osd0["param_alignment_paddings"][g]):
            raise SystemExit(f"group {g}: alignment padding between params is not handled")
        fams = members(count, world, world // count, dbe)
        n = sum(int(torch.Size(s).numel()) for s in shapes.values())
        flats = []
        for mem in fams:
            f = {"fp32": torch.cat([ranks[r]["single_partition_of_fp32_groups"][g].float() for r in mem])[:n]}
            for k in STATES:
                f[k] = torch.cat([ranks[r]["base_optimizer_state"]["state"][g][k].float() for r in mem])[:n]
            assert f["fp32"].numel() == n, (g, f["fp32"].numel(), n)
            flats.append(f)
        step = base0["state"][g]["step"]
        off = 0
        for name, shape in shapes.items():
            numel = int(torch.Size(shape).numel())
            pdir = os.path.join(zdir, name)
            os.makedirs(pdir)
            for k in ("fp32",) + STATES:
                parts = [f[k].narrow(0, off, numel).reshape(shape).clone() for f in flats]
                if len(fams) == 1:
                    body = {"cat_dim": 0, "param": parts[0]}
                else:  # an expert param: each EP rank's slot by the local name, stacked over EP ranks
                    body = {"param": torch.stack(parts), "cat_dim": 0, "is_expert_param": True,
                            "ep_num_experts": len(fams)}
                torch.save(body, os.path.join(pdir, k + ".pt"))
            torch.save(step.clone() if torch.is_tensor(step) else torch.tensor(float(step)),
                       os.path.join(pdir, "step.pt"))
            off += numel
    # ds_to_universal.py:_save_optimizer_state
    sharded = ("base_optimizer_state", "param_slice_mappings", "single_partition_of_fp32_groups")
    opt = {k: v for k, v in osd0.items() if k not in sharded}
    opt["param_groups"] = base0["param_groups"]
    torch.save(opt, os.path.join(zdir, "optimizer_state.pt"))
    shutil.copy(os.path.join(tdir, "mp_rank_00_model_states.pt"), udir)
    with open(os.path.join(out, "latest_universal"), "w") as f:
        f.write(tag + "_universal")
    print(f"wrote {udir}: {len(os.listdir(zdir)) - 1} params, EDP order {'D+E' if dbe else 'E+D'}")


if __name__ == "__main__":
    main()
