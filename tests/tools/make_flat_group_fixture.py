#!/usr/bin/env python3
"""Make one ZeRO stage-1/2 ("flat group") test fixture with real DeepSpeed 0.14.5 (the oracle in /work/shared/oracle).

usage: /usr/bin/python3 make_flat_group_fixture.py --name NAME --world-size W --dtype fp32|bf16|fp16 --stage 1|2
           [--grad-accum-fp32] [--model tricky] [--out tests/data/fixtures] [--run-dir DIR] [--reuse-run]
           [--oracle /work/shared/oracle] [--validate-ws N ...]

Steps (every command is printed and recorded in ORACLE.json "commands"):
  1. launch.py W ... --worker worker_ext.py -- --model M --dtype D --stage S --ckpt RUN/checkpoint --steps 4
     --extra 2 --result RUN/train.json                                    (skipped with --reuse-run)
  2. RUN/checkpoint/zero_to_fp32.py RUN/checkpoint RUN/zero_to_fp32/pytorch_model.bin   (rc / error recorded)
  3. ds_to_universal.py --input_folder RUN/checkpoint/<tag> --output_folder RUN/dtu_plain/<tag>_universal
     and the same with --inject_missing_state into RUN/dtu_inject/  (rc, error, files written recorded)
  4. the fixture: OUT/NAME/checkpoint/ (a copy of RUN/checkpoint without zero_to_fp32.py),
     OUT/NAME/zero_to_fp32/pytorch_model.bin (when step 2 worked), OUT/NAME/expected/ by universal12_reference.py,
     compared file by file with what step 3 (--inject_missing_state) wrote outside its tmp/ dir
  5. OUT/NAME/ORACLE.json: live-engine facts from train.json, everything else from the files (torch.load)
  6. with --validate-ws: load_check.py native at W on OUT/NAME/checkpoint, and universal at each N on a temp dir
     holding checkpoint/ + expected/* (results printed, and recorded in ORACLE.json "validation")
Heavy steps run under `nice`. Environment: PYTHONPATH=$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps
(ORACLE_WORK defaults to ~/ucfs-oracle), DS_ACCELERATOR=cpu, OMP_NUM_THREADS=1 (set here when missing).
"""
import argparse
import collections
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

OW = os.environ.get("ORACLE_WORK", os.path.expanduser("~/ucfs-oracle"))
os.environ.setdefault("PYTHONPATH", f"{OW}/deepspeed-src:{OW}/pydeps")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")
for p in reversed(os.environ["PYTHONPATH"].split(":")):
    if p and p not in sys.path:
        sys.path.insert(0, p)

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import universal12_reference as u12  # noqa: E402

PY = "/usr/bin/python3"
SHARDED = ("base_optimizer_state", "param_slice_mappings", "single_partition_of_fp32_groups")
COMMANDS = []


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


class Placeholders:
    def __init__(self, oracle, run_dir, fixture, repo):
        self.pairs = [(os.path.abspath(run_dir), f"$ORACLE_WORK/{os.path.relpath(os.path.abspath(run_dir), OW)}")
                      if os.path.abspath(run_dir).startswith(os.path.abspath(OW) + "/") else (run_dir, run_dir),
                      (os.path.abspath(OW), "$ORACLE_WORK"), (os.path.abspath(oracle), "$ORACLE"),
                      (os.path.abspath(fixture), "<fixture>"), (os.path.abspath(repo) + "/", "")]

    def __call__(self, s):
        for a, b in self.pairs:
            s = s.replace(a, b)
        return s


