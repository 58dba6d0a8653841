#!/usr/bin/python3
"""The trainers' own resume code through ucfs mounts, at N < W and N > W with the global batch kept (host side).

usage: driver.py UCFS_BIN [--full] [--only SUBSTRING ...] [--keep] [--list]
(run by tests/ecosystem/resume_checks.sh; needs root for FUSE and the modern root of tests/ecosystem/setup.sh)

Each check copies its fixture (tests/data/modern/<name>) to a temp dir under /tmp, mounts the copy on the host, runs a
rank program of tests/ecosystem/resume/ in the modern root on N CPU ranks (tests/ecosystem/run.sh +
harness/launch.py; the mount named in UCFS_ECOSYSTEM_MOUNTS), unmounts, and judges what the program recorded
(resume/judge.py): right after the load, every fp32 master weight and optimizer state bit for bit against the live
values MODERN.json recorded at save time, and the step; then the next losses against the saving run's (losses_after)
within the tolerance DeepSpeed 0.14.5's load checks use at another world size. The copy of the source must be
unchanged afterwards. One line per check ("ok: ..." / "FAILED: ..."), then "N passed, M failed"; exit 1 on failure.
A failure keeps the temp dir (specs, logs, the upper dirs) and prints a reproducer.
"""
import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the repository
HERE = os.path.dirname(os.path.abspath(__file__))
ECO = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(ECO))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
sys.path.insert(0, HERE)
import mount_testing  # noqa: E402
import judge  # noqa: E402

MODERN = os.path.join(REPO, "tests", "data", "modern")
RUN_SH = os.path.join(ECO, "run.sh")
LAUNCH = os.path.join(ECO, "harness", "launch.py")


class Failed(Exception):
    """A check's verdict: the message is its one-line reason; `details` are printed below it."""

    def __init__(self, msg, details=()):
        super().__init__(msg)
        self.details = list(details)


class Ctx:
    def __init__(self, ucfs, keep):
        self.ucfs = ucfs
        self.keep = keep
        self.tmp = tempfile.mkdtemp(prefix="ucfs_resume_", dir="/tmp")
        self.copies = {}
        self.passed = self.failed = 0
        self.n = 0

    def fixture(self, name):
        """A private copy of tests/data/modern/NAME (the checks never write into tests/data)."""
        if name not in self.copies:
            dst = os.path.join(self.tmp, "fixtures", name)
            shutil.copytree(os.path.join(MODERN, name), dst, symlinks=True)
            self.copies[name] = dst
        return self.copies[name]

    def scratch(self, label):
        self.n += 1
        d = os.path.join(self.tmp, f"{self.n:02d}_" + re.sub(r"[^A-Za-z0-9_.=-]+", "_", label))
        os.makedirs(d)
        return d

    def run_ranks(self, n, program, spec, mounts, scratch, timeout=600):
        """Runs `program` on n ranks in the modern root; returns (rc, seconds, log path, command string)."""
        spec_path = os.path.join(scratch, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        log = os.path.join(scratch, "ranks.log")
        cmd = [RUN_SH, "python3", LAUNCH, "-n", str(n), "--timeout", str(timeout), "--",
               os.path.join(HERE, program), "--spec", spec_path]
        env = dict(os.environ, UCFS_ECOSYSTEM_MOUNTS=" ".join(m.dir for m in mounts))
        env.setdefault("HF_HUB_OFFLINE", "1")
        t0 = time.time()
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout + 120).returncode
        shown = f"UCFS_ECOSYSTEM_MOUNTS={shlex.quote(env['UCFS_ECOSYSTEM_MOUNTS'])} " + " ".join(
            shlex.quote(c if not c.startswith(REPO + "/") else os.path.relpath(c, REPO)) for c in cmd)
        return rc, time.time() - t0, log, shown

    def check(self, name, fn):
        t0 = time.time()
        try:
            detail = fn()
            self.passed += 1
            print(f"ok: {name} :: {detail} [{time.time() - t0:.0f} s]", flush=True)
        except Failed as e:
            self.failed += 1
            print(f"FAILED: {name} :: {e} [{time.time() - t0:.0f} s]", flush=True)
            for d in e.details:
                print(f"    {d}", flush=True)
        except Exception as e:  # noqa: BLE001 - the harness's own error: report and go on
            self.failed += 1
            print(f"FAILED: {name} :: harness error {type(e).__name__}: {e} [{time.time() - t0:.0f} s]", flush=True)
            traceback.print_exc(file=sys.stdout)


def error_lines(log, n=3):
    """The most telling lines of a failed run's log: the last exception lines."""
    try:
        lines = open(log, errors="replace").read().splitlines()
    except OSError:
        return []
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln).strip() for ln in lines]
    exc = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", ln)]
    return (exc or [ln for ln in lines if ln])[-n:]


def snapshot(top):
    """Every path below top with its size, mtime and content digest: the source copy must come out unchanged."""
    out = {}
    for d, dirs, files in os.walk(top):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            h = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, top)] = (st.st_size, st.st_mtime_ns, st.st_mode, h)
    return out


