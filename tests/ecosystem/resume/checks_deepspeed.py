"""Checks 1 and 2 of driver.py: DeepSpeed's engine.load_checkpoint natively from the reshard view, and with
load_universal from the universal view (and the CONTROL runs on DeepSpeed's own converter output)."""

import os
import shutil

import judge
from driver_support import (
    advised, batch_split, facts_of, mounted, ranks_on_mount, reproducer, result_of, snapshot, unchanged,
    verdict)


# ----------------------------------------------------------------------------------------------------------------
# 1 + 2: DeepSpeed engine.load_checkpoint, natively from the reshard view and with load_universal from the universal
# ----------------------------------------------------------------------------------------------------------------
def ds_check(ctx, name, mode, n, control=False):
    """control: no ucfs at all, DeepSpeed's own ds_to_universal output (the fixture's expected/) beside the
    checkpoint in a plain directory: what DeepSpeed's universal loader does with its own converter's files."""
    if control:
        return ds_control(ctx, name, n)
    fx = ctx.fixture(name)
    facts = facts_of(fx)
    cfg = facts["recipe"]["spec"]["ds_config"]
    gb, micro0 = cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]
    micro, gas = batch_split(gb, micro0, n)
    src = os.path.join(fx, "checkpoint")
    tag = facts["checkpoint_tag"]
    stage = facts["zero_stage"]
    ms = "zero_pp_rank_0_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
    scratch = ctx.scratch(f"ds_{mode}_{name}_N{n}")
    args = ("--world-size", str(n)) if mode == "native" else ()
    before = snapshot(src)
    m = mounted(ctx, src, "latest" if mode == "native" else "latest_universal", *args)
    ucfs_cmd = f"{ctx.ucfs} mount {' '.join(args)} {src} {m.dir}".replace("  ", " ")
    spec = {"modern": os.path.join(fx, "MODERN.json"), "ckpt": m.dir, "mode": mode, "micro": micro, "gas": gas,
            "result": os.path.join(scratch, "result.json"), "source_model_states": os.path.join(src, tag, ms),
            "fix_ds_zero3_universal": mode == "universal" and stage == 3}
    rc, log, cmd = ranks_on_mount(ctx, n, "ds_resume.py", spec, m, scratch)
    unchanged(before, snapshot(src), "checkpoint")
    r = result_of(spec, rc, log, reproducer(ucfs_cmd, cmd))
    return judge_ds(facts, r, mode, stage, m.advice, ucfs_cmd, cmd, log)


def ds_control(ctx, name, n):
    fx = ctx.fixture(name)
    facts = facts_of(fx)
    cfg = facts["recipe"]["spec"]["ds_config"]
    micro, gas = batch_split(cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], n)
    tag = facts["checkpoint_tag"]
    scratch = ctx.scratch(f"ds_control_{name}_N{n}")
    d = os.path.join(scratch, "checkpoint")
    shutil.copytree(os.path.join(fx, "checkpoint"), d, symlinks=True)
    shutil.copytree(os.path.join(fx, "expected", tag + "_universal"), os.path.join(d, tag + "_universal"))
    shutil.copy(os.path.join(fx, "expected", "latest_universal"), d)
    ms = "zero_pp_rank_0_mp_rank_00_model_states.pt" if facts["zero_stage"] == 3 else "mp_rank_00_model_states.pt"
    spec = {"modern": os.path.join(fx, "MODERN.json"), "ckpt": d, "mode": "universal", "micro": micro, "gas": gas,
            "result": os.path.join(scratch, "result.json"), "source_model_states": os.path.join(d, tag, ms),
            "fix_ds_zero3_universal": facts["zero_stage"] == 3}
    rc, _, log, cmd = ctx.run_ranks(n, "ds_resume.py", spec, [], scratch)
    return judge_ds(facts, result_of(spec, rc, log), "universal", facts["zero_stage"], None,
                    "(no mount: DeepSpeed's own converter output in " + d + ")", cmd, log)


