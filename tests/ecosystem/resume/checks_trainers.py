"""Checks 3 to 6 of driver.py: the trainers' own resume code through the mounts (HF Trainer, accelerate, Lightning)
and from_pretrained of a run's checkpoints."""

import json
import os
import shutil
import subprocess
import time

import judge
from driver_support import (
    Failed, advised, batch_split, close_all, facts_of, mounted, ranks_on_mount, reproducer, result_of,
    snapshot, unchanged, verdict)


# ----------------------------------------------------------------------------------------------------------------
# 3: HF Trainer train(resume_from_checkpoint=MNT/checkpoint-K), output_dir = a writable mount of the run at N
# ----------------------------------------------------------------------------------------------------------------
def rank_files(names):
    return sorted(x for x in names if x.endswith("_optim_states.pt"))


def index_run(ctx, run):
    """`ucfs index RUN` on the private copy: every tag's shared index written beside it."""
    r = subprocess.run([ctx.ucfs, "index", run], capture_output=True, text=True, timeout=300)
    written = [x for x in r.stdout.splitlines() if x.startswith("written ")]
    if r.returncode != 0 or not written:
        raise Failed(f"ucfs index {run} failed (exit {r.returncode})", (r.stdout + r.stderr).splitlines()[-5:])
    return len(written)