def unchanged(before, after, what):
    if before != after:
        diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        raise Failed(f"the source {what} changed during the run: {diff[:5]}")


def batch_split(gb, micro0, n):
    """(micro, gas) at n ranks keeping the global batch gb: the saved micro batch with more accumulation where that
    divides (ucfs's advice), else micro gb/n with no accumulation."""
    if gb % (micro0 * n) == 0:
        return micro0, gb // (micro0 * n)
    if gb % n == 0:
        return gb // n, 1
    raise ValueError(f"no split of the global batch {gb} over {n} ranks")


def advice(mount):
    """ucfs's batch warning printed by the mount (read after it ended), shortened."""
    text = ""
    try:
        text += mount.proc.stderr.read() if mount.proc.stderr else ""
    except (OSError, ValueError):
        pass
    try:
        text += mount.log_text()
    except OSError:
        pass
    m = re.search(r"at \d+ ranks set gradient_accumulation_steps to (\d+)", text)
    if m:
        return f"gradient_accumulation_steps {m.group(1)}"
    if re.search(r"at \d+ ranks no gradient accumulation keeps", text):
        return "no accumulation keeps the micro batch: change it"
    return None


def close_all(mounts, scratch=None):
    """Unmounts; keeps each mount's batch advice in m.advice and its log (-v) in scratch/ (else removes it)."""
    errs = []
    for m in mounts:
        try:
            m.close()
        except Exception as e:  # noqa: BLE001
            errs.append(f"{m.dir}: {e}")
        m.advice = advice(m)
        try:
            if scratch:
                shutil.move(m.log, os.path.join(scratch, "ucfs-" + os.path.basename(m.log)))
            else:
                os.unlink(m.log)
        except OSError:
            pass
    if errs:
        raise Failed("a ucfs daemon did not exit cleanly after the unmount", errs)


def mounted(ctx, src, ready, *args):
    return mount_testing.Mount(ctx.ucfs, src, ready, "--no-cache", *args)


def facts_of(fx):
    with open(os.path.join(fx, "MODERN.json")) as f:
        return json.load(f)


def load_result(path):
    with open(path) as f:
        return json.load(f)


def reproducer(ucfs_cmd, run_cmd):
    mnt = ucfs_cmd.split()[-1] if ucfs_cmd.startswith("/") else None
    pre = f"mkdir -p {mnt} && " if mnt else ""
    return [f"reproduce: {pre}{ucfs_cmd}  (as root, on the host)", f"           {run_cmd}",
            "           then: ucfs umount MNT"]


def ranks_on_mount(ctx, n, program, spec, m, scratch, timeout=600):
    """Runs `program` on n ranks reading the mount m, then unmounts it whatever happened (m.advice then holds ucfs's
    batch advice). Returns (rc, log path, command string)."""
    try:
        rc, _, log, cmd = ctx.run_ranks(n, program, spec, [m], scratch, timeout=timeout)
    finally:
        close_all([m], scratch)
    return rc, log, cmd


def result_of(spec, rc, log, repro=()):
    """What the program recorded (spec["result"]); Failed, with its last error lines, its log and the reproducer
    lines `repro`, when it did not end well."""
    if rc != 0 or not os.path.exists(spec["result"]):
        raise Failed(f"the run failed (rc {rc}): " + " | ".join(error_lines(log)), [f"log: {log}"] + list(repro))
    return load_result(spec["result"])


def advised(summary, advice):
    """The check's summary with ucfs's batch advice, when the mount gave one."""
    return summary + f"; ucfs advised: {advice}" if advice else summary


def verdict(bad, summary, log, repro):
    """A check's outcome: its summary when nothing is `bad`, else Failed on the first mismatch (the first 12 listed
    below it, with the log and the reproducer lines `repro`)."""
    if bad:
        raise Failed(f"{len(bad)} mismatches: {bad[0]}; " + summary, bad[:12] + [f"log: {log}"] + repro)
    return summary


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


