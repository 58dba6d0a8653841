"""Model-parallel fixtures of make_modern_fixtures.py: AutoTP (tensor_parallel.autotp_size T x data parallel D) on a
tiny LlamaForCausalLM, written by DeepSpeed 0.19.8's engine.save_checkpoint. register(fixture) adds them to the
generator's FIXTURES; each spec names its builder (spec["builder"], called as builder(ctx, spec, a, g) with g = the
generator module)."""
import json
import os
import shutil


def training_facts(tr, note):
    """MODERN.json's "training" of a rank program's train record `tr`."""
    return {"losses": tr["losses"], "losses_per_rank": tr["losses_per_rank"],
            "losses_after": tr["losses_after"], "losses_after_per_rank": tr["losses_after_per_rank"],
            "global_steps": tr["global_steps"], "global_samples": tr["global_samples"],
            "skipped_steps": tr["skipped_steps"], "adam_steps": tr["live"]["adam_steps"],
            "lr_at_save": tr["lr_at_save"], "note": note}


def llama(heads, kv, hidden, vocab=61, inter=32, layers=2):
    return {"vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "max_position_embeddings": 32,
            "tie_word_embeddings": False}


def autotp_config(W, T, stage, dtype, extra_zero=None):
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        # no train_batch_size: DeepSpeedConfig is built twice and counts different ranks each time (see NOTE_BATCH)
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8,
                                                   "weight_decay": 0.1, "torch_adam": True}},
        "gradient_clipping": 1.0,
        "zero_optimization": dict({"stage": stage}, **(extra_zero or {})),
        "tensor_parallel": {"autotp_size": T},
        "steps_per_print": 1000,
    }
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


NOTE_BATCH = ("ds_config has no train_batch_size (DeepSpeed derives it): deepspeed.initialize's DeepSpeedConfig "
              "(no mpu; the TP groups are made later, inside the engine) checks it against all W ranks, and at "
              "ZeRO-3 the engine's zero.Init builds a second DeepSpeedConfig with the engine's mpu, which checks it "
              "against the D data-parallel ranks: with train_batch_size 2 x W = 8 given, ZeRO-3 fails with "
              "'AssertionError: Check batch related parameters. train_batch_size is not equal to "
              "micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 2' (and 4 fails the first check). "
              "Each of the D data-parallel ranks takes distinct rows, the T ranks of a TP group the same rows")


def register(fixture):
    common = dict(kind="autotp", builder=build_autotp, W=4, T=2, D=2)
    fixture("autotp_z1_fp32_t2d2", stage=1, dtype="fp32", llama=llama(4, 2, 16),
            ds_config=autotp_config(4, 2, 1, "fp32"), **common)
    fixture("autotp_z2_bf16_t2d2", stage=2, dtype="bf16", llama=llama(4, 2, 16),
            ds_config=autotp_config(4, 2, 2, "bf16"), **common)
    fixture("autotp_z3_fp32_t2d2", stage=3, dtype="fp32", llama=llama(4, 2, 16),
            ds_config=autotp_config(4, 2, 3, "fp32", {"stage3_param_persistence_threshold": 0}), **common)
    fixture("autotp_uneven_z1_fp32_t2d2", stage=1, dtype="fp32", llama=llama(6, 3, 24, layers=1),
            ds_config=autotp_config(4, 2, 1, "fp32"), **common)
    # 4 KV heads: a universal load at T = 4 splits every head whole (resume at a new T).
    fixture("autotp_kv4_z1_fp32_t2d2", stage=1, dtype="fp32", llama=llama(4, 4, 16, layers=1),
            ds_config=autotp_config(4, 2, 1, "fp32"), **common)
    register_autoep(fixture)
    register_moe(fixture)


def describe_model(spec):
    c = spec["llama"]
    return (f"transformers.LlamaForCausalLM(LlamaConfig(vocab_size={c['vocab_size']}, hidden_size={c['hidden_size']}, "
            f"intermediate_size={c['intermediate_size']}, num_hidden_layers={c['num_hidden_layers']}, "
            f"num_attention_heads={c['num_attention_heads']}, num_key_value_heads={c['num_key_value_heads']}, "
            f"max_position_embeddings=32, tie_word_embeddings=False)), built in-process (no download); head_dim "
            f"{c['hidden_size'] // c['num_attention_heads']}")