def hf_check(ctx, name, n, indexed=False):
    fx = ctx.fixture(name)
    facts = facts_of(fx)
    recipe = facts["recipe"]["spec"]
    W, K, M = facts["world_size"], recipe["last_save"], recipe["max_steps"]
    ta = facts["recipe"]["training_args"]
    pd0, gas0 = ta["per_device_train_batch_size"], ta["gradient_accumulation_steps"]
    gb = pd0 * gas0 * W
    pd, gas = batch_split(gb, pd0, n)
    run = os.path.join(fx, "run")
    scratch = ctx.scratch(f"hf_{name}_N{n}" + ("_indexed" if indexed else ""))
    upper = os.path.join(scratch, "upper")
    indexes = index_run(ctx, run) if indexed else 0
    before = snapshot(run)
    m = mounted(ctx, run, f"checkpoint-{K}", "--world-size", str(n), "--upper", upper)
    ucfs_cmd = f"{ctx.ucfs} mount --world-size {n} --upper {upper} {run} {m.dir}"
    spec = {"modern": os.path.join(fx, "MODERN.json"), "output_dir": m.dir,
            "resume_from": os.path.join(m.dir, f"checkpoint-{K}"), "per_device": pd, "gas": gas,
            "source_checkpoint": os.path.join(run, f"checkpoint-{K}"), "world_size_saved": W,
            "result": os.path.join(scratch, "result.json")}
    rc, log, cmd = ranks_on_mount(ctx, n, "hf_resume.py", spec, m, scratch, timeout=900)
    unchanged(before, snapshot(run), "run")
    r = result_of(spec, rc, log, reproducer(ucfs_cmd, cmd))
    bad, notes = [], []
    if indexed:
        # The daemon's log (-v): the tag resumed from was opened from its index, not its rank files.
        with open(os.path.join(scratch, "ucfs-" + os.path.basename(m.log))) as f:
            opened = [x for x in f.read().splitlines() if f"/checkpoint-{K}: tag " in x and " opened " in x]
        if not opened or not all("from its shared index" in x for x in opened):
            bad.append(f"checkpoint-{K}'s tag was not opened from its shared index: {opened}")
        notes.append(f"{indexes} tags indexed, checkpoint-{K}'s opened from its index")
    al = r["after_load"] or {}
    ck = f"checkpoint-{K}"
    ok, tot, b = judge.compare_live(facts["live_state"][ck], al.get("live") or {"params": {}})
    bad += b
    steps_want = facts["live_state"][ck]["adam_steps"]
    if (al.get("live") or {}).get("adam_steps") != steps_want:
        bad.append(f"optimizer step {(al.get('live') or {}).get('adam_steps')} != saved {steps_want}")
    if al.get("global_step") != K:
        bad.append(f"trainer global_step after the load {al.get('global_step')} != {K}")
    mok, mn, mb = judge.compare_module(facts["module_values"][ck], al.get("module") or {})
    bad += mb
    if al.get("lr_scheduler") != r.get("lr_scheduler_saved"):
        bad.append(f"lr scheduler {al.get('lr_scheduler')} != scheduler.pt's {r.get('lr_scheduler_saved')}")
    hd = judge.hyper_diff(facts["optimizer"]["param_groups_at_save"][ck], al.get("param_groups") or [])
    if hd:
        bad.append("param groups: " + judge.hyper_diff_text(hd))
    for rk, x in enumerate(r["rng"]):
        if not x or not x.get("found") or not x.get("torch_rng_is_saving_ranks"):
            bad.append(f"rank {rk}: RNG state not the saving rank {rk % W}'s: {x}")
    if any(k != gas for k in r["micro_batches_per_step"]):
        bad.append(f"micro batches per step {r['micro_batches_per_step']}, not {gas}")
    tb = (r.get("ds_config_resolved") or {}).get("train_batch_size")
    if tb != gb:
        bad.append(f"DeepSpeed's resolved train_batch_size {tb}, not the saving run's {gb}")
    tol = judge.loss_tol(facts)
    lmax, lb = judge.compare_losses(facts["training"]["losses_after"], r["losses_after"], tol)
    bad += lb
    # what the Trainer saved through the mount: in DIR, as DeepSpeed and the Trainer wrote it at N ranks
    new = os.path.join(upper, f"checkpoint-{M}")
    tag = f"global_step{M}"
    landed = []
    if r["saves"] != [M]:
        bad.append(f"the Trainer saved at steps {r['saves']}, not [{M}]")
    if not os.path.isdir(new):
        bad.append(f"checkpoint-{M} is not in the upper dir {upper}: {sorted(os.listdir(upper))}")
    else:
        names = sorted(os.listdir(new))
        optim = rank_files(os.listdir(os.path.join(new, tag))) if os.path.isdir(os.path.join(new, tag)) else []
        if len(optim) != n:
            bad.append(f"DIR/checkpoint-{M}/{tag} holds {len(optim)} optimizer files, not {n}: {optim}")
        latest = open(os.path.join(new, "latest")).read().strip() if "latest" in names else None
        if latest != tag:
            bad.append(f"DIR/checkpoint-{M}/latest is {latest!r}, not {tag!r}")
        state = json.load(open(os.path.join(new, "trainer_state.json"))) if "trainer_state.json" in names else {}
        if state.get("global_step") != M:
            bad.append(f"DIR/checkpoint-{M}/trainer_state.json global_step {state.get('global_step')} != {M}")
        rngs = [x for x in names if x.startswith("rng_state")]
        want_rng = ["rng_state.pth"] if n == 1 else [f"rng_state_{i}.pth" for i in range(n)]
        if sorted(rngs) != sorted(want_rng):
            bad.append(f"DIR/checkpoint-{M} RNG files {rngs}, not {want_rng}")
        landed = [f"{len(optim)} rank files", "latest", "trainer_state.json", f"{len(rngs)} rng files"] + \
            [x for x in names if x in ("scheduler.pt", "model.safetensors", "adapter_model.safetensors",
                                        "config.json")]
    nw = r.get("new_checkpoint_weights") or {}
    if "compared" in nw or "error" in nw:
        if nw.get("error") or nw.get("differ") or nw.get("from_pretrained_differ"):
            bad.append(f"model.safetensors shown beside the new checkpoint-{M}'s config.json: {nw.get('error')} "
                       f"differ {nw.get('differ')}, from_pretrained differ {nw.get('from_pretrained_differ')}")
        else:
            landed.append(f"and the mount shows its model.safetensors ({nw['compared']} tensors = the module at the "
                          f"save; from_pretrained loads it, {nw['from_pretrained_dtype']})")
        if nw.get("listed_but_enoent_for_s", 0) > 0.05:
            notes.append(f"model.safetensors was listed but ENOENT for {nw['listed_but_enoent_for_s']} s (the "
                         f"Trainer's earlier lookup of it, cached: see the writable-mount check)")
    whiteouts = sorted(x for x in os.listdir(upper) if x.startswith(".wh.")) if os.path.isdir(upper) else []
    limit = recipe.get("save_total_limit")
    if limit:
        kept = facts["training"]["checkpoints_kept"] + [M]
        gone = sorted(kept)[:max(0, len(kept) - limit)]
        if sorted(whiteouts) != sorted(f".wh.checkpoint-{s}" for s in gone):
            bad.append(f"save_total_limit={limit}: whiteouts {whiteouts}, expected for {gone}")
        notes.append(f"rotation (save_total_limit {limit}) left whiteouts {whiteouts}")
    summary = (f"{ok}/{tot} fp32/optimizer tensors exact after the load, step {steps_want}, global_step {K}, "
               f"module {mok}/{mn}, scheduler and RNG ({'rng_state.pth' if n == 1 else 'rng_state_<r>.pth'}) as saved; "
               f"steps {r['steps']} losses max |diff| {lmax:.1e} (tol {tol:.0e}); checkpoint-{M} saved into DIR: "
               + ", ".join(landed))
    summary = advised(summary, m.advice)
    if notes:
        summary += "; " + "; ".join(notes)
    return verdict(bad, summary, log, reproducer(ucfs_cmd, cmd))