# ----------------------------------------------------------------------------------------------------------------
def plan(full):
    """[(name, ci, fn(ctx))] in run order."""
    checks = []
    ci_ds = {("z2_tricky_bf16_ws3", "native", 2), ("z3_tricky_fp32_ws4", "native", 8),
             ("z1_tricky_bf16opt_ws2", "native", 1), ("z2_tricky_fp16_ws2", "native", 4),
             ("z3_tricky_fp32_ws4", "universal", 2), ("z1_tricky_fp32_ws2", "universal", 4),
             ("align_z2_fp32_ws3", "native", 2)}
    for name in DS_FIXTURES:
        facts = facts_of(os.path.join(MODERN, name))
        w = facts["world_size"]
        for mode in ("native", "universal"):
            for n in ns_for(w):
                cfg = facts["recipe"]["spec"]["ds_config"]
                micro, gas = batch_split(cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], n)
                view = f"--world-size {n}" if mode == "native" else "universal view"
                label = (f"deepspeed {mode:9s} {name} ({view}) W={w} -> N={n}, micro {micro} x gas {gas} = "
                         f"{cfg['train_batch_size']}")
                checks.append((label, (name, mode, n) in ci_ds,
                               lambda ctx, name=name, mode=mode, n=n: ds_check(ctx, name, mode, n)))
    for name, n in (("z3_tricky_bf16_ws2", 4), ("z3_tricky_fp32_ws4", 2)):
        checks.append((f"deepspeed universal {name} CONTROL without ucfs: DeepSpeed's own ds_to_universal output, "
                       f"N={n}", False, lambda ctx, name=name, n=n: ds_check(ctx, name, "universal", n, True)))
    ci_muon = {("muon_z1_fp32_ws2", 4), ("muon_z2_fp32_ws3", 2)}
    for name in MUON_FIXTURES:
        facts = facts_of(os.path.join(MODERN, name))
        w = facts["world_size"]
        for n in ns_for(w):
            cfg = facts["recipe"]["spec"]["ds_config"]
            micro, gas = batch_split(cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], n)
            label = (f"deepspeed native    {name} (--world-size {n}) W={w} -> N={n}, micro {micro} x gas {gas} = "
                     f"{cfg['train_batch_size']} (Muon)")
            checks.append((label, (name, n) in ci_muon,
                           lambda ctx, name=name, n=n: ds_check(ctx, name, "native", n)))
    for name in HF_FIXTURES:
        facts = facts_of(os.path.join(MODERN, name))
        w, ta = facts["world_size"], facts["recipe"]["training_args"]
        gb = ta["per_device_train_batch_size"] * ta["gradient_accumulation_steps"] * w
        for n in ns_for(w):
            pd, gas = batch_split(gb, ta["per_device_train_batch_size"], n)
            label = (f"hf-trainer {name} resume_from_checkpoint=checkpoint-{facts['recipe']['spec']['last_save']} "
                     f"(--world-size {n} --upper DIR) W={w} -> N={n}, per-device {pd} x gas {gas} = {gb}")
            checks.append((label, (name, n) in (("hf_llama_z3_bf16_ws2", 4), ("hf_peft_lora_z2_fp32_ws2", 1)),
                           lambda ctx, name=name, n=n: hf_check(ctx, name, n)))
    checks.append(("hf-trainer hf_llama_z3_bf16_ws2 resume through the run's shared indexes (ucfs index RUN, then "
                   "--world-size 4 --upper DIR) W=2 -> N=4", True,
                   lambda ctx: hf_check(ctx, "hf_llama_z3_bf16_ws2", 4, indexed=True)))
    checks.append(("writable mount (hf_llama_z3_bf16_ws2 run --world-size 2 --upper DIR): a new checkpoint's "
                   "model.safetensors is found as soon as it is listed, after a lookup before the save",
                   True, new_tag_weights_visible))
    for n in (1, 4):
        checks.append((f"accelerate accelerate_two_models_z2_bf16_ws2 load_state(checkpoints/checkpoint_0) "
                       f"(--world-size {n}) W=2 -> N={n}", n == 4, lambda ctx, n=n: accel_check(ctx, n)))
    for n in (1, 4):
        checks.append((f"lightning lightning_z3_bf16_ws2 fit(ckpt_path=.../epoch=0-step=4.ckpt) "
                       f"(--world-size {n} --upper DIR) W=2 -> N={n}, batch {4 // n}", n == 1,
                       lambda ctx, n=n: lightning_check(ctx, n)))
    for name in ("hf_llama_z3_bf16_ws2", "hf_llama_z2_fp32_ws2"):
        checks.append((f"from_pretrained {name}: AutoModelForCausalLM.from_pretrained(MNT/checkpoint-K) for every "
                       f"checkpoint of the run mounted read-only", name == "hf_llama_z3_bf16_ws2",
                       lambda ctx, name=name: from_pretrained_check(ctx, name)))
    return checks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ucfs")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--only", nargs="*", default=[], help="run the checks whose name contains one of these")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    checks = [(n, ci, fn) for n, ci, fn in plan(a.full) if (a.full or ci or a.only)]
    if a.only:
        checks = [c for c in checks if any(s in c[0] for s in a.only)]
    if a.list:
        for n, ci, _ in checks:
            print(("[ci] " if ci else "     ") + n)
        return 0
    ctx = Ctx(os.path.realpath(a.ucfs), a.keep)
    t0 = time.time()
    print(f"resume checks: {len(checks)} ({'full' if a.full else 'CI subset'}), ucfs {ctx.ucfs}, temp {ctx.tmp}",
          flush=True)
    for name, _, fn in checks:
        ctx.check(name, lambda fn=fn: fn(ctx))
    print(f"resume checks took {time.time() - t0:.0f} s")
    if ctx.failed or a.keep:
        print(f"kept {ctx.tmp} (specs, logs, results, upper dirs)")
    else:
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    print(f"{ctx.passed} passed, {ctx.failed} failed")
    return 1 if ctx.failed else 0


if __name__ == "__main__":
    sys.exit(main())