def _model_states_facts(g, tag_dir):
    """What AutoTP adds to the model-states files: per file, checkpoint_parallel_dimensions, mp_world_size,
    dp_world_size, the module's shapes, and universal_checkpoint_info (with its affine_map)."""
    import glob
    out = {}
    first = None
    for p in sorted(glob.glob(os.path.join(tag_dir, "*model_states.pt"))):
        ms = g.load(p)
        uci = json.loads(json.dumps(ms.get("universal_checkpoint_info"), default=str))
        ent = {
            "checkpoint_parallel_dimensions": ms.get("checkpoint_parallel_dimensions"),
            "mp_world_size": ms.get("mp_world_size"), "dp_world_size": ms.get("dp_world_size"),
            "module_shapes": {k: list(v.shape) for k, v in (ms.get("module") or {}).items() if hasattr(v, "shape")},
        }
        if first is None:
            first = (os.path.basename(p), uci)
            ent["universal_checkpoint_info"] = uci
        else:
            ent["universal_checkpoint_info_equals_" + first[0]] = uci == first[1]
        out[os.path.basename(p)] = ent
    return out, (first[1] if first else None)


def _train_resume_tools(ctx, spec, a, g, program, wspec, resume_how):
    """Trains (the rank program on W ranks), resumes from a scratch copy, runs DeepSpeed's tools on checkpoint/ and
    checks them against the live values: (rank 0's train record, tag, resume_check, roots)."""
    fx, scratch, W = ctx.fx, ctx.scratch, spec["W"]
    ckpt = os.path.join(fx, "checkpoint")
    res_base = wspec["result"]
    spec_path = os.path.join(scratch, "spec.json")
    json.dump(wspec, open(spec_path, "w"), indent=1)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    rc, dt, out, err = g.launch(ctx, W, program, ["--spec", spec_path, "--phase", "train"],
                                os.path.join(scratch, "logs", "train"), env=env)
    if rc:
        raise RuntimeError(f"training failed rc={rc}: {g.error_line(err)}\n{g.tail(err)}")
    tr = json.load(open(res_base + ".train.json"))
    tag = open(os.path.join(ckpt, "latest")).read().strip()
    resume = None
    if not a.no_resume_check:
        rcopy = os.path.join(scratch, "resume", "checkpoint")
        shutil.copytree(ckpt, rcopy, symlinks=True)
        rspec_path = os.path.join(scratch, "spec_resume.json")
        json.dump(dict(wspec, ckpt=rcopy), open(rspec_path, "w"), indent=1)
        rc, dt, out, err = g.launch(ctx, W, program, ["--spec", rspec_path, "--phase", "resume"],
                                    os.path.join(scratch, "logs", "resume"), env=env)
        resume = {"how": resume_how, "rc": rc}
        if rc == 0:
            rr = json.load(open(res_base + ".resume.json"))
            resume.update(losses_after=rr["losses_after"], losses_after_per_rank=rr["losses_after_per_rank"],
                          losses_equal=rr["losses_after"] == tr["losses_after"],
                          state_equal=g.state_equal(tr, rr), global_steps=rr["global_steps"],
                          client_state_keys=rr["client_state_keys"])
        else:
            resume["error"] = g.error_line(err)
            resume["stderr_tail"] = g.tail(err)
    roots = [g.run_tools(ctx, "checkpoint", "expected", "zero_to_fp32")]
    key = ("checkpoint", tag)
    g.check_tools(fx, roots, {key: tr["live"]}, {key: tr["module"]}, {key: tr["model"]})
    return tr, tag, resume, roots