HF_FIXTURES = ["hf_llama_z3_bf16_ws2", "hf_llama_z2_fp32_ws2", "hf_peft_lora_z2_fp32_ws2", "hf_peft_lora_z3_bf16_ws2"]


def new_tag_weights_visible(ctx):
    """A writable mount: a checkpoint saved through it holding config.json and no weights gets its model.safetensors
    once its tag is whole, and a lookup finds it as soon as the listing shows it. HF Trainer (5.12) looks the name up
    (remove_dummy_checkpoint's isfile) before it saves the tag, and an eval job polling for the weights does too."""
    name = "hf_llama_z3_bf16_ws2"
    fx = ctx.fixture(name)
    run = os.path.join(fx, "run")
    scratch = ctx.scratch("new_tag_weights")
    m = mounted(ctx, run, "checkpoint-6", "--world-size", "2", "--upper", os.path.join(scratch, "upper"))
    new = os.path.join(m.dir, "checkpoint-100")
    src = os.path.join(run, "checkpoint-6")
    try:
        os.mkdir(new)
        shutil.copy(os.path.join(src, "config.json"), new)
        before = os.path.exists(os.path.join(new, "model.safetensors"))  # as the Trainer does before saving
        os.mkdir(os.path.join(new, "global_step6"))
        for f in sorted(os.listdir(os.path.join(src, "global_step6"))):
            shutil.copy(os.path.join(src, "global_step6", f), os.path.join(new, "global_step6"))
        with open(os.path.join(new, "latest"), "w") as f:
            f.write("global_step6")
        t0 = time.time()
        listed = "model.safetensors" in os.listdir(new)
        found_at_once = os.path.exists(os.path.join(new, "model.safetensors"))
        while not os.path.exists(os.path.join(new, "model.safetensors")) and time.time() - t0 < 10:
            time.sleep(0.01)
        delay = time.time() - t0
    finally:
        close_all([m], scratch)
    repro = (f"ucfs mount --world-size 2 --upper U RUN MNT; mkdir MNT/checkpoint-100; cp RUN/checkpoint-6/config.json "
             f"MNT/checkpoint-100/; stat MNT/checkpoint-100/model.safetensors (ENOENT, right); mkdir "
             f"MNT/checkpoint-100/global_step6; cp RUN/checkpoint-6/global_step6/* MNT/checkpoint-100/global_step6/; "
             f"echo -n global_step6 > MNT/checkpoint-100/latest; ls MNT/checkpoint-100 (lists model.safetensors); "
             f"stat MNT/checkpoint-100/model.safetensors (ENOENT) (RUN = tests/data/modern/{name}/run)")
    if before:
        raise Failed("model.safetensors existed before the tag was saved")
    if not listed:
        raise Failed("the whole new tag's model.safetensors is not listed beside its config.json")
    if not found_at_once:
        raise Failed(f"model.safetensors is listed but a lookup gets ENOENT for {delay:.2f} s after the tag became "
                     f"whole: the ENOENT of the lookup before the save stays cached in the kernel (negative entry, "
                     f"the mount's entry timeout) and is not invalidated when the view appears",
                     [f"reproduce: {repro}"])
    return "listed and found at once"


