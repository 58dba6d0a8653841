"""The trainer-run fixtures of make_modern_fixtures.py (HF Trainer, accelerate, Lightning): each builder trains with
the trainer's own code into OUT/NAME/run/, resumes from a scratch copy, runs DeepSpeed's tools on every checkpoint
root, and returns the MODERN.json body. `g` is the generator module (its helpers)."""
import json
import os
import shutil


def _roots(run_dir, base):
    """Every directory below run_dir holding a `latest` file (a DeepSpeed save dir), relative to base."""
    out = []
    for d, dirs, files in os.walk(run_dir):
        dirs.sort()
        if "latest" in files:
            out.append(os.path.relpath(d, base))
    return sorted(out)


def _strip_values(live):
    """A live-state record without the b64 values (sha256 kept)."""
    out = json.loads(json.dumps(live))
    for ent in out.get("params", {}).values():
        for rec in ent.values():
            if isinstance(rec, dict):
                rec.pop("b64", None)
    for sect in ("params", "buffers"):
        for rec in out.get(sect, {}).values():
            if isinstance(rec, dict) and "sha256" in rec:
                rec.pop("b64", None)
    return out


def _launch(g, ctx, W, program, spec, phase, name):
    path = os.path.join(ctx.scratch, f"spec_{phase}.json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    rc, dt, out, err = g.launch(ctx, W, program, ["--spec", path, "--phase", phase],
                                os.path.join(ctx.scratch, "logs", name),
                                env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return rc, out, err


def _train(g, ctx, W, program, wspec):
    """The training phase on W ranks: rank 0's record of it. Without a training there is no fixture: raises."""
    rc, out, err = _launch(g, ctx, W, program, wspec, "train", "train")
    if rc:
        raise RuntimeError(f"training failed rc={rc}: {g.error_line(err)}\n{g.tail(err)}")
    return json.load(open(wspec["result"] + ".train.json"))


def _resume_copy(ctx, run):
    """A scratch copy of the run to resume from: the resume writes into it, and the fixture keeps the run as saved."""
    rrun = os.path.join(ctx.scratch, "resume", "run")
    shutil.copytree(run, rrun, symlinks=True)
    return rrun


def _resume(g, ctx, W, program, rspec, how):
    """The resume phase, a fresh launch at the same W: (MODERN.json's resume_check, {"how", "rc"} and the error when
    it failed; rank 0's record of the phase, None when it failed)."""
    rc, out, err = _launch(g, ctx, W, program, rspec, "resume", "resume")
    resume = {"how": how, "rc": rc}
    if rc:
        resume.update(error=g.error_line(err), stderr_tail=g.tail(err))
        return resume, None
    return resume, json.load(open(rspec["result"] + ".resume.json"))


def _body(g, ctx, spec, tr, kind, facts, notes):
    """MODERN.json's body: what every fixture states first (kind, W, ZeRO stage, dtype), the builder's own `facts`
    (optimizer .. module_values, in MODERN.json's order), then the saved files' facts, the versions and the notes (a
    trainer's run has no 0.14.5 fixture to compare with)."""
    return {"kind": kind, "world_size": spec["W"], "zero_stage": spec["stage"], "dtype": spec["dtype"], **facts,
            "file_facts": _file_facts(g, ctx.fx, facts["roots"]), "versions": tr["versions"], "vs_0_14_5": None,
            "notes": notes}


def _tools_for_roots(g, ctx, roots):
    res = []
    for root in roots:
        rel = os.path.relpath(root, "run")
        res.append(g.run_tools(ctx, root, os.path.join("expected", rel), os.path.join("zero_to_fp32", rel)))
    return res


def _file_facts(g, fx, roots_res):
    facts = {}
    for r in roots_res:
        for tag in r["tags"]:
            facts[f"{r['root']}/{tag}"] = g.file_facts(os.path.join(fx, r["root"], tag))
        root = os.path.join(fx, r["root"])
        others = {}
        for f in sorted(os.listdir(root)):
            p = os.path.join(root, f)
            if os.path.isfile(p) and (f.endswith((".pt", ".pth", ".bin", ".pkl"))):
                try:
                    others[f] = g.describe(g.load(p), depth=3)
                except Exception as e:  # noqa: BLE001
                    others[f] = f"<not loadable with torch.load: {type(e).__name__}: {e}>"[:300]
            elif os.path.isfile(p) and f.endswith(".json"):
                others[f] = json.load(open(p))
            elif os.path.isfile(p) and f == "latest":
                others[f] = open(p).read()
        facts[f"{r['root']}/(non-DeepSpeed files)"] = others
    return facts


# ------------------------------------------------------------------------------------------------------------------
def build_hf(ctx, spec, a, g):
    fx, W = ctx.fx, spec["W"]
    run = os.path.join(fx, "run")
    res_base = os.path.join(ctx.scratch, "result")
    wspec = {"model": spec["model"], "stage": spec["stage"], "dtype": spec["dtype"],
             "tie": spec["stage"] == 3 and spec["model"] == "llama", "max_steps": spec["max_steps"],
             "save_steps": spec["save_steps"], "last_save": spec["last_save"],
             "save_total_limit": spec["save_total_limit"], "run": run, "result": res_base}
    tr = _train(g, ctx, W, "hf_worker.py", wspec)
    last = spec["last_save"]
    by_step = dict(zip(tr["steps"], tr["losses"]))
    losses_after = [by_step[s] for s in sorted(by_step) if s > last]
    roots = _roots(run, fx)
    kept = sorted(int(os.path.basename(r).split("-")[1]) for r in roots)
    resume = None
    if not a.no_resume_check:
        rrun = _resume_copy(ctx, run)
        rspec = dict(wspec, run=rrun, resume_from=os.path.join(rrun, f"checkpoint-{last}"))
        resume, rr = _resume(g, ctx, W, "hf_worker.py", rspec,
                             f"fresh launch at the same W on a copy of run/: the same TrainingArguments, "
                             f"trainer.train(resume_from_checkpoint=run/checkpoint-{last}), the veto callback keeps "
                             f"it from saving; steps {last + 1}..{spec['max_steps']}")
        if rr is not None:
            resume.update(steps=rr["steps"], losses_after=rr["losses"], losses_after_per_rank=rr["losses_per_rank"],
                          losses_equal=rr["losses"] == losses_after,
                          state_equal=g.state_equal(tr["captures"][str(last)], rr["after_load"])
                          if rr.get("after_load") else None,
                          global_step_after_load=(rr.get("after_load") or {}).get("global_step"))
    roots_res = _tools_for_roots(g, ctx, roots)
    live_by_tag, module_by_tag, info_by_tag = {}, {}, {}
    for r in roots_res:
        step = r["root"].rsplit("-", 1)[1]
        for tag in r["tags"]:
            key = (r["root"], tag)
            live_by_tag[key] = tr["captures"][step]["live"]
            module_by_tag[key] = tr["captures"][step]["module"]
            info_by_tag[key] = tr["model"]
    g.check_tools(fx, roots_res, live_by_tag, module_by_tag, info_by_tag)
    saved_steps = list(range(spec["save_steps"], last + 1, spec["save_steps"]))
    notes = []
    logtext = "".join(open(os.path.join(ctx.scratch, "logs", "train" + e)).read() for e in (".out", ".err"))
    fallback = logtext.count("stage3_gather_16bit_weights_on_model_save=false. Saving the full checkpoint instead")
    if fallback:
        notes.append(f"transformers: save_model's accelerator.get_state_dict raised ValueError (ZeRO-3, "
                     f"stage3_gather_16bit_weights_on_model_save false) at every save ({fallback} log lines over "
                     f"{W} ranks), so save_model wrote config.json + a dummy weights file, deleted the weights "
                     f"(remove_dummy_checkpoint) and called engine.save_checkpoint(checkpoint-N); "
                     f"_save_optimizer_and_scheduler then saved the same tag AGAIN: each global_stepN was written "
                     f"twice per save. checkpoint-N holds no model weights")
    if "falling back to numerical ordering" in logtext:
        notes.append("transformers' rotate_checkpoints: 'mtime may not be reliable on this filesystem, falling back "
                     "to numerical ordering' (the saves were less than 1 s apart), so rotation sorted by step number")
    if spec["save_total_limit"]:
        gone = [s for s in saved_steps if s not in kept]
        notes.append(f"save_total_limit={spec['save_total_limit']}: checkpoints {saved_steps} were saved, "
                     f"{gone} deleted by the Trainer's rotation, {kept} kept")
    for r in roots_res:
        files = sorted(os.listdir(os.path.join(fx, r["root"])))
        w = [f for f in files if f.startswith(("model", "pytorch_model", "adapter_model"))]
        notes.append(f"{r['root']}: weights files beside the DeepSpeed tag: {w or 'none'}; all files: {files}")
        if spec["model"] == "peft":
            ts = r["tag_summaries"][r["tags"][-1]]
            notes.append(f"{r['root']}: PEFT model, so the Trainer called save_checkpoint(exclude_frozen_parameters="
                         f"True) (transformers 5.12 trainer._save_optimizer_and_scheduler: when the engine's "
                         f"save_checkpoint accepts the argument and _is_peft_model(model)): model_states 'module' "
                         f"has {ts['module_entries']} entries, param_shapes {ts['param_shapes_groups']} names (the "
                         f"LoRA A/B), frozen_param_shapes "
                         f"{'None' if ts['frozen_param_shapes'] is None else len(ts['frozen_param_shapes'])}: the "
                         f"frozen base model is not in the DeepSpeed files at all (zero_to_fp32 output = the LoRA "
                         f"weights only; the base model must come from elsewhere)")
    decay = set(tr["decay_parameter_names"])
    names = [p["name"] for p in tr["model"]["params"] if p["requires_grad"]]
    live_state = {}
    for s, cap in tr["captures"].items():
        live_state[f"checkpoint-{s}"] = cap["live"] if int(s) in kept else _strip_values(cap["live"])
    module_values = {f"checkpoint-{s}": (cap["module"] if int(s) in kept else _strip_values(cap["module"]))
                     for s, cap in tr["captures"].items()}
    ta = tr["training_args"]
    recipe = {
        **g.recipe_commands("hf_worker.py", W, f" (SPEC.resume_from = <run>/checkpoint-{last})"),
        "spec": dict(wspec, run="<output_dir>", result="<result path prefix>"),
        "model": ("LlamaForCausalLM(models.llama_config(tie=%s)): vocab 32, hidden 16, 2 layers, 2 heads, 1 KV "
                  "head, MLP 32, built from the config (no download)" % wspec["tie"])
        + ("; peft.get_peft_model(LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=[q_proj, "
           "v_proj], task_type=CAUSAL_LM))" if spec["model"] == "peft" else ""),
        "init": "transformers.set_seed(42) then the model constructor, on every rank",
        "data": "models.llama_dataset(): 64 rows of 8 random tokens (torch.Generator seed 0), labels = input_ids; "
                "the Trainer's RandomSampler (seed 42), per-device batch 2",
        "training_args": {k: ta.get(k) for k in (
            "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "save_strategy",
            "save_steps", "save_total_limit", "learning_rate", "weight_decay", "warmup_steps", "lr_scheduler_type",
            "max_grad_norm", "logging_steps", "bf16", "seed", "data_seed", "save_only_model")},
        "callbacks": f"NoSaveAfter({last}): sets control.should_save = False after step {last} (the Trainer "
                     f"would save at max_steps={spec['max_steps']}), so steps {last + 1}..{spec['max_steps']} are "
                     f"the losses after the last checkpoint, in the same process",
        "steps": f"{spec['max_steps']} steps; checkpoints at steps {saved_steps}",
    }
    kind = "transformers.Trainer + DeepSpeed" + (" + PEFT LoRA" if spec["model"] == "peft" else "")
    return _body(g, ctx, spec, tr, kind, {
        "optimizer": {"class": tr["optimizer_class"], "basic_optimizer_class": tr["basic_optimizer_class"],
                      "param_groups": [{"params": [n for n in names if n in decay], "weight_decay": 0.01},
                                       {"params": [n for n in names if n not in decay], "weight_decay": 0.0}],
                      "param_groups_note": "the Trainer's create_optimizer: torch AdamW, decay group = "
                                           "get_decay_parameter_names (no biases/norms), lr 5e-3",
                      "param_groups_at_save": {k: v["param_groups_hyper"] for k, v in live_state.items()},
                      "lr_scheduler": tr["lr_scheduler_class"], "engine_lr_scheduler": tr["engine_lr_scheduler"]},
        "data_types": tr["data_types"],
        "ds_config": tr["ds_config_given"],
        "ds_config_resolved": tr["ds_config_resolved"],
        "model": dict(tr["model"], module_class=tr["module_class"]),
        "recipe": recipe,
        "training": {"steps": tr["steps"], "losses": tr["losses"], "losses_per_rank": tr["losses_per_rank"],
                     "losses_after": losses_after, "losses_after_steps": [s for s in sorted(by_step) if s > last],
                     "global_step": tr["global_step"], "log_history": tr["log_history"],
                     "checkpoints_saved": saved_steps, "checkpoints_kept": kept,
                     "note": "losses: mean over ranks of the loss training_step returned on each rank"},
        "resume_check": resume,
        "roots": roots_res,
        "live_state": live_state,
        "module_values": module_values,
    }, notes)


# ------------------------------------------------------------------------------------------------------------------
def build_accelerate(ctx, spec, a, g):
    fx, W = ctx.fx, spec["W"]
    run = os.path.join(fx, "run")
    res_base = os.path.join(ctx.scratch, "result")
    wspec = {"stage": spec["stage"], "dtype": spec["dtype"], "steps": spec["steps"], "extra": 2, "run": run,
             "result": res_base}
    tr = _train(g, ctx, W, "accel_worker.py", wspec)
    roots = _roots(run, fx)
    resume = None
    if not a.no_resume_check:
        rrun = _resume_copy(ctx, run)
        resume, rr = _resume(g, ctx, W, "accel_worker.py", dict(wspec, run=rrun),
                             "fresh launch at the same W on a copy of run/: the same set-up with seed 4321, "
                             "accelerator.load_state() (automatic naming: the newest checkpoints/checkpoint_N), then "
                             "2 steps on batches 4 and 5")
        if rr is not None:
            resume.update(
                losses_after_model_0=rr["losses_after_model_0"], losses_after_model_1=rr["losses_after_model_1"],
                losses_equal=rr["losses_after_model_0"] == tr["losses_after_model_0"]
                and rr["losses_after_model_1"] == tr["losses_after_model_1"],
                accelerator_step_after_load=rr["accelerator_step"],
                state_equal={t: g.state_equal({"live": tr["live"][t], "module": tr["module"][t]},
                                              {"live": rr["live"][t], "module": rr["module"][t]})
                             for t in ("pytorch_model", "pytorch_model_1")})
    roots_res = _tools_for_roots(g, ctx, roots)
    live_by_tag, module_by_tag, info_by_tag = {}, {}, {}
    for r in roots_res:
        for tag in r["tags"]:
            live_by_tag[(r["root"], tag)] = tr["live"][tag]
            module_by_tag[(r["root"], tag)] = tr["module"][tag]
            info_by_tag[(r["root"], tag)] = tr["model"]["model_0" if tag == "pytorch_model" else "model_1"]
    g.check_tools(fx, roots_res, live_by_tag, module_by_tag, info_by_tag)
    notes = [g.GATE_NOTE, "accelerate 1.14: accelerator.backward() drives only the FIRST DeepSpeed engine an Accelerator "
             "prepared; the second prepare() only warns ('A wrapped DeepSpeed engine reference is currently tied "
             "for this `Accelerator()` instance'); model 1 is stepped with engine.backward/engine.step",
             "one root with two tags (pytorch_model, pytorch_model_1); `latest` names only the last one saved "
             f"({roots_res[0]['latest']!r}); random_states_<rank>.pkl per rank, scheduler.bin for the torch "
             "LambdaLR accelerate kept (it is not handed to DeepSpeed: model_states lr_scheduler is None)"]
    recipe = {
        **g.recipe_commands("accel_worker.py", W),
        "spec": dict(wspec, run="<project_dir>", result="<result path prefix>"),
        "models": {"pytorch_model": "TrickyNet (models.py), torch AdamW(tricky_param_groups, lr 1e-2, wd 0.1) "
                                    "+ torch LambdaLR(min(1, (s+1)/3)) prepared with it (accelerate keeps it: "
                                    "scheduler.bin)",
                   "pytorch_model_1": "ValueNet (models.py): fc [16,8]+[16], out [1,16]+[1], scale [1]; torch "
                                      "AdamW(lr 2e-2, wd 0)"},
        "init": "accelerate.utils.set_seed(1234), TrickyNet(), ValueNet() on every rank (resume: seed 4321)",
        "data": "model 0: models.tricky_batch(s); model 1: models.value_batch(s) (Generator seed 5000+s, x [2W,8], "
                "y [2W]; rank r rows [2r, 2r+2))",
        "steps": "4 steps in accelerator.accumulate(e0, e1), accelerator.save_state() (ProjectConfiguration("
                 "project_dir=run, automatic_checkpoint_naming=True) -> run/checkpoints/checkpoint_0), 2 more "
                 "steps = losses_after",
    }
    return _body(g, ctx, spec, tr, "accelerate Accelerator (DeepSpeedPlugin) with two prepared models, save_state", {
        "optimizer": tr["engines"], "ds_config": tr["ds_config_given"], "ds_config_resolved": tr["ds_config_resolved"],
        "accelerate_scheduler_class": tr["accelerate_scheduler_class"],
        "model": tr["model"], "recipe": recipe,
        "training": {k: tr[k] for k in tr if k.startswith("losses")} | {"accelerator_step_at_save":
                                                                         tr["accelerator_step"]},
        "resume_check": resume,
        "roots": roots_res,
        "live_state": tr["live"], "module_values": tr["module"],
    }, notes)


# ------------------------------------------------------------------------------------------------------------------
def build_lightning(ctx, spec, a, g):
    fx, W = ctx.fx, spec["W"]
    run = os.path.join(fx, "run")
    res_base = os.path.join(ctx.scratch, "result")
    E = spec["steps_per_epoch"]
    wspec = {"stage": spec["stage"], "dtype": spec["dtype"], "steps_per_epoch": E, "extra": 2, "run": run,
             "result": res_base}
    tr = _train(g, ctx, W, "lightning_worker.py", wspec)
    roots = _roots(run, fx)
    assert len(roots) == 1, roots
    ckpt_rel = os.path.relpath(roots[0], "run")
    resume = None
    losses_after = None
    if not a.no_resume_check:
        rrun = _resume_copy(ctx, run)
        resume, rr = _resume(g, ctx, W, "lightning_worker.py", dict(wspec, run=rrun, ckpt=os.path.join(rrun, ckpt_rel)),
                             "fresh launch at the same W on a copy of run/: the same Trainer with max_epochs=-1, "
                             f"max_steps={E + 2}, a loader of the batches of steps {E}, {E + 1} (models.tricky_batch), "
                             f"trainer.fit(ckpt_path=run/{ckpt_rel})")
        if rr is not None:
            losses_after = rr["losses"]
            import models
            sums = {models.fingerprint(models.tricky_batch(s, 0, W)[0]): s for s in range(E + 2)}
            data_steps = [sums.get(x) for x in rr["token_sums_rank0"]]
            resume.update(steps=rr["steps"], batch_idx=rr["batch_idx"], data_of_steps=data_steps,
                          losses_after=rr["losses"],
                          losses_after_per_rank=rr["losses_per_rank"],
                          state_equal=g.state_equal(tr["capture"], rr["after_load"]) if rr.get("after_load") else None,
                          global_step_after_load=(rr.get("after_load") or {}).get("global_step"))
    roots_res = _tools_for_roots(g, ctx, roots)
    key = (roots_res[0]["root"], "checkpoint")
    g.check_tools(fx, roots_res, {key: tr["capture"]["live"]}, {key: tr["capture"]["module"]}, {key: tr["model"]})
    ts = roots_res[0]["tag_summaries"]["checkpoint"]
    notes = [g.GATE_NOTE, f"Lightning: tag `checkpoint` in a directory named {os.path.basename(roots[0])!r}; the Lightning state "
             f"is client state in every rank's model_states file (ZeRO-3): {ts['client_state_keys']}",
             f"run/ holds {sorted(g.list_files(run))}"]
    if resume and resume.get("batch_idx") is not None:
        notes.append(f"Lightning 2.6 resumes the epoch-end checkpoint inside epoch 0: the resumed steps "
                     f"{resume.get('steps')} ran as batch_idx {resume['batch_idx']}, on the data of steps "
                     f"{resume.get('data_of_steps')} (a fresh loader iterator each time)")
    recipe = {
        **g.recipe_commands("lightning_worker.py", W, f" (SPEC.ckpt = <run>/{ckpt_rel})"),
        "spec": dict(wspec, run="<default_root_dir>", result="<result path prefix>"),
        "model": "LightningModule with .net = TrickyNet (models.py); configure_optimizers: torch AdamW("
                 "tricky_param_groups, lr 1e-2, wd 0.1), no scheduler",
        "strategy": f"shims.cpu_deepspeed_strategy()(stage={spec['stage']}) (Lightning's DeepSpeedStrategy less "
                    f"its CUDA checks), precision {'bf16-mixed' if spec['dtype'] == 'bf16' else '32-true'}, "
                    f"default logger (CSVLogger: no tensorboard in the root), default ModelCheckpoint",
        "init": "pl.seed_everything(1234) + torch.manual_seed(1234), then the module (resume: 4321)",
        "data": "a Dataset laid out so that an explicit DistributedSampler(shuffle=False) (Trainer("
                "use_distributed_sampler=False): Lightning's own sampler would shuffle, seeded by seed_everything) "
                "gives rank r at step s the rows models.tricky_batch(s, r) gives; batch_size 2",
        "steps": f"1 epoch of {E} steps; the default ModelCheckpoint saves at the epoch end",
        "losses_after": "not in the same process (fit ends with the epoch): the resume phase's losses. See "
                        "resume_check.batch_idx / data_of_steps for which batches Lightning fed the resumed steps "
                        "(it resumes the epoch-end checkpoint inside epoch 0)",
    }
    return _body(g, ctx, spec, tr, "Lightning Trainer + DeepSpeedStrategy", {
        "optimizer": {"class": tr["optimizer_class"], "basic_optimizer_class": tr["basic_optimizer_class"],
                      "param_groups": tr["param_groups"],
                      "param_groups_at_save": tr["capture"]["live"]["param_groups_hyper"]},
        "data_types": tr["data_types"],
        "ds_config": None, "ds_config_resolved": tr["ds_config_resolved"],
        "model": dict(tr["model"], engine_param_names=tr["capture"]["param_names_engine"]),
        "recipe": recipe,
        "training": {"steps": tr["steps"], "losses": tr["losses"], "losses_per_rank": tr["losses_per_rank"],
                     "losses_after": losses_after, "global_step": tr["global_step"],
                     "client_state_keys": tr["capture"]["client_state_keys"], "logger": tr["logger"]},
        "resume_check": resume,
        "roots": roots_res,
        "live_state": tr["capture"]["live"], "module_values": tr["capture"]["module"],
    }, notes)


BUILDERS = {"hf": build_hf, "accelerate": build_accelerate, "lightning": build_lightning}