def build_autotp(ctx, spec, a, g):
    fx, scratch, W = ctx.fx, ctx.scratch, spec["W"]
    ckpt = os.path.join(fx, "checkpoint")
    wspec = {"ds_config": spec["ds_config"], "llama": spec["llama"], "steps": 4, "extra": 2, "ckpt": ckpt,
             "result": os.path.join(scratch, "result")}
    tr, tag, resume, roots = _train_resume_tools(
        ctx, spec, a, g, "autotp_worker.py", wspec,
        "fresh launch at the same W (same T x D) on a copy of checkpoint/: the model built with seed 4321, "
        "deepspeed.initialize as in training (AutoTP shards it again), engine.load_checkpoint(dir) (tag from "
        "latest), the live state gathered over TP as at save time, then 2 steps on batches 4 and 5")
    ms_facts, saved_uci = _model_states_facts(g, os.path.join(ckpt, tag))
    cfg = spec["ds_config"]
    how = tr["live"]["tp_gather"]["how"]
    disagree = [f"{n}.{k}" for n, e in how.items() for k, x in e.items() if x.get("affine_equals_plain") is False]
    no_map = sorted({n for n, e in how.items() for k, x in e.items() if "affine_pattern" not in x})
    errs = sorted({x["affine_error"] for e in how.values() for x in e.values() if "affine_error" in x})
    uneven = {n: e["fp32"]["shard_shapes"] for n, e in how.items()
              if len({tuple(s) for s in e["fp32"]["shard_shapes"]}) > 1}
    notes = [
        "live values: common.live_state on every rank (each param's TP shard, whole over its ZeRO data-parallel "
        "group: ZeRO's own fragments summed with all_reduce over p._dp_group, which is the DP group "
        f"{tr['zero_partition_groups_of_params'][next(iter(tr['zero_partition_groups_of_params']))]} on rank 0); "
        "the T shards of a TP group gathered with all_gather_object and put together twice: by DeepSpeed's own "
        "affine map (ParamAffineMap.from_dict(universal_checkpoint_info['affine_map']['params'][pattern]).rebuild) "
        "and by a plain rule (identical shards = replicated; else torch.cat along the one dim whose size differs "
        "from the map's logical_shape). The recorded value is the plain one; live_state.tp_gather.how says, per "
        f"param and key, which rule applied and whether the affine map agreed: disagreements {disagree or 'none'}; "
        f"params without an affine-map entry {no_map or 'none'}; affine-map errors {errs or 'none'}",
        f"TP shards of unequal shape (rank 0, rank 1): {uneven or 'none'}",
        "AutoTP swapped in deepspeed.module_inject.layers.LinearLayer (q/k/v/gate/up/lm_head: column split, dim 0) "
        "and LinearAllreduce (o_proj/down_proj: row split, dim 1); embed_tokens and the RMSNorm weights stay whole "
        "on every TP rank (tp_replicated_parameter_patterns); lm_head is a vocabulary param (vocab "
        f"{spec['llama']['vocab_size']} split {uneven.get('lm_head.weight', 'evenly')})",
        NOTE_BATCH,
    ]
    recipe = {
        **g.recipe_commands("autotp_worker.py", W),
        "spec": dict(wspec, ckpt="<checkpoint dir>", result="<result path prefix>"),
        "model": describe_model(spec),
        "init": "torch.manual_seed(1234) then the model constructor, on every rank (resume: seed 4321, then "
                "load_checkpoint); deepspeed.initialize(model, model.parameters(), config) with "
                f"tensor_parallel.autotp_size {spec['T']}: the engine shards the model (AutoTP) and makes the TP and "
                "DP groups",
        "rank_layout": tr["rank_layout"],
        "data": "step s: torch.Generator().manual_seed(1000+s); tokens = randint(0, vocab, (2*D, 8)); DP rank d "
                "takes rows [2d, 2d+2) (both TP ranks of a group the same rows); input_ids = labels = those rows; "
                "loss = the model's causal-LM loss",
        "steps": "4 steps (batches 0..3), save_checkpoint(checkpoint/) with default tag, then 2 more steps "
                 "(batches 4, 5) in the same process = losses_after",
        "tag": tag,
    }
    return {
        "kind": "deepspeed engine.save_checkpoint, AutoTP (tensor_parallel.autotp_size)",
        "world_size": W, "tp_size": spec["T"], "dp_size": spec["D"], "zero_stage": spec["stage"],
        "dtype": spec["dtype"],
        "optimizer": {"ds_config_optimizer": cfg.get("optimizer"), "class": tr["optimizer_class"],
                      "basic_optimizer_class": tr["basic_optimizer_class"], "param_groups": tr["param_groups"]},
        "data_types": tr["data_types"],
        "ds_config": cfg,
        "model": dict(tr["model"], definition=describe_model(spec), module_classes=tr["module_classes"]),
        "recipe": recipe,
        "training": training_facts(tr, "losses: mean over all W ranks of each rank's micro-batch loss (the T "
                                       "ranks of a TP group compute the same loss)"),
        "resume_check": resume,
        "checkpoint_tag": tag,
        "roots": roots,
        "live_state": {"tag": tag, **tr["live"]},
        "module_values": tr["module"],
        "universal_checkpoint_info_live_equals_saved": tr["universal_checkpoint_info_live"] == saved_uci,
        "zero_partition_groups_of_params_rank0": tr["zero_partition_groups_of_params"],
        "file_facts": g.file_facts(os.path.join(ckpt, tag)),
        "model_states_facts": ms_facts,
        "versions": tr["versions"],
        "vs_0_14_5": None,
        "notes": notes,
    }