# ----------------------------------------------------------------------------------------------------------------
# 4: accelerate load_state(MNT/checkpoints/checkpoint_0), the run mounted at N
# ----------------------------------------------------------------------------------------------------------------
def accel_check(ctx, n):
    name = "accelerate_two_models_z2_bf16_ws2"
    fx = ctx.fixture(name)
    facts = facts_of(fx)
    W = facts["world_size"]
    cfg = facts["ds_config"]
    micro, gas = batch_split(cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], n)
    run = os.path.join(fx, "run")
    root = "checkpoints/checkpoint_0"
    scratch = ctx.scratch(f"accelerate_N{n}")
    before = snapshot(run)
    m = mounted(ctx, run, root, "--world-size", str(n))
    ucfs_cmd = f"{ctx.ucfs} mount --world-size {n} {run} {m.dir}"
    spec = {"modern": os.path.join(fx, "MODERN.json"), "input_dir": os.path.join(m.dir, root), "micro": micro,
            "gas": gas, "source_dir": os.path.join(run, root), "world_size_saved": W,
            "scratch_project": os.path.join(scratch, "project"), "result": os.path.join(scratch, "result.json")}
    rc, log, cmd = ranks_on_mount(ctx, n, "accel_resume.py", spec, m, scratch)
    unchanged(before, snapshot(run), "run")
    r = result_of(spec, rc, log, reproducer(ucfs_cmd, cmd))
    bad, parts = [], []
    tol = judge.loss_tol(facts)
    for i, t in enumerate(("pytorch_model", "pytorch_model_1")):
        ok, tot, b = judge.compare_live(facts["live_state"][t], r["live"][t])
        bad += [f"{t}: {x}" for x in b]
        if r["live"][t]["adam_steps"] != facts["live_state"][t]["adam_steps"]:
            bad.append(f"{t}: optimizer step {r['live'][t]['adam_steps']} != {facts['live_state'][t]['adam_steps']}")
        mok, mn, mb = judge.compare_module(facts["module_values"][t], r["module"][t])
        bad += [f"{t}: {x}" for x in mb]
        gs = facts["optimizer"][t]["global_steps"]
        if r["engines"][t]["global_steps"] != gs:
            bad.append(f"{t}: global_steps {r['engines'][t]['global_steps']} != {gs}")
        hd = judge.hyper_diff(facts["live_state"][t]["param_groups_hyper"], r["engines"][t]["param_groups"])
        if hd:
            bad.append(f"{t}: param groups " + judge.hyper_diff_text(hd))
        lmax, lb = judge.compare_losses(facts["training"][f"losses_after_model_{i}"], r[f"losses_after_model_{i}"],
                                        tol)
        bad += [f"{t}: {x}" for x in lb]
        parts.append(f"{t}: {ok}/{tot} tensors exact, step {r['live'][t]['adam_steps']}, module {mok}/{mn}, "
                     f"losses max |diff| {lmax:.1e}")
    if r["accelerator_step"] != facts["training"]["accelerator_step_at_save"]:
        bad.append(f"accelerator.step {r['accelerator_step']} != {facts['training']['accelerator_step_at_save']}")
    if r["scheduler"] != r["scheduler_saved"]:
        bad.append(f"scheduler {r['scheduler']} != scheduler.bin's {r['scheduler_saved']}")
    if not all(r["torch_rng_is_saving_ranks_all"]):
        bad.append(f"torch RNG after load_state is not the saving rank's (r mod {W}): "
                   f"{r['torch_rng_is_saving_ranks_all']}")
    summary = ("; ".join(parts) + f" (tol {tol:.0e}); accelerator.step {r['accelerator_step']}, scheduler.bin and "
               f"random_states_<r>.pkl as saved")
    summary = advised(summary, m.advice)
    return verdict(bad, summary, log, reproducer(ucfs_cmd, cmd))


