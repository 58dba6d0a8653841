#!/usr/bin/python3
"""Writes a ZeRO-3 checkpoint in DeepSpeed 0.14.5's exact format, without DeepSpeed.

For benchmarks that need checkpoints far larger than the test fixtures. The
files are made with torch.save from the same Python objects DeepSpeed pickles
(ZeroStageEnum and LossScaler are stood in for by classes of the same module
and name, so the pickles name the same globals); `--like FIXTURE` rebuilds a
fixture's run from its ORACLE.json so that the generated data.pkl files can be
compared byte for byte with DeepSpeed's (tests/bench_generator_test.sh).

Examples:
  make_checkpoint.py --out /tmp/ck --layers 24 --hidden 1024 --vocab 32000 --world-size 8
  make_checkpoint.py --out /tmp/tiny --like tests/data/fixtures/z3_fp32_ws2
"""
import argparse
import collections
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tools"))
import deepspeed_stand_ins  # noqa: E402


def split_sub_groups(params, ws, sub_group_size):
    """stage3.py _create_fp16_sub_groups over one param group's (name, numel)."""
    total = sum(math.ceil(n / ws) for _, n in params)
    if sub_group_size >= total:
        return [params]
    out, cur, acc = [], [], 0
    for i, (name, n) in enumerate(params):
        cur.append((name, n))
        acc += math.ceil(n / ws)
        if acc >= sub_group_size or i == len(params) - 1:
            out.append(cur)
            cur, acc = [], 0
    return out


def fresh(s):
    """An equal str that is a different object (pickle memoizes by identity)."""
    return (s + ".")[:-1]


def llama_like(layers, hidden, vocab, intermediate):
    """(module order, param shapes) of a LLaMA-style decoder."""
    shapes = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [(p + "self_attn.q_proj.weight", (hidden, hidden)),
                   (p + "self_attn.k_proj.weight", (hidden, hidden)),
                   (p + "self_attn.v_proj.weight", (hidden, hidden)),
                   (p + "self_attn.o_proj.weight", (hidden, hidden)),
                   (p + "mlp.gate_proj.weight", (intermediate, hidden)),
                   (p + "mlp.up_proj.weight", (intermediate, hidden)),
                   (p + "mlp.down_proj.weight", (hidden, intermediate)),
                   (p + "input_layernorm.weight", (hidden,)),
                   (p + "post_attention_layernorm.weight", (hidden,))]
    shapes += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return shapes