# ------------------------------------------------------------------------------------------------------------------
# AutoEP (expert_parallel.autoep_size) on a tiny Mixtral
# ------------------------------------------------------------------------------------------------------------------
def mixtral(experts=4, top_k=2, hidden=16, vocab=61, inter=8, layers=2, head_dim=None):
    c = {"vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
         "tie_word_embeddings": False, "num_local_experts": experts, "num_experts_per_tok": top_k}
    if head_dim is not None:  # an odd hidden size: rotary embeddings need an even head_dim, so it is given
        c["head_dim"] = head_dim
    return c


def autoep_config(E, stage, dtype, extra_zero=None):
    cfg = autotp_config(0, 0, stage, dtype, extra_zero)
    del cfg["tensor_parallel"]
    cfg["expert_parallel"] = {"enabled": True, "autoep_size": E, "preset_model": "mixtral"}
    return cfg


def register_autoep(fixture):
    fixture("autoep_z2_fp32_e2d2", kind="autoep", builder=build_autoep, W=4, E=2, stage=2, dtype="fp32",
            mixtral=mixtral(), ds_config=autoep_config(2, 2, "fp32"))
    fixture("autoep_z1_fp32_e2d2", kind="autoep", builder=build_autoep, W=4, E=2, stage=1, dtype="fp32",
            mixtral=mixtral(), ds_config=autoep_config(2, 1, "fp32"),
            exercises="ZeRO-1 (else as autoep_z2_fp32_e2d2): the same per-group partitioning, no gradient "
                      "partitioning")
    # The expert group's flat length per EP rank is 3 (w1, w2, w3) x layers x local experts x hidden x inter; it
    # must not divide by 2 x D = 6, so every factor but the 3 is odd: one layer, 3 local experts (6 over EP 2),
    # hidden 15 (head_dim 4 given: rotary needs an even one), inter 7: 945 elements, padded to 948. Odd widths need
    # AutoEP's per-expert loop: torch._grouped_mm (the default) refuses them ("strides should be multiple of 16
    # bytes"), which would make every AutoEP expert group a multiple of 48 elements per layer and local expert.
    e2d3 = autoep_config(2, 2, "fp32")
    e2d3["expert_parallel"]["use_grouped_mm"] = False
    fixture("autoep_z2_fp32_e2d3", kind="autoep", builder=build_autoep, W=6, E=2, stage=2, dtype="fp32",
            mixtral=mixtral(experts=6, hidden=15, inter=7, layers=1, head_dim=4), ds_config=e2d3,
            exercises="D = 3 (W 6, EP 2): the expert group (945 elements per EP rank) padded to 948, so the last "
                      "rank of each expert-data-parallel group carries end padding; 3 local experts per rank; "
                      "expert_parallel.use_grouped_mm false (torch._grouped_mm needs 16-byte strides: widths a "
                      "multiple of 4 in fp32, which would make the expert group divide by 6)")
    dbe = autoep_config(2, 2, "fp32")
    dbe["use_data_before_expert_parallelism"] = True
    fixture("autoep_z2_fp32_e2d2_dbe", kind="autoep", builder=build_autoep, W=4, E=2, stage=2, dtype="fp32",
            mixtral=mixtral(), ds_config=dbe,
            exercises="use_data_before_expert_parallelism true (top-level ds_config key; the engine's AutoEP path "
                      "passes it to groups._create_expert_and_data_parallel, runtime/engine.py): expert-data-"
                      "parallel groups [0,1] and [2,3], EP groups [0,2] and [1,3] (EP rank = r div D)")
    fixture("autoep_z3_fp32_e2d2", kind="autoep", builder=build_autoep, W=4, E=2, stage=3, dtype="fp32",
            mixtral=mixtral(), ds_config=autoep_config(2, 3, "fp32", {"stage3_param_persistence_threshold": 0}),
            exercises="AutoEP at ZeRO-3: every rank writes its own model-states file (checkpoint_format "
                      "zero3_partitioned) and its optimizer file ds_zero_partition_groups; no expert files")