def run(cmd, ph, log_path=None, record=True, cwd=None):
    """run cmd (list) under nice; returns (rc, seconds, combined output)."""
    text = " ".join(cmd)
    print(f"+ {text}", flush=True)
    if record:
        COMMANDS.append(ph(text))
    t0 = time.time()
    p = subprocess.run(["nice"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    dt = round(time.time() - t0, 1)
    if log_path:
        with open(log_path, "w") as f:
            f.write(p.stdout)
    return p.returncode, dt, p.stdout


def last_error(out):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b.*", ln.strip()):
            return ln.strip()
    return lines[-1].strip() if lines else None


def tdesc(t, grad=False):
    s = f"Tensor {t.dtype} {list(t.shape)}"
    return s + (f" requires_grad={t.requires_grad}" if grad else "")


def tname(v):
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def jsonable(v):
    if isinstance(v, torch.dtype):
        return str(v)
    if torch.is_tensor(v):
        return v.item() if v.numel() == 1 else v.tolist()
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v


def flat_values(t):
    return [float(x) for x in t.detach().float().reshape(-1).tolist()]


def list_files(root):
    out = []
    for d, _, fs in os.walk(root):
        for f in fs:
            out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def ds_to_universal(args, ph, tag_dir, out_root, inject):
    tag = os.path.basename(tag_dir)
    shutil.rmtree(out_root, ignore_errors=True)
    os.makedirs(out_root)
    out = os.path.join(out_root, f"{tag}_universal")
    cmd = [PY, f"{OW}/deepspeed-src/deepspeed/checkpoint/ds_to_universal.py", "--input_folder", tag_dir,
           "--output_folder", out] + (["--inject_missing_state"] if inject else [])
    rc, dt, text = run(cmd, ph, os.path.join(out_root, "log.txt"))
    files = list_files(out_root)
    files = [f for f in files if f != "log.txt"]
    outside = [f for f in files if not f.startswith(f"{tag}_universal/tmp/")]
    outside_names = [f for f in outside if f.startswith(f"{tag}_universal/")]
    tail = [ph(ln) for ln in text.splitlines() if ln.strip() and not re.match(r"^\s*[\^~]+\s*$", ln)][-3:]
    rec = {
        "command": "ds_to_universal.py --input_folder checkpoint/" + tag + " --output_folder <out>/" + tag
                   + "_universal" + (" --inject_missing_state" if inject else ""),
        "rc": rc,
        "seconds": dt,
        "error": ph(last_error(text)) if rc else None,
        "log_tail": tail,
        "latest_universal_written": os.path.exists(os.path.join(out_root, "latest_universal")),
        "files_written": len(files),
        "files_written_outside_tmp": sorted(f for f in outside_names),
    }
    print(f"  ds_to_universal{' --inject_missing_state' if inject else ''}: rc={rc} {rec['error']} "
          f"({len(files)} files, {len(outside_names)} outside tmp)")
    return rec, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], required=True)
    ap.add_argument("--stage", type=int, choices=[1, 2], required=True)
    ap.add_argument("--grad-accum-fp32", action="store_true")
    ap.add_argument("--model", default="tricky")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--extra", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "data", "fixtures"))
    ap.add_argument("--run-dir", default=None, help="scratch dir (default $ORACLE_WORK/runs12new/NAME)")
    ap.add_argument("--reuse-run", action="store_true", help="RUN/checkpoint and RUN/train.json exist: no training")
    ap.add_argument("--oracle", default="/work/shared/oracle")
    ap.add_argument("--loss-abs-tol", type=float, default=None)
    ap.add_argument("--validate-ws", type=int, nargs="*", default=None,
                    help="after building: load_check native at W, universal at each N given")
    ap.add_argument("--force", action="store_true", help="replace an existing OUT/NAME")
    a = ap.parse_args()

    repo = os.path.abspath(os.path.join(HERE, "..", ".."))
    run_dir = os.path.abspath(a.run_dir or os.path.join(OW, "runs12new", a.name))
    fx = os.path.abspath(os.path.join(a.out, a.name))
    ph = Placeholders(a.oracle, run_dir, fx, repo)
    W = a.world_size
    COMMANDS.append("export PYTHONPATH=$ORACLE_WORK/deepspeed-src:$ORACLE_WORK/pydeps DS_ACCELERATOR=cpu "
                    "OMP_NUM_THREADS=1")

    # ---- 1. train + save ----
    ckpt = os.path.join(run_dir, "checkpoint")
    result = os.path.join(run_dir, "train.json")
    train_cmd = [PY, os.path.join(a.oracle, "launch.py"), str(W), os.path.join(run_dir, "logs"), "--worker",
                 "worker_ext.py", "--", "--model", a.model, "--dtype", a.dtype, "--stage", str(a.stage)] + \
        (["--grad-accum-fp32"] if a.grad_accum_fp32 else []) + \
        ["--ckpt", ckpt, "--steps", str(a.steps), "--extra", str(a.extra), "--result", result]
    if a.reuse_run:
        COMMANDS.append(ph(" ".join(train_cmd)))
        print(f"(reusing {run_dir}: {' '.join(train_cmd)})")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
        rc, dt, text = run(train_cmd, ph)
        if rc:
            print(text)
            raise SystemExit(f"training failed rc={rc}; logs in {run_dir}/logs")
    tr = json.load(open(result))
    with open(os.path.join(ckpt, "latest")) as f:
        tag = f.read().strip()
    tag_dir = os.path.join(ckpt, tag)

    # ---- 2. DeepSpeed's tools ----
    dtu_plain, _ = ds_to_universal(a, ph, tag_dir, os.path.join(run_dir, "dtu_plain"), inject=False)
    dtu_inject, dtu_inject_out = ds_to_universal(a, ph, tag_dir, os.path.join(run_dir, "dtu_inject"), inject=True)
    z2f_out = os.path.join(run_dir, "zero_to_fp32")
    shutil.rmtree(z2f_out, ignore_errors=True)
    os.makedirs(z2f_out)
    z2f_bin = os.path.join(z2f_out, "pytorch_model.bin")
    rc_z, _, text_z = run([PY, os.path.join(ckpt, "zero_to_fp32.py"), ckpt, z2f_bin], ph,
                          os.path.join(run_dir, "zero_to_fp32.log"))
    print(f"  zero_to_fp32: rc={rc_z} {last_error(text_z) if rc_z else ''}")

    # ---- 3. the fixture dir ----
    if os.path.exists(fx):
        if not a.force:
            raise SystemExit(f"{fx} exists (use --force)")
        shutil.rmtree(fx)
    os.makedirs(fx)
    shutil.copytree(ckpt, os.path.join(fx, "checkpoint"), ignore=shutil.ignore_patterns("zero_to_fp32.py"))
    z2f_script = os.path.join(ckpt, "zero_to_fp32.py")
    removed = []
    if os.path.exists(z2f_script):
        st = os.stat(z2f_script)
        removed.append({"path": "checkpoint/zero_to_fp32.py", "size": st.st_size, "sha256": sha256(z2f_script),
                        "mode": oct(st.st_mode & 0o777),
                        "why": "engine.save_checkpoint copies deepspeed/utils/zero_to_fp32.py (DeepSpeed source, "
                               "Apache-2.0) into the save dir; left out of the fixture on purpose"})
    if rc_z == 0:
        os.makedirs(os.path.join(fx, "zero_to_fp32"))
        shutil.copy2(z2f_bin, os.path.join(fx, "zero_to_fp32", "pytorch_model.bin"))
    ref_cmd = [PY, os.path.join(HERE, "universal12_reference.py"), "--src", os.path.join(fx, "checkpoint"),
               "--dst", os.path.join(fx, "expected")]
    rc, _, text = run(ref_cmd, ph)
    print(text.strip().splitlines()[-1] if text.strip() else "")
    if rc:
        print(text)
        raise SystemExit("universal12_reference.py failed")
    exp_dir = os.path.join(fx, "expected", f"{tag}_universal")

    # compare with what DeepSpeed wrote outside its tmp dir
    ident, differ, missing = 0, [], []
    for rel in dtu_inject["files_written_outside_tmp"]:
        sub = rel[len(f"{tag}_universal/"):]
        mine = os.path.join(exp_dir, sub)
        theirs = os.path.join(os.path.dirname(dtu_inject_out), rel)
        if not os.path.exists(mine):
            missing.append(sub)
        elif open(mine, "rb").read() == open(theirs, "rb").read():
            ident += 1
        else:
            differ.append(sub)
    ds_latest = os.path.join(os.path.dirname(dtu_inject_out), "latest_universal")
    latest_equal = os.path.exists(ds_latest) and \
        open(ds_latest, "rb").read() == open(os.path.join(fx, "expected", "latest_universal"), "rb").read()
    ref_files = list_files(exp_dir)
    vs = {"byte_identical": ident, "differ": differ, "missing_in_reference": missing,
          "files_deepspeed_wrote_outside_tmp": len(dtu_inject["files_written_outside_tmp"]),
          "reference_files": len(ref_files), "latest_universal_equal": latest_equal}
    print(f"  reference vs DeepSpeed's --inject_missing_state output: {vs}")
    if differ or missing:
        raise SystemExit("the reference differs from DeepSpeed's own output")

    # ---- 4. facts from the files ----
    ms_path = os.path.join(fx, "checkpoint", tag, "mp_rank_00_model_states.pt")
    ms = torch.load(ms_path, map_location="cpu")
    optim_paths = u12.optim_files(os.path.join(fx, "checkpoint", tag))
    osd_full = [torch.load(p, map_location="cpu") for p in optim_paths]
    osds = [s["optimizer_state_dict"] for s in osd_full]
    o0 = osds[0]
    param_groups_shapes = [collections.OrderedDict((k, list(v)) for k, v in d.items()) for d in ms["param_shapes"]]
    shapes = collections.OrderedDict()
    for d in param_groups_shapes:
        shapes.update(d)
    groups_params = [list(d) for d in param_groups_shapes]
    module = ms["module"]
    buffer_names = list(ms["buffer_names"])
    shared = dict(ms["shared_params"])
    frozen_names = [n for n in module if n not in shapes and n not in buffer_names and n not in shared]
    lp_dtype = next(iter(module[n] for n in shapes)).dtype
    base_pg = o0["base_optimizer_state"]["param_groups"]
    pg_noparams = [{k: v for k, v in g.items() if k != "params"} for g in base_pg]
    is_bf16opt = "BF16_Optimizer" in tr["optimizer_class"]

    # full values (cut by each rank's param_slice_mappings)
    full = {"fp32": {}, "exp_avg": {}, "exp_avg_sq": {}}
    step_vals = set()
    for key in full:
        for name in shapes:
            parts = []
            for r, sd in enumerate(osds):
                for g, mp in enumerate(sd["param_slice_mappings"]):
                    if name in mp:
                        flat = sd["single_partition_of_fp32_groups"][g] if key == "fp32" else \
                            sd["base_optimizer_state"]["state"][g][key]
                        parts.append(flat.narrow(0, mp[name].start, mp[name].numel))
            full[key][name] = torch.cat(parts).reshape(shapes[name] or [])
    for sd in osds:
        for g, st in sd["base_optimizer_state"]["state"].items():
            step_vals.add(float(st["step"]))
    assert len(step_vals) == 1, step_vals
    adam_step = step_vals.pop()

    # partitioning
    groups = []
    for g, names in enumerate(groups_params):
        numel = sum(int(torch.Size(shapes[n]).numel()) for n in names)
        lay = tr["engine_layout_per_rank"]
        flat_numel = lay[0][g]["flat_numel"]
        assert flat_numel == -(-numel // (2 * W)) * 2 * W, (numel, flat_numel, W)
        groups.append({
            "param_group": g, "params": names, "numel": numel, "padded_numel": flat_numel,
            "partition_numel": flat_numel // W, "last_rank_padding": lay[W - 1][g]["group_padding_on_this_rank"],
            "fp32_saved_numel_per_rank": [int(sd["single_partition_of_fp32_groups"][g].numel()) for sd in osds],
        })
        assert [lay[r][g]["params"] for r in range(W)] == [names] * W

    # file facts
    def opt_key_desc(k, v):
        if k == "single_partition_of_fp32_groups":
            return "list of Tensor " + ", ".join(f"{t.dtype}[{t.numel()}]" for t in v)
        return tname(v)

    per_rank = []
    for sd in osds:
        per_rank.append({
            "single_partition_of_fp32_groups_numel": [int(t.numel()) for t in sd["single_partition_of_fp32_groups"]],
            "single_partition_of_fp32_groups_requires_grad": [bool(t.requires_grad)
                                                               for t in sd["single_partition_of_fp32_groups"]],
            "exp_avg_numel": [int(sd["base_optimizer_state"]["state"][g]["exp_avg"].numel())
                              for g in range(len(sd["single_partition_of_fp32_groups"]))],
            "group_paddings": list(sd["group_paddings"]),
            "partition_count": list(sd["partition_count"]),
            "param_slice_mappings": [{n: {"start": int(m.start), "numel": int(m.numel)} for n, m in mp.items()}
                                     for mp in sd["param_slice_mappings"]],
        })
    scalars = {}
    for k, v in o0.items():
        if k in SHARDED or k in ("group_paddings", "partition_count"):
            continue
        if k == "loss_scaler":
            scalars[k] = jsonable(dict(vars(v)))
        elif k == "zero_stage":
            scalars[k] = str(v)
        else:
            scalars[k] = jsonable(v)
    if "loss_scaler" in o0:
        scalars["loss_scaler_class"] = tname(o0["loss_scaler"])
    ms_values = {}
    for k in ("buffer_names", "shared_params", "lr_scheduler", "skipped_steps", "global_steps", "global_samples",
              "dp_world_size", "mp_world_size", "ds_version", "sparse_tensor_module_names", "optimizer",
              "frozen_param_shapes"):
        v = ms.get(k)
        if k == "sparse_tensor_module_names":
            v = sorted(v)
        elif k == "frozen_param_shapes" and v is not None:
            v = {n: list(s) for n, s in v.items()}
        ms_values[k] = jsonable(v)
    fpf = ms.get("frozen_param_fragments")
    file_facts = {
        "files": {os.path.basename(p): os.path.getsize(p) for p in sorted(glob.glob(os.path.join(fx, "checkpoint",
                                                                                                 tag, "*")))},
        "model_states_top_level": {k: tname(v) for k, v in ms.items()},
        "model_states_values": ms_values,
        "model_states_param_shapes": [dict(d) for d in param_groups_shapes],
        "model_states_frozen_param_fragments": None if fpf is None else {n: tdesc(t) for n, t in fpf.items()},
        "model_states_module_entries": {n: f"{t.dtype} {list(t.shape)}" for n, t in module.items()},
        "optim_states_top_level": {k: tname(v) for k, v in osd_full[0].items()},
        "optimizer_state_dict_keys": {k: opt_key_desc(k, v) for k, v in o0.items()},
        "base_optimizer_state": {
            "keys": list(o0["base_optimizer_state"]),
            "state_per_group_rank0": {str(g): {k: tdesc(v) if torch.is_tensor(v) else tname(v) for k, v in st.items()}
                                      for g, st in o0["base_optimizer_state"]["state"].items()},
            "param_groups_rank0": jsonable(base_pg),
        },
        "per_rank": per_rank,
        "scalars_rank0": scalars,
    }

    # universal layout (from the reference output)
    uo = torch.load(os.path.join(exp_dir, "zero", "optimizer_state.pt"), map_location="cpu")
    uo_values = {}
    for k, v in uo.items():
        if k == "loss_scaler":
            uo_values[k] = jsonable(dict(vars(v)))
        elif k == "zero_stage":
            uo_values[k] = str(v)
        else:
            uo_values[k] = jsonable(v)
    examples = {}
    for rel in [f for f in ref_files if f.startswith("zero/") and f != "zero/optimizer_state.pt"][:12]:
        v = torch.load(os.path.join(exp_dir, rel), map_location="cpu")
        key = rel[len("zero/"):]
        if isinstance(v, dict):
            examples[key] = {k: (tdesc(x, grad=True) if torch.is_tensor(x) else x) for k, x in v.items()}
        else:
            examples[key] = f"{tdesc(v)} = {v.item()}"
    universal_layout = {"files": ref_files, "optimizer_state.pt": {k: tname(v) for k, v in uo.items()},
                        "optimizer_state.pt_values": uo_values, "examples": examples}

    # zero_to_fp32
    manual = {}
    for n in buffer_names:
        manual[n] = module[n].float()  # zero_to_fp32.py writes buffers as float32 (v.float())
    for n in frozen_names:
        manual[n] = (fpf[n] if fpf is not None and n in fpf else module[n])
    for n in shapes:
        manual[n] = full["fp32"][n]
    for n, src in shared.items():
        manual[n] = manual[src]
    if rc_z == 0:
        z = torch.load(z2f_bin, map_location="cpu")
        zkeys = list(z)
        eq = {k: bool(k in manual and z[k].dtype == manual[k].dtype and z[k].shape == manual[k].shape
                      and torch.equal(z[k], manual[k])) for k in zkeys}
        missing_from_output = [n for n in module if n not in z]
    else:
        zkeys, eq, missing_from_output = [], {}, None
    zero_to_fp32 = {"output": "zero_to_fp32/pytorch_model.bin" if rc_z == 0 else None,
                    "command": "checkpoint/zero_to_fp32.py checkpoint <out>/pytorch_model.bin",
                    "rc": rc_z, "error": ph(last_error(text_z)) if rc_z else None,
                    "keys": zkeys, "equals_manual_reconstruction": eq,
                    "module_entries_missing_from_output": missing_from_output}
    if rc_z == 0:
        print(f"  zero_to_fp32 keys {len(zkeys)}, equal to manual {sum(eq.values())}/{len(eq)}, "
              f"missing {missing_from_output}")

    lp_eq = {n: bool(torch.equal(module[n], full["fp32"][n].to(module[n].dtype))) for n in shapes}

    # harness
    ls = o0.get("loss_scaler")
    tol = a.loss_abs_tol if a.loss_abs_tol is not None else {"fp32": 1e-5, "bf16": 2e-3, "fp16": 2e-3}[a.dtype]
    harness = {
        "model": a.model, "dtype": a.dtype, "zero_stage": a.stage, "grad_accum_fp32": bool(a.grad_accum_fp32),
        "optimizer_class": tr["optimizer_class"], "world_size": W, "tag": tag, "steps": a.steps, "extra": a.extra,
        "param_shapes": dict(shapes), "param_groups_params": groups_params, "lp_dtype": str(lp_dtype),
        "expected": {
            "global_steps": ms["global_steps"], "global_samples": ms["global_samples"],
            "skipped_steps": ms["skipped_steps"], "step": adam_step,
            "lr_scheduler": jsonable(ms["lr_scheduler"]), "param_groups": jsonable(pg_noparams),
            "loss_scaler": jsonable(dict(vars(ls))) if ls is not None else None,
            "dynamic_loss_scale": o0.get("dynamic_loss_scale"), "overflow": o0.get("overflow"),
            "clip_grad": o0.get("clip_grad"),
        },
        "reference": {
            "eval_loss_at_save": tr["eval_loss_at_save"], "continuation_losses": tr["continuation_losses"],
            "eval_loss_after_continuation": tr["eval_loss_after_continuation"],
            "adam_step_after_continuation": tr["adam_steps_after_continuation"][0]
            if len(tr["adam_steps_after_continuation"]) == 1 else None,
        },
        "loss_abs_tol": tol,
    }
    assert tr["saved_global_steps"] == ms["global_steps"] and tr["saved_skipped_steps"] == ms["skipped_steps"]

    rule = ("per torch param group i: the group's trainable params (param_shapes[i] order) concatenated, zero-padded "
            "at the end to a multiple of 2*W; partition P_i = padded/W; rank r holds [r*P_i, (r+1)*P_i) of fp32 "
            "master, exp_avg, exp_avg_sq. single_partition_of_fp32_groups drops the last group_paddings[i] elements "
            "(non-zero on the last rank only) for DeepSpeedZeroOptimizer, not for BF16_Optimizer; exp_avg/exp_avg_sq "
            "always have P_i elements")
    dcfg = tr["ds_config"]
    oracle_json = {
        "name": a.name,
        "deepspeed": {"version": tr["deepspeed_version"], "tag": "v" + tr["deepspeed_version"],
                      "commit": "eb07d41f959bda6c76b106c1c1c40493720b2fb8"
                      if tr["deepspeed_git_hash"] == "eb07d41f" else tr["deepspeed_git_hash"], "ops_built": False},
        "torch": {"torch.__version__": tr["torch_version"], "debian_package": "python3-torch 1.13.1+dfsg-4"},
        "python": platform.python_version(),
        "platform": "Debian 12 x86_64, CPU only, DS_ACCELERATOR=cpu, torch.distributed gloo (oracle gloo shim)",
        "world_size": W, "dtype": a.dtype, "zero_stage": a.stage, "optimizer_class": tr["optimizer_class"],
        "data_types": {"model": tr["data_types"][0], "grad_accum": tr["data_types"][1],
                       "configured": "data_types.grad_accum_dtype fp32" if a.grad_accum_fp32 else "default"},
        "checkpoint_tag": tag,
        "model": {
            "name": a.model,
            "definition": "TrickyNet: gate [] (0-dim, 1), tri [3], embed.weight [24,12] (tied with head.weight), "
                          "ln1 [12]+[12],\n    fc1 [20,12]+[20], proj [5,20]+[5] (FROZEN), fc2 [12,25]+[12], ln2 "
                          "[12]+[12], head.bias [24];\n    buffers: mix [12] (persistent, random), pos [6] "
                          "(non-persistent)." if a.model == "tricky" else a.model,
            "source": "oracle_models.py (TrickyNet)" if a.model == "tricky" else "oracle_models.py",
            "init": "torch.manual_seed(1234) then the model constructor, on every rank",
            "trainable_params": [{"name": n, "shape": shapes[n], "numel": int(torch.Size(shapes[n]).numel())}
                                 for n in shapes],
            "frozen_params": {n: list(module[n].shape) for n in frozen_names},
            "persistent_buffers": {n: list(module[n].shape) for n in buffer_names},
            "shared_params": shared,
            "total_trainable_numel": sum(int(torch.Size(s).numel()) for s in shapes.values()),
        },
        "optimizer": {
            "class": "torch.optim.AdamW", "groups": jsonable(pg_noparams), "param_groups_params": groups_params,
            "note": "DeepSpeed wraps it (zero_allow_untested_optimizer); stage 1/2: one flat fp32 partition per torch "
                    "param group, state step a 0-dim float tensor per group",
        },
        "ds_config": dcfg,
        "data": f"global batch {dcfg['train_batch_size']} sequences of 7 tokens (vocab 24); step s uses "
                f"torch.Generator seed 1000+s; rank r takes rows [r*mb,(r+1)*mb), mb = {dcfg['train_batch_size']}/ws; "
                f"inputs = tokens[:, :-1], labels = tokens[:, 1:]",
        "training": f"{a.steps} steps, eval on batch {a.steps} (no update), save_checkpoint, {a.extra} more steps "
                    f"(reference continuation), eval on batch {a.steps + a.extra}",
        "harness": harness,
        "partitioning": {"rule": rule, "groups": groups, "live_engine_layout_per_rank": tr["engine_layout_per_rank"],
                         "adam_step": adam_step},
        "file_facts": file_facts,
        "losses": {"train_losses": tr["train_losses"], "eval_loss_at_save": tr["eval_loss_at_save"],
                   "continuation_losses": tr["continuation_losses"],
                   "eval_loss_after_continuation": tr["eval_loss_after_continuation"]},
        "ds_to_universal": {"plain": dtu_plain, "inject_missing_state": dtu_inject,
                            "in_fixture": "nothing: the converter failed (see inject_missing_state.error); use expected/"
                            if dtu_inject["rc"] else "nothing: expected/ is the reference (byte-compared above)"},
        "universal_layout": universal_layout,
        "expected_universal": {
            "path": f"expected/ (latest_universal -> {tag}_universal)",
            "made_by": "universal12_reference.py (ds_to_universal.py's stage<=2 layout without the "
                       "universal_checkpoint_info requirement, 0-dim params written with shape [1])",
            "vs_deepspeed_output": vs,
        },
        "zero_to_fp32": zero_to_fp32,
        "lp_params_in_model_states_equal_fp32_cast": lp_eq,
        "expected_full_values": {k: {n: flat_values(t) for n, t in d.items()} for k, d in full.items()},
        "expected_frozen_values": {n: {"dtype": str(module[n].dtype), "shape": list(module[n].shape),
                                       "values": flat_values(module[n])} for n in frozen_names},
        "expected_buffer_values": {n: {"dtype": str(module[n].dtype), "shape": list(module[n].shape),
                                       "values": flat_values(module[n])} for n in buffer_names},
        "notes": [],
        "removed_files": removed,
        "commands": None,
        "files": None,
    }
    notes = oracle_json["notes"]
    if ls is not None and type(ls).__name__ == "DynamicLossScaler":
        notes.append("fp16: optimizer_state_dict['loss_scaler'] is a pickled deepspeed.runtime.fp16.loss_scaler."
                     "DynamicLossScaler object (not a dict): vars " + json.dumps(jsonable(dict(vars(ls))))
                     + " (cur_scale a python int, dtype a pickled torch.float16); dynamic_loss_scale True")
    if ms.get("frozen_param_shapes") is None and frozen_names:
        notes.append(f"stage {a.stage}: the model states file has frozen_param_shapes = frozen_param_fragments = None "
                     f"(DeepSpeed records frozen params only when gradients are partitioned, i.e. stage 2); the "
                     f"frozen params {frozen_names} exist only in 'module'")
        if rc_z == 0 and missing_from_output:
            notes.append(f"zero_to_fp32.py drops {missing_from_output} (frozen params at stage 1)")
    if is_bf16opt:
        notes.append("BF16_Optimizer: files bf16_zero_pp_rank_*; zero_to_fp32.py rejects them")
    elif a.dtype == "bf16":
        notes.append("bf16 without data_types.grad_accum_dtype fp32: DeepSpeedZeroOptimizer (bit16 groups in bf16, "
                     "fp32 partitions), yet the optimizer files are still named bf16_zero_pp_rank_*")
    if dtu_inject["rc"] == 0:
        oracle_json["ds_to_universal"]["in_fixture"] = "nothing: expected/ is the reference, byte-identical to " \
            "DeepSpeed's own output"

    # ---- 5. validation (optional) ----
    def write_json():
        files = []
        for rel in list_files(fx):
            if rel == "ORACLE.json":
                continue
            p = os.path.join(fx, rel)
            files.append({"path": rel, "size": os.path.getsize(p), "sha256": sha256(p)})
        oracle_json["files"] = files
        oracle_json["commands"] = COMMANDS + [
            f"{PY} tests/tools/make_flat_group_fixture.py " + " ".join(ph(x) for x in sys.argv[1:])
            + "   # all of the above + ORACLE.json + validation"]
        with open(os.path.join(fx, "ORACLE.json"), "w") as f:
            json.dump(oracle_json, f, indent=1)
            f.write("\n")

    write_json()
    if a.validate_ws is not None:
        val = []
        lc = os.path.join(a.oracle, "load_check.py")
        rc, dt, text = run([PY, lc, "--fixture", fx, "--ckpt", os.path.join(fx, "checkpoint"), "--mode", "native",
                            "--world-size", str(W), "--quiet"], ph, record=False)
        val.append({"mode": "native", "world_size": W, "ckpt": "checkpoint", "rc": rc, "seconds": dt,
                    "result": ph(text.strip().splitlines()[-1]) if text.strip() else None})
        print("  " + str(val[-1]))
        for N in a.validate_ws:
            tmp = tempfile.mkdtemp(prefix=f"u12_{a.name}_")
            try:
                shutil.copytree(os.path.join(fx, "checkpoint"), os.path.join(tmp, "ckpt"))
                shutil.copy2(os.path.join(fx, "expected", "latest_universal"), os.path.join(tmp, "ckpt"))
                shutil.copytree(exp_dir, os.path.join(tmp, "ckpt", f"{tag}_universal"))
                rc, dt, text = run([PY, lc, "--fixture", fx, "--ckpt", os.path.join(tmp, "ckpt"), "--mode",
                                    "universal", "--world-size", str(N), "--quiet"], ph, record=False)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            line = text.strip().splitlines()[-1] if text.strip() else None
            val.append({"mode": "universal", "world_size": N, "ckpt": "copy of checkpoint/ + expected/*", "rc": rc,
                        "seconds": dt, "result": re.sub(r"ckpt=\S+", "ckpt=<tmp>", line) if line else None})
            print("  " + str(val[-1]))
        oracle_json["validation"] = val
        write_json()
    print("commands:")
    for c in oracle_json["commands"]:
        print("  " + c)
    print(f"wrote {fx} ({sum(os.path.getsize(os.path.join(fx, f)) for f in list_files(fx))} bytes)")


if __name__ == "__main__":
    main()