# ----------------------------------------------------------------------------------------------------------------
# 5: Lightning fit(ckpt_path=MNT/lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt), the run mounted writable
# ----------------------------------------------------------------------------------------------------------------
def lightning_check(ctx, n):
    name = "lightning_z3_bf16_ws2"
    fx = ctx.fixture(name)
    facts = facts_of(fx)
    W, E = facts["world_size"], facts["recipe"]["spec"]["steps_per_epoch"]
    gb = 2 * W  # the fixture's DataLoader batch 2 per rank
    b = gb // n
    run = os.path.join(fx, "run")
    rel = f"lightning_logs/version_0/checkpoints/epoch=0-step={E}.ckpt"
    scratch = ctx.scratch(f"lightning_N{n}")
    upper = os.path.join(scratch, "upper")
    before = snapshot(run)
    m = mounted(ctx, run, rel, "--world-size", str(n), "--upper", upper)
    ucfs_cmd = f"{ctx.ucfs} mount --world-size {n} --upper {upper} {run} {m.dir}"
    spec = {"modern": os.path.join(fx, "MODERN.json"), "root": m.dir, "ckpt": os.path.join(m.dir, rel),
            "batch": b, "result": os.path.join(scratch, "result.json")}
    rc, log, cmd = ranks_on_mount(ctx, n, "lightning_resume.py", spec, m, scratch)
    unchanged(before, snapshot(run), "run")
    r = result_of(spec, rc, log, reproducer(ucfs_cmd, cmd))
    bad = []
    al = r["after_load"] or {}
    ok, tot, b_ = judge.compare_live(facts["live_state"], al.get("live") or {"params": {}})
    bad += b_
    if (al.get("live") or {}).get("adam_steps") != facts["live_state"]["adam_steps"]:
        bad.append(f"optimizer step {(al.get('live') or {}).get('adam_steps')} != {facts['live_state']['adam_steps']}")
    if al.get("global_step") != E:
        bad.append(f"global_step after the load {al.get('global_step')} != {E}")
    mok, mn, mb = judge.compare_module(facts["module_values"], al.get("module") or {})
    bad += mb
    hd = judge.hyper_diff(facts["live_state"]["param_groups_hyper"], al.get("param_groups") or [])
    if hd:
        bad.append("param groups: " + judge.hyper_diff_text(hd))
    want_data = facts["resume_check"].get("data_of_steps")
    if want_data is not None and r["data_of_steps"] != want_data:
        bad.append(f"the resumed steps trained on the data of steps {r['data_of_steps']}, the resume at W on "
                   f"{want_data}")
    tol = judge.loss_tol(facts)
    lmax, lb = judge.compare_losses(facts["training"]["losses_after"], r["losses_after"], tol)
    bad += lb
    # what Lightning saved through the mount, in DIR
    saved = []
    for d, dirs, files in os.walk(upper):
        if "latest" in files and d.endswith(".ckpt"):
            tagdir = os.path.join(d, open(os.path.join(d, "latest")).read().strip())
            saved.append((os.path.relpath(d, upper), len(rank_files(os.listdir(tagdir)))
                          if os.path.isdir(tagdir) else 0))
    if not saved or any(k != n for _, k in saved):
        bad.append(f"Lightning's new checkpoint in DIR: {saved or sorted(os.listdir(upper))} (want {n} rank files)")
    summary = (f"{ok}/{tot} fp32/optimizer tensors exact after the load, step {facts['live_state']['adam_steps']}, "
               f"global_step {E}, module {mok}/{mn} (frozen and buffers from the checkpoint); steps {r['steps']} "
               f"(data of steps {r['data_of_steps']}, batch_idx {r['batch_idx']}) losses max |diff| {lmax:.1e} "
               f"(tol {tol:.0e}); saved into DIR: " + ", ".join(f"{p} ({k} rank files)" for p, k in saved))
    return verdict(bad, summary, log, reproducer(ucfs_cmd, cmd))