def adamw_group(lr, weight_decay):
    return {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-08, "weight_decay": weight_decay,
            "amsgrad": False, "foreach": None, "maximize": False, "capturable": False}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="checkpoint root to create")
    ap.add_argument("--like", help="a fixture dir: rebuild its run's metadata from ORACLE.json")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=0, help="default 8/3 hidden")
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16")
    ap.add_argument("--sub-group-size", type=int, default=1000000000)
    ap.add_argument("--tag", default="global_step100")
    ap.add_argument("--step", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--truth", help="also torch.save the full values of every state here "
                    "({param: {state: tensor}}), for tests")
    ap.add_argument("--one-group", action="store_true",
                    help="a single param group (DeepSpeed 0.14.5's ds_to_universal crashes on more "
                         "than one sub-group, so its benchmarks need this)")
    args = ap.parse_args()

    ZeroStageEnum, LossScaler = deepspeed_stand_ins.install()
    gen = torch.Generator().manual_seed(args.seed)

    if args.like:
        oracle = json.load(open(os.path.join(args.like, "ORACLE.json")))
        ws, dtype, tag = oracle["world_size"], oracle["dtype"], oracle["checkpoint_tag"]
        ds_config = oracle["ds_config"]
        shapes = [(p["name"], tuple(p["shape"])) for p in oracle["model"]["params"]]
        opt = oracle["optimizer"]
        groups = [(adamw_group(opt["lr"], opt["weight_decay"]), [n for n, _ in shapes])]
        step, global_steps = 4, 4
        global_samples = global_steps * ds_config["train_batch_size"]
        sub_group_size = ds_config["zero_optimization"].get("sub_group_size", 1000000000)
    else:
        ws, dtype, tag = args.world_size, args.dtype, args.tag
        inter = args.intermediate or (8 * args.hidden // 3 + 255) // 256 * 256
        shapes = llama_like(args.layers, args.hidden, args.vocab, inter)
        sub_group_size = args.sub_group_size
        ds_config = {"train_batch_size": 8 * ws, "train_micro_batch_size_per_gpu": 8,
                     "gradient_accumulation_steps": 1,
                     "zero_optimization": {"stage": 3, "sub_group_size": sub_group_size},
                     "bf16": {"enabled": dtype == "bf16"}}
        decay = [n for n, s in shapes if len(s) > 1]
        no_decay = [n for n, s in shapes if len(s) == 1]
        groups = [(adamw_group(3e-4, 0.1), decay), (adamw_group(3e-4, 0.0), no_decay)]
        if args.one_group:
            groups = [(adamw_group(3e-4, 0.1), [n for n, _ in shapes])]
        step, global_steps = args.step, args.step
        global_samples = global_steps * ds_config["train_batch_size"]

    lp = torch.bfloat16 if dtype == "bf16" else torch.float32
    shape_of = dict(shapes)
    numel = {n: math.prod(s) for n, s in shapes}

    # Sub-groups, numbered group-major, as DeepSpeed numbers them.
    sub_groups, group_of_sub = [], []
    for g, (_, names) in enumerate(groups):
        for sg in split_sub_groups([(n, numel[n]) for n in names], ws, sub_group_size):
            sub_groups.append([n for n, _ in sg])
            group_of_sub.append(g)

    # Full values, then each rank's slot of each param (valid part + zeros).
    def full(name, scale):
        return torch.randn(numel[name], generator=gen) * scale

    states = {"fp32": {}, "exp_avg": {}, "exp_avg_sq": {}}
    for n in numel:
        states["fp32"][n] = full(n, 0.02)
        states["exp_avg"][n] = full(n, 1e-3)
        states["exp_avg_sq"][n] = full(n, 1e-6).abs()

    def flat(state, names, rank):
        parts = []
        for n in names:
            p = math.ceil(numel[n] / ws)
            padded = torch.zeros(p * ws)
            padded[:numel[n]] = states[state][n]
            parts.append(padded[rank * p:(rank + 1) * p])
        return torch.cat(parts) if parts else torch.zeros(0)

    tag_dir = os.path.join(args.out, tag)
    os.makedirs(tag_dir, exist_ok=True)
    prefix = "bf16_" if dtype == "bf16" else ""
    module_order = [n for n, _ in shapes]
    for rank in range(ws):
        module = collections.OrderedDict((n, torch.empty(0, dtype=lp)) for n in module_order)
        module._metadata = collections.OrderedDict([("", {"version": 1})])
        for n in module_order:
            owner = n.rsplit(".", 1)[0]
            if owner not in module._metadata:
                module._metadata[owner] = {"version": 1}
        model_states = {
            "module": module,
            "buffer_names": [],
            "optimizer": None,
            # DeepSpeed's names here are other str objects than the module's
            # keys, so the pickle spells them out again instead of memo refs.
            "param_shapes": [collections.OrderedDict((fresh(n), torch.Size(shape_of[n])) for n in sg)
                             for sg in sub_groups],
            "frozen_param_shapes": collections.OrderedDict(),
            "shared_params": {},
            "frozen_param_fragments": collections.OrderedDict(),
            "lr_scheduler": None,
            "data_sampler": None,
            "random_ltd": None,
            "sparse_tensor_module_names": set(),
            "skipped_steps": 0,
            "global_steps": global_steps,
            "global_samples": global_samples,
            "dp_world_size": ws,
            "mp_world_size": 1,
            "ds_config": ds_config,
            "ds_version": "0.14.5",
        }
        torch.save(model_states, os.path.join(tag_dir, f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"))

        state = {k: {"step": torch.tensor(float(step)),
                     "exp_avg": flat("exp_avg", sg, rank),
                     "exp_avg_sq": flat("exp_avg_sq", sg, rank)} for k, sg in enumerate(sub_groups)}
        param_groups = []
        for g, (hyper, _) in enumerate(groups):
            pg = dict(hyper)
            pg["params"] = [k for k, owner in enumerate(group_of_sub) if owner == g]
            param_groups.append(pg)
        optim = {
            "optimizer_state_dict": {
                "zero_stage": ZeroStageEnum.weights,
                "loss_scaler": LossScaler(1.0),
                "dynamic_loss_scale": False,
                "overflow": False,
                "partition_count": ws,
                "optimizer_state_dict": {"state": state, "param_groups": param_groups},
                "fp32_flat_groups": [flat("fp32", sg, rank).requires_grad_() for sg in sub_groups],
            },
            "ds_config": ds_config,
            "ds_version": "0.14.5",
        }
        torch.save(optim, os.path.join(tag_dir, f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"))
    with open(os.path.join(args.out, "latest"), "w") as f:
        f.write(tag)
    if args.truth:
        torch.save({n: {s: states[s][n].view(shape_of[n]) for s in states} for n in numel}, args.truth)
    total = sum(numel.values())
    print(f"{args.out}: {len(shapes)} params, {total / 1e6:.1f}M elements, world size {ws}, "
          f"{len(sub_groups)} sub-groups, {dtype}")


if __name__ == "__main__":
    main()