def describe_mixtral(spec):
    c = spec["mixtral"]
    return ("transformers.MixtralForCausalLM(MixtralConfig(" + ", ".join(f"{k}={v}" for k, v in c.items()) +
            ")), built in-process (no download)")


def _autoep_states_facts(g, tag_dir):
    import glob
    out = {}
    for p in sorted(glob.glob(os.path.join(tag_dir, "*model_states.pt"))):
        ms = g.load(p)
        b = os.path.basename(p)
        if b.startswith("layer_"):
            out[b] = {"keys": sorted(ms) if isinstance(ms, dict) else g.tname(ms),
                      "tensors": {k: g.tdesc(v) for k, v in ms.items() if hasattr(v, "shape")}
                      if isinstance(ms, dict) else None}
            continue
        out[b] = {k: json.loads(json.dumps(ms.get(k), default=str)) for k in (
            "num_experts", "ds_autoep_layers", "universal_checkpoint_info", "checkpoint_parallel_dimensions",
            "mp_world_size", "dp_world_size")}
        out[b]["module_shapes"] = {k: list(v.shape) for k, v in (ms.get("module") or {}).items()
                                   if hasattr(v, "shape")}
    return out


def _partition_facts(g, tag_dir):
    """Per optimizer file: its groups' names, partition_count and group_paddings as saved (ZeRO-1/2), or ZeRO-3's
    ds_zero_partition_groups; and a note naming the padding each group gets (the padding is on the last rank of a
    group's partition group only)."""
    import glob
    import re
    out = {}
    for p in sorted(glob.glob(os.path.join(tag_dir, "*optim_states.pt")),
                    key=lambda x: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", x)]):
        osd = g.load(p)["optimizer_state_dict"]
        base = osd.get("base_optimizer_state") or osd.get("optimizer_state_dict") or {}
        pg = base.get("param_groups") if isinstance(base, dict) else None
        ent = {"group_names": [x.get("name") for x in pg] if pg else None}
        for k in ("partition_count", "group_paddings", "ds_zero_partition_groups"):
            if k in osd:
                ent[k] = json.loads(json.dumps(osd[k], default=str))
        out[os.path.basename(p)] = ent
    pads = {}
    for f, ent in out.items():
        for gi, pad in enumerate(ent.get("group_paddings") or []):
            if pad:
                pads.setdefault((ent["group_names"] or [None] * (gi + 1))[gi] or gi, []).append(f"{f}: {pad}")
    names = next(iter(out.values()), {}).get("group_names") if out else None
    z3 = next((e["ds_zero_partition_groups"] for e in out.values() if "ds_zero_partition_groups" in e), None)
    if z3 is not None:
        note = ("ZeRO-3 sub-groups (rank 0's ds_zero_partition_groups): " +
                "; ".join(f"sub-group {x['sub_group']} {x['group_names']} families {x['families']} over ranks "
                          f"{x['partition_ranks']}" for x in z3) +
                " (each expert sub-group cut over its expert-data-parallel group by ZeRO-3's per-param rule)")
    elif not any("group_paddings" in e for e in out.values()):
        note = None
    elif pads:
        note = ("group_paddings as saved, its non-zero entries (all others are 0): " +
                "; ".join(f"group {k!r}: {v}" for k, v in pads.items()) +
                f" (groups {names}, partition_count {next(iter(out.values())).get('partition_count')})")
    else:
        note = f"group_paddings: all 0 on every rank (groups {names})"
    return out, note


def build_autoep(ctx, spec, a, g):
    fx, scratch, W = ctx.fx, ctx.scratch, spec["W"]
    ckpt = os.path.join(fx, "checkpoint")
    wspec = {"ds_config": spec["ds_config"], "mixtral": spec["mixtral"], "steps": 4, "extra": 2, "ckpt": ckpt,
             "result": os.path.join(scratch, "result")}
    tr, tag, resume, roots = _train_resume_tools(
        ctx, spec, a, g, "autoep_worker.py", wspec,
        "fresh launch at the same W (same EP groups) on a copy of checkpoint/: the model built with seed 4321, "
        "deepspeed.initialize as in training (AutoEP replaces the MoE blocks again), engine.load_checkpoint(dir) "
        "(tag from latest), the live state gathered over EP as at save time, then 2 steps on batches 4 and 5")
    cfg = spec["ds_config"]
    alias_notes = []
    for c in roots[0]["converter"]:
        for d, x in ((c.get("vs_live") or {}).get("other_param_dirs") or {}).items():
            src = d.replace(".mlp.gate.gate.", ".mlp.router.gate.")
            if src != d and src in tr["live"]["params"]:
                got = g.tool_tensor(g.load(os.path.join(fx, c["output"], "zero", d, "fp32.pt")))
                x["what"] = f"AutoEP alias of {src}"
                x["vs_fp32_master_of_" + src] = g.compare(got, g.from_rec(tr["live"]["params"][src]["fp32"]))
                alias_notes.append(f"{d}: model_states 'module' holds it beside {src} (AutoEPMoELayer keeps the "
                                   f"router's Linear under a second name, `gate`; shared_params is empty), so the "
                                   f"converter writes zero/{d}/fp32.pt (fp32 only), equal to the live fp32 master "
                                   f"of {src}: {x['vs_fp32_master_of_' + src]['equal']}")
    hf_names = [p["name"] for p in tr["model"]["params"]]
    eng_names = list(tr["engine_params"])
    notes = [
        "AutoEP replaced each MixtralSparseMoeBlock (model.layers.N.mlp) by deepspeed.module_inject.auto_ep_layer."
        "AutoEPMoELayer (router: deepspeed.moe.ep_router.TokenChoiceTopKRouter, experts: deepspeed.moe.ep_experts."
        "GroupedExperts): the engine's param names are AutoEP's, not transformers': only in the HF model "
        f"{sorted(set(hf_names) - set(eng_names))}; only in the engine {sorted(set(eng_names) - set(hf_names))} "
        "(the fused gate_up_proj split into w1/w3; each rank holds num_local_experts / autoep_size experts: "
        f"{ {n: s for n, s in tr['engine_params'].items() if '.experts.' in n} })",
        f"ranks: {tr['rank_layout']} (ZeRO partitions dense params over all W ranks and expert params over the "
        "expert-data-parallel group)",
        "live values: common.live_state on every rank (dense params whole over all ranks; expert params this rank's "
        "experts, whole over its expert-data-parallel group), the expert params of an EP group's ranks gathered "
        "(all_gather_object) and concatenated along dim 0 (experts) in EP-group rank order; model info (model."
        "params) lists the transformers model's params before AutoEP replaced them",
        "ds_config has no train_batch_size (DeepSpeed derives it: micro 2 x accumulation 1 x W); rank r takes rows "
        "[2r, 2r+2) of each step's batch",
    ] + alias_notes
    parts, pad_note = _partition_facts(g, os.path.join(ckpt, tag))
    notes = ([f"exercises: {spec['exercises']}"] if spec.get("exercises") else []) + notes + \
        ([pad_note] if pad_note else [])
    recipe = {
        **g.recipe_commands("autoep_worker.py", W),
        "spec": dict(wspec, ckpt="<checkpoint dir>", result="<result path prefix>"),
        "model": describe_mixtral(spec),
        "init": "torch.manual_seed(1234) then the model constructor, on every rank (resume: seed 4321, then "
                "load_checkpoint); deepspeed.initialize(model, model.parameters(), config) with expert_parallel "
                f"{cfg['expert_parallel']}",
        "data": "step s: torch.Generator().manual_seed(1000+s); tokens = randint(0, vocab, (2*W, 8)); rank r takes "
                "rows [2r, 2r+2); input_ids = labels = those rows; loss = the model's causal-LM loss (no router "
                "aux loss: output_router_logits False)",
        "steps": "4 steps (batches 0..3), save_checkpoint(checkpoint/) with default tag, then 2 more steps "
                 "(batches 4, 5) in the same process = losses_after",
        "tag": tag,
    }
    return {
        "kind": "deepspeed engine.save_checkpoint, AutoEP (expert_parallel.autoep_size)",
        "world_size": W, "ep_size": spec["E"], "zero_stage": spec["stage"], "dtype": spec["dtype"],
        "optimizer": {"ds_config_optimizer": cfg.get("optimizer"), "class": tr["optimizer_class"],
                      "basic_optimizer_class": tr["basic_optimizer_class"], "param_groups": tr["param_groups"]},
        "data_types": tr["data_types"],
        "ds_config": cfg,
        "model": dict(tr["model"], definition=describe_mixtral(spec), engine_params=tr["engine_params"],
                      module_classes=tr["module_classes"]),
        "recipe": recipe,
        "training": training_facts(tr, "losses: mean over all W ranks of each rank's micro-batch loss"),
        "resume_check": resume,
        "checkpoint_tag": tag,
        "roots": roots,
        "live_state": {"tag": tag, **tr["live"]},
        "module_values": tr["module"],
        "file_facts": g.file_facts(os.path.join(ckpt, tag)),
        "model_states_facts": _autoep_states_facts(g, os.path.join(ckpt, tag)),
        "partition_facts": parts,
        "versions": tr["versions"],
        "vs_0_14_5": None,
        "notes": notes,
    }


# ------------------------------------------------------------------------------------------------------------------
# native DeepSpeed MoE (deepspeed.moe.layer.MoE, ep_size)
# ------------------------------------------------------------------------------------------------------------------
MOE_MODEL = ("MoENet (tests/tools/modern/moe_worker.py): embed [61,16] -> deepspeed.moe.layer.MoE(16, Expert, "
             "num_experts 4, ep_size 2, k 1, use_rts False, drop_tokens False) with gate wg [4,16] and Expert = fc1 "
             "[16,16]+[16], gelu, fc2 [16,16]+[16] -> residual + LayerNorm [16]+[16] -> head [61,16]+[61]; loss = "
             "cross-entropy(next token) + 0.01 * l_aux")


def moe_config(stage):
    return {k: v for k, v in autoep_config(2, stage, "fp32").items() if k != "expert_parallel"}


def register_moe(fixture):
    fixture("moe_z2_fp32_e2d2", kind="moe", builder=build_moe, W=4, E=2, N=4, stage=2, dtype="fp32",
            ds_config=moe_config(2))
    fixture("moe_z1_fp32_e2d2", kind="moe", builder=build_moe, W=4, E=2, N=4, stage=1, dtype="fp32",
            ds_config=moe_config(1), exercises="ZeRO-1 (else as moe_z2_fp32_e2d2)")
    # The same model at D = 3: the expert group (2 local experts x 544 = 1088 per EP rank) does not divide by
    # 2 x 3, so it pads to 1092; the dense group (2109) pads to 2112 over 6 ranks.
    fixture("moe_z2_fp32_e2d3", kind="moe", builder=build_moe, W=6, E=2, N=4, stage=2, dtype="fp32",
            ds_config=moe_config(2),
            exercises="D = 3 (W 6, EP 2): the expert group (1088 elements per EP rank) padded to 1092, so the last "
                      "rank of each expert-data-parallel group carries end padding; the dense group (2109) padded "
                      "to 2112")


def build_moe(ctx, spec, a, g):
    fx, scratch, W = ctx.fx, ctx.scratch, spec["W"]
    ckpt = os.path.join(fx, "checkpoint")
    cfg = spec["ds_config"]
    wspec = {"ds_config": cfg, "ep_size": spec["E"], "num_experts": spec["N"], "steps": 4, "extra": 2,
             "ckpt": ckpt, "result": os.path.join(scratch, "result")}
    tr, tag, resume, roots = _train_resume_tools(
        ctx, spec, a, g, "moe_worker.py", wspec,
        "fresh launch at the same W (same EP groups) on a copy of checkpoint/: the model built with seed 4321, "
        "deepspeed.initialize as in training, engine.load_checkpoint(dir) (tag from latest), the live state "
        "gathered over EP as at save time, then 2 steps on batches 4 and 5")
    notes = [
        f"ranks: {tr['rank_layout']} (ZeRO-{spec['stage']} partitions the dense group over all W ranks and the "
        "expert group (param group 'ep_size_2', moe True, from deepspeed.moe.utils."
        "split_params_into_different_moe_groups_for_optimizer) over the expert-data-parallel group)",
        "live values: common.live_state on every rank (dense params whole over all ranks; expert params this rank's "
        "local experts deepspeed_experts.0/1, whole over its expert-data-parallel group), renamed to the global "
        "expert id ep_rank * 2 + local id (the numbering of layer_0_expert_<id>_mp_rank_00_model_states.pt) and "
        "gathered over the EP group; model.params lists them under those global names",
        "ds_config has no train_batch_size (DeepSpeed derives it: micro 2 x accumulation 1 x W); rank r takes rows "
        "[2r, 2r+2) of each step's batch",
    ]
    parts, pad_note = _partition_facts(g, os.path.join(ckpt, tag))
    notes = ([f"exercises: {spec['exercises']}"] if spec.get("exercises") else []) + notes + \
        ([pad_note] if pad_note else [])
    if not all(c["ok"] for r in roots for c in r["converter"]):
        notes.append("ds_to_universal cannot convert a native DeepSpeed MoE checkpoint (see roots[].converter[]."
                     "attempts for the error): the live values in live_state are the reference for this fixture")
    recipe = {
        **g.recipe_commands("moe_worker.py", W),
        "spec": dict(wspec, ckpt="<checkpoint dir>", result="<result path prefix>"),
        "model": MOE_MODEL,
        "init": "torch.manual_seed(1234) then MoENet(), on every rank after deepspeed.init_distributed (resume: seed "
                "4321, then load_checkpoint); deepspeed.initialize(model, model_parameters=split_params_into_"
                "different_moe_groups_for_optimizer({'params': all, 'name': 'all'}), config)",
        "data": "step s: torch.Generator().manual_seed(1000+s); tokens = randint(0, 61, (2*W, 9)); rank r takes rows "
                "[2r, 2r+2); inputs tokens[:, :-1], labels tokens[:, 1:]",
        "steps": "4 steps (batches 0..3), save_checkpoint(checkpoint/) with default tag, then 2 more steps "
                 "(batches 4, 5) in the same process = losses_after",
        "tag": tag,
    }
    return {
        "kind": "deepspeed engine.save_checkpoint, native MoE (deepspeed.moe.layer.MoE, ep_size)",
        "world_size": W, "ep_size": spec["E"], "zero_stage": spec["stage"], "dtype": spec["dtype"],
        "optimizer": {"ds_config_optimizer": cfg.get("optimizer"), "class": tr["optimizer_class"],
                      "basic_optimizer_class": tr["basic_optimizer_class"], "param_groups": tr["param_groups"],
                      "param_groups_given": tr["param_groups_given"]},
        "data_types": tr["data_types"],
        "ds_config": cfg,
        "model": dict(tr["model"], definition=MOE_MODEL),
        "recipe": recipe,
        "training": training_facts(tr, "losses: mean over all W ranks of each rank's micro-batch loss "
                                       "(with the 0.01 l_aux)"),
        "resume_check": resume,
        "checkpoint_tag": tag,
        "roots": roots,
        "live_state": {"tag": tag, **tr["live"]},
        "module_values": tr["module"],
        "file_facts": g.file_facts(os.path.join(ckpt, tag)),
        "model_states_facts": _autoep_states_facts(g, os.path.join(ckpt, tag)),
        "partition_facts": parts,
        "versions": tr["versions"],
        "vs_0_14_5": None,
        "notes": notes,
    }