# ----------------------------------------------------------------------------------------------------------------
# 6: AutoModelForCausalLM.from_pretrained(MNT/checkpoint-K), the run mounted read-only
# ----------------------------------------------------------------------------------------------------------------
def from_pretrained_check(ctx, name):
    fx = ctx.fixture(name)
    facts = facts_of(fx)
    run = os.path.join(fx, "run")
    scratch = ctx.scratch(f"from_pretrained_{name}")
    dtype = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}[facts["dtype"]]
    before = snapshot(run)
    roots = [r for r in facts["roots"] if r["root"].startswith("run/checkpoint-")]
    first = os.path.relpath(os.path.join(fx, roots[0]["root"]), run)
    m = mounted(ctx, run, first)
    ucfs_cmd = f"{ctx.ucfs} mount {run} {m.dir}"
    cases = []
    for root in roots:
        rel = os.path.relpath(os.path.join(fx, root["root"]), run)
        tag = root["latest"]
        refs = {f"{tag}_fp32 (ucfs)": os.path.join(m.dir, rel, tag + "_fp32", "pytorch_model.bin")}
        z2f = os.path.join(fx, "zero_to_fp32", rel, "pytorch_model.bin")
        if os.path.exists(z2f):
            refs["zero_to_fp32.py's output"] = z2f
        cases.append({"dir": os.path.join(m.dir, rel), "references": refs, "rel": rel,
                      "source_has_weights": os.path.exists(os.path.join(run, rel, "model.safetensors"))})
    spec = {"cases": cases, "dtype": dtype, "result": os.path.join(scratch, "result.json")}
    rc, log, cmd = ranks_on_mount(ctx, 1, "from_pretrained_check.py", spec, m, scratch)
    unchanged(before, snapshot(run), "run")
    r = result_of(spec, rc, log, reproducer(ucfs_cmd, cmd))
    bad, parts = [], []
    for case, got in zip(cases, r["cases"]):
        rel = case["rel"]
        if got.get("error"):
            bad.append(f"{rel}: from_pretrained failed: {got['error']}")
            continue
        if got["dtype"] != f"torch.{dtype}":
            bad.append(f"{rel}: loaded as {got['dtype']}, not the training dtype torch.{dtype}")
        for label, x in got["refs"].items():
            if x["differ"] or x["missing"]:
                bad.append(f"{rel} vs {label}: {len(x['differ'])} differ ({x['differ'][:3]}), missing {x['missing']}")
        n_same = {label: x["same"] for label, x in got["refs"].items()}
        parts.append(f"{rel} ({'the Trainer saved' if case['source_has_weights'] else 'ucfs shows'} "
                     f"model.safetensors) loads as {got['dtype']}: " +
                     ", ".join(f"{v} tensors = {k} cast" for k, v in n_same.items()))
    summary = "; ".join(parts)
    return verdict(bad, summary, log, reproducer(ucfs_cmd, cmd))