def judge_ds(facts, r, mode, stage, adv, ucfs_cmd, cmd, log):
    bad, notes = [], []
    live_want = facts["live_state"]
    ok, n, b = judge.compare_live(live_want, r["live"])
    bad += b
    # Muon: the keys a param's group lacks (Adam's for a Muon param, momentum_buffer for an Adam one) cannot be read,
    # after the load as at save time; any other failure is one.
    momentum = (facts.get("muon_momentum_layout") or {}).get("values") or {}
    for name, rec in momentum.items():
        if "momentum_buffer" in live_want["params"].get(name, {}):
            continue  # compared above
        n += 1
        got = (r["live"]["params"].get(name) or {}).get("momentum_buffer")
        if judge.same(rec, got):
            ok += 1
        else:
            bad.append(f"momentum_buffer {name}: {judge.describe_diff(rec, got)}")
    saved_errors = live_want.get("errors") or {}
    unexpected = {k: sorted(set(v) - set(saved_errors.get(k, {})) - (set(momentum) if k == "momentum_buffer"
                                                                        else set()))
                  for k, v in (r["live"].get("errors") or {}).items()}
    unexpected = {k: v for k, v in unexpected.items() if v}
    if unexpected:
        bad.append(f"reading the live state after the load: {unexpected} ({r['live']['errors']})")
    if r["live"]["adam_steps"] != live_want["adam_steps"]:
        bad.append(f"optimizer step {r['live']['adam_steps']} != saved {live_want['adam_steps']}")
    tr = facts["training"]
    for k in ("global_steps", "global_samples", "skipped_steps"):
        if r[k] != tr[k]:
            bad.append(f"{k} {r[k]} != saved {tr[k]}")
    if tr.get("loss_scale_at_save") is not None and r["loss_scale"] != tr["loss_scale_at_save"]:
        bad.append(f"loss scale {r['loss_scale']} != saved {tr['loss_scale_at_save']}")
    if r.get("lr_scheduler") != r.get("lr_scheduler_saved"):
        bad.append(f"lr scheduler {r.get('lr_scheduler')} != saved {r.get('lr_scheduler_saved')}")
    hd = judge.hyper_diff(live_want["param_groups_hyper"], r["engine_param_groups"])
    if hd:
        what = judge.hyper_diff_text(hd)
        if mode == "universal" and stage == 3 and judge.copies_group0(live_want["param_groups_hyper"],
                                                                      r["engine_param_groups"]):
            notes.append(f"DeepSpeed 0.19.8's ZeRO-3 universal loader gave every group group 0's hyper-parameters "
                         f"({what})")
        else:
            bad.append(f"param group hyper-parameters: {what}")
    if r["step_tensors_distinct"] != r["step_tensors"]:
        if mode == "universal" and stage == 3:
            notes.append(f"DeepSpeed 0.19.8's ZeRO-3 universal loader gave its {r['step_tensors']} sub-groups "
                         f"{r['step_tensors_distinct']} shared 'step' tensor (AdamW then counts one step per "
                         f"sub-group)")
        else:
            bad.append(f"{r['step_tensors']} optimizer 'step' tensors but only {r['step_tensors_distinct']} distinct")
    if r.get("harness_fixes"):
        notes.append("both undone by the harness before the next steps")
    mod_want = facts["module_values"]
    frozen = set(facts["model"].get("frozen") or [])
    trainable = {p["name"] for p in facts["model"]["params"] if p["requires_grad"]}
    mok, mn, mb = judge.compare_module(mod_want, r["module"], only=trainable)
    bad += mb
    # frozen params and persistent buffers: from the model states (native) / DeepSpeed's universal loader
    persistent = {b["name"] for b in facts["model"]["buffers"] if b["persistent"]}
    fok, fn, fb = judge.compare_module(mod_want, r["module"], only=frozen | persistent)
    if mode == "native":
        bad += fb
    else:
        fok = fn = 0  # not restored by DeepSpeed's universal load: the harness's init is the training's, not checked
        notes.append("frozen params and buffers: DeepSpeed's universal load does not restore them (the model's "
                     "training init gives them, as in DeepSpeed 0.14.5's load_check)")
    tol = judge.loss_tol(facts)
    lmax, lb = judge.compare_losses(tr["losses_after"], r["losses_after"], tol)
    bad += lb
    fz = f"frozen+buffers {fok}/{fn}" if mode == "native" else "frozen+buffers from the init"
    summary = (f"{ok}/{n} fp32/optimizer tensors exact, step {r['live']['adam_steps']}, global_steps "
               f"{r['global_steps']}, lp params {mok}/{mn}, {fz}, next losses max |diff| {lmax:.1e} (tol {tol:.0e})")
    summary = advised(summary, adv)
    if notes:
        summary += "; NOTE " + "; ".join(notes)
    return verdict(bad, summary, log, reproducer(ucfs_cmd, cmd))


DS_FIXTURES = ["z1_tricky_fp32_ws2", "z1_tricky_bf16opt_ws2", "z2_tricky_bf16_ws3", "z2_tricky_fp16_ws2",
               "z3_tricky_bf16_ws2", "z3_tricky_fp32_ws4", "align_z1_fp32_ws2", "align_z2_fp32_ws3",
               "align_z2_bf16_ws2", "bf16masters_z1_ws2", "bf16masters_z2_ws2", "bf16masters_z3_ws2"]
# DeepSpeed's Muon (MuonWithAuxAdam; tests/tools/modern/ds_worker_muon.py): natively at N only, as DeepSpeed 0.19.8's
# universal loader cannot take a Muon group (ds_to_universal fails on it: KeyError 'exp_avg').
MUON_FIXTURES = ["muon_z1_fp32_ws2", "muon_z2_fp32_ws3", "muon_z3_fp32_ws2", "z2_muon_fp32_ws2"]


def ns_for(w):
    """N < W and N > W with the global batch 2W divisible: W=2 -> 1, 4; W=3 -> 2, 6; W=4 -> 2, 8."""
    return {2: (1, 4), 3: (2, 6), 4: (2, 8)}[w]
