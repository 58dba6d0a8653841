#!/usr/bin/env python3
"""Make the "modern" test fixtures: checkpoints written by DeepSpeed 0.19.8 (and by the trainers that drive it) on
CPU ranks in the modern root, with DeepSpeed's own converters' output beside them. Runs INSIDE the root:

    tests/ecosystem/run.sh python3 tests/tools/make_modern_fixtures.py [--only NAME ...] [--out tests/data/modern]
        [--no-resume-check] [--list]

For each fixture (see FIXTURES below) it
  1. trains a tiny model for a few steps on W CPU ranks with the real library code (tests/ecosystem/harness/
     launch.py + a rank program in tests/tools/modern/), which saves into OUT/NAME/checkpoint/ (plain DeepSpeed) or
     OUT/NAME/run/ (a trainer's run directory: HF Trainer output_dir, accelerate project_dir, Lightning
     default_root_dir), then trains 2 more steps in the same process when that is simple (losses_after);
  2. resumes in a fresh launch at the same W from a scratch copy (DeepSpeed load_checkpoint / Trainer
     resume_from_checkpoint / accelerator.load_state / Lightning ckpt_path), and records the next 2 losses and
     whether the restored state equals the saved one (resume_check; skipped with --no-resume-check);
  3. for every checkpoint root (a directory holding `latest`) and every tag in it (latest's last), runs DeepSpeed
     0.19.8's own `python3 -m deepspeed.checkpoint.ds_to_universal` (plain; again with --inject_missing_state when
     plain fails), output kept under OUT/NAME/expected/[<root>/]<tag>_universal and .../latest_universal, or rc and
     stderr recorded when it fails; and the root's own zero_to_fp32.py (pytorch_model.bin, and again with
     --safe_serialization), output under OUT/NAME/zero_to_fp32/[<root>/][<tag>/] or the failure recorded;
  4. checks both tools' output against the values the live engine held at save time (DeepSpeed's safe_get_full_*
     view of the fp32 masters and optimizer state) and writes OUT/NAME/MODERN.json.

Everything is seeded; a rerun rebuilds each fixture from scratch (OUT/NAME is deleted first). The scratch dir
(/tmp/ucfs-modern-fixtures) holds the logs and resume copies.
"""
import argparse
import base64
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
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MODERN = os.path.join(HERE, "modern")
LAUNCH = os.path.join(REPO, "tests", "ecosystem", "harness", "launch.py")
OLD_FIXTURES = os.path.join(REPO, "tests", "data", "fixtures")
SCRATCH = "/tmp/ucfs-modern-fixtures"
PY = sys.executable
SEC_PER_RANK = 3.5


# ------------------------------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------------------------------
def ds_config(W, stage, dtype, extra_zero=None, optimizer=None, grad_accum_fp32=False, fp16_power=12):
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 2 * W,
        "optimizer": optimizer or {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8,
                                                                "weight_decay": 0.1, "torch_adam": True}},
        "gradient_clipping": 1.0,
        "zero_optimization": dict({"stage": stage}, **(extra_zero or {})),
        "steps_per_print": 1000,
    }
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif dtype == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": fp16_power, "loss_scale_window": 2, "hysteresis": 1}
    if grad_accum_fp32:
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    return cfg


MUON = {"type": "Muon", "params": {"lr": 1e-2, "momentum": 0.95, "weight_decay": 0.1, "betas": [0.9, 0.999],
                                   "eps": 1e-8, "torch_adam": True}}

FIXTURES = collections.OrderedDict()


def fixture(name, **kw):
    FIXTURES[name] = dict(name=name, **kw)


# plain DeepSpeed engine.save_checkpoint, TrickyNet
fixture("z1_tricky_fp32_ws2", kind="ds", W=2, stage=1, dtype="fp32", old="z1_tricky_fp32_ws4",
        ds_config=ds_config(2, 1, "fp32"))
fixture("z2_tricky_bf16_ws3", kind="ds", W=3, stage=2, dtype="bf16", old="z2_tricky_bf16_ws4",
        ds_config=ds_config(3, 2, "bf16"))
fixture("z2_tricky_fp16_ws2", kind="ds", W=2, stage=2, dtype="fp16", old="z2_tricky_fp16_ws3",
        ds_config=ds_config(2, 2, "fp16"))
fixture("z3_tricky_fp32_ws4", kind="ds", W=4, stage=3, dtype="fp32", old="z3_tricky_fp32_ws4",
        ds_config=ds_config(4, 3, "fp32", {"sub_group_size": 100, "stage3_param_persistence_threshold": 16}))
fixture("z3_tricky_bf16_ws2", kind="ds", W=2, stage=3, dtype="bf16", old="z3_tricky_fp32_ws4",
        ds_config=ds_config(2, 3, "bf16", {"sub_group_size": 200}))
fixture("z1_tricky_bf16opt_ws2", kind="ds", W=2, stage=1, dtype="bf16", old="z1_tricky_bf16opt_ws2",
        ds_config=ds_config(2, 1, "bf16", grad_accum_fp32=True))
fixture("z2_muon_fp32_ws2", kind="ds", W=2, stage=2, dtype="fp32", old="z2_tricky_fp32_ws2", groups="one",
        ds_config=ds_config(2, 2, "fp32", optimizer=MUON))
# runs written by the trainers' own code
fixture("hf_llama_z3_bf16_ws2", kind="hf", W=2, stage=3, dtype="bf16", model="llama", max_steps=8, save_steps=2,
        last_save=6, save_total_limit=2)
fixture("hf_llama_z2_fp32_ws2", kind="hf", W=2, stage=2, dtype="fp32", model="llama", max_steps=6, save_steps=2,
        last_save=4, save_total_limit=None)
fixture("hf_peft_lora_z3_bf16_ws2", kind="hf", W=2, stage=3, dtype="bf16", model="peft", max_steps=6,
        save_steps=4, last_save=4, save_total_limit=None)
fixture("hf_peft_lora_z2_fp32_ws2", kind="hf", W=2, stage=2, dtype="fp32", model="peft", max_steps=6,
        save_steps=4, last_save=4, save_total_limit=None)
fixture("accelerate_two_models_z2_bf16_ws2", kind="accelerate", W=2, stage=2, dtype="bf16", steps=4)
fixture("lightning_z3_bf16_ws2", kind="lightning", W=2, stage=3, dtype="bf16", steps_per_epoch=4)
# Muon + aux Adam at ZeRO-1/2/3, bf16 masters, parameter_alignment: tests/tools/modern/fixtures_optimizers.py
sys.path.insert(0, MODERN)
import fixtures_optimizers  # noqa: E402
fixtures_optimizers.register(fixture, ds_config, MUON)
import fixtures_model_parallel  # noqa: E402 - tests/tools/modern: AutoTP, AutoEP, MoE fixtures (own builders)
fixtures_model_parallel.register(fixture)


# ------------------------------------------------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, name, fx, scratch):
        self.name, self.fx, self.scratch = name, fx, scratch
        self.commands = []
        self.notes = []

    def ph(self, s):
        for a, b in ((self.fx, "<fixture>"), (self.scratch, "<scratch>"), (REPO, "<repo>")):
            s = s.replace(a + "/", b + "/").replace(a, b)
        return s

    def run(self, cmd, cwd, log, timeout=1200, env=None):
        """Runs cmd; returns (rc, seconds, stdout, stderr). Logged to log.{out,err}; recorded in commands."""
        text = " ".join(cmd)
        print(f"  + (cd {self.ph(cwd)}) {self.ph(text)}", flush=True)
        t0 = time.time()
        e = dict(os.environ, **(env or {}))
        try:
            p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=timeout, env=e)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as ex:
            rc, out, err = 124, ex.stdout or "", (ex.stderr or "") + f"\n<timeout after {timeout}s>"
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
        dt = round(time.time() - t0, 1)
        with open(log + ".out", "w") as f:
            f.write(out)
        with open(log + ".err", "w") as f:
            f.write(err)
        rec = {"cwd": self.ph(cwd), "command": self.ph(text), "rc": rc, "seconds": dt}
        if env:
            rec["env"] = env
        self.commands.append(rec)
        print(f"    rc={rc} ({dt}s)", flush=True)
        return rc, dt, out, err


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def list_files(root):
    out = []
    for d, dirs, fs in os.walk(root):
        dirs.sort()
        for f in sorted(fs):
            out.append(os.path.relpath(os.path.join(d, f), root))
    return out


# DeepSpeed copies its own scripts into every save directory: they are another project's code, which the
# repository does not hold. Their sizes and digests are kept in MODERN.json instead; nothing reads them.
LIBRARY_SCRIPTS = ("zero_to_fp32.py", "zero_to_torch.py")


def drop_library_scripts(fx):
    """Removes DeepSpeed's scripts from the saved tree below fx; [{path, size, sha256}] of each."""
    removed = []
    for rel in list_files(fx):
        if os.path.basename(rel) in LIBRARY_SCRIPTS:
            p = os.path.join(fx, rel)
            removed.append({"path": rel, "size": os.path.getsize(p), "sha256": sha256_file(p)})
            os.remove(p)
    return removed


def inventory(root, base):
    """[{path, size, sha256, mode}] for every file (and symlink) below root; paths relative to base."""
    out = []
    for rel in list_files(root):
        p = os.path.join(root, rel)
        st = os.lstat(p)
        ent = {"path": os.path.relpath(p, base), "size": st.st_size, "mode": oct(st.st_mode & 0o777)}
        if os.path.islink(p):
            ent["symlink"] = os.readlink(p)
        else:
            ent["sha256"] = sha256_file(p)
        out.append(ent)
    return out


def error_line(text):
    """The last exception line of a traceback (with the next lines when its message continues there)."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln.strip()) for ln in (text or "").splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", lines[i]):
            msg = lines[i]
            if len(msg.split(":", 1)[-1].strip()) < 8 and i + 1 < len(lines):
                msg += " " + " ".join(lines[i + 1:i + 3])
            return msg[:600]
    return lines[-1] if lines else None


def tail(text, n=25):
    lines = [ln for ln in (text or "").splitlines()
             if ln.strip() and "FutureWarning" not in ln and "return func(*args" not in ln
             and "gloo/transport" not in ln]
    return "\n".join(lines[-n:])


def tname(v):
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def tdesc(t):
    s = f"Tensor {str(t.dtype).removeprefix('torch.')} {list(t.shape)}"
    if t.requires_grad:
        s += " requires_grad"
    try:
        st = t.untyped_storage().nbytes() // max(1, t.element_size())
        if st != t.numel():
            s += f" (storage {st} elems, offset {t.storage_offset()})"
    except Exception:  # noqa: BLE001
        pass
    return s


def describe(v, depth=4, maxlen=16):
    """A JSON-able picture of an unpickled object: types, tensor dtypes/shapes, small scalars."""
    if torch.is_tensor(v):
        return tdesc(v)
    if isinstance(v, dict):
        if depth <= 0:
            return f"{tname(v)} with {len(v)} keys"
        items = list(v.items())
        out = {str(k): describe(x, depth - 1, maxlen) for k, x in items[:64]}
        if len(items) > 64:
            out["..."] = f"{len(items) - 64} more keys"
        if tname(v) != "dict":
            out["<type>"] = tname(v)
        return out
    if isinstance(v, (list, tuple)):
        if depth <= 0 or len(v) > maxlen:
            kinds = sorted({tname(x) for x in v})
            return f"{tname(v)}[{len(v)}] of {', '.join(kinds)}"
        return [describe(x, depth - 1, maxlen) for x in v]
    if isinstance(v, (int, float, bool, str)) or v is None:
        return v if not isinstance(v, str) or len(v) < 300 else v[:300] + "..."
    if isinstance(v, torch.Size):
        return list(v)
    if isinstance(v, torch.dtype):
        return str(v)
    d = getattr(v, "__dict__", None)
    if d is not None and depth > 0:
        return {"<type>": tname(v), **{k: describe(x, depth - 1, maxlen) for k, x in list(d.items())[:32]}}
    return f"<{tname(v)}> {str(v)[:200]}"


def key_paths(v, prefix="", depth=6):
    """Set of key paths in a loaded checkpoint object; int keys and list positions collapse to <i> / []."""
    out = set()
    if depth <= 0:
        return out
    if isinstance(v, dict):
        for k, x in v.items():
            kk = "<i>" if isinstance(k, int) else str(k)
            if prefix.endswith(("module", "param_shapes[]", "frozen_param_shapes", "frozen_param_fragments",
                                "param_slice_mappings[]", "shared_params", "ds_config")):
                kk = "<name>" if not isinstance(k, int) else kk
            p = f"{prefix}.{kk}" if prefix else kk
            out.add(f"{p}: {tname(x) if not torch.is_tensor(x) else 'Tensor'}")
            out |= key_paths(x, p, depth - 1)
    elif isinstance(v, (list, tuple)) and v:
        for x in v[:4]:
            out |= key_paths(x, prefix + "[]", depth - 1)
    return out


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def from_rec(rec):
    """A tensor back from a rank program's record (b64 bytes)."""
    dt = getattr(torch, rec["dtype"])
    raw = bytearray(base64.b64decode(rec["b64"]))
    t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
    return t.reshape(rec["shape"])


def tensor_sha(t):
    t = t.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def compare(got, want):
    """{'equal': bool, ...} for a tensor read from a tool's output against the live value."""
    if got is None:
        return {"equal": False, "why": "missing"}
    out = {"dtype": str(got.dtype).removeprefix("torch."), "shape": list(got.shape)}
    g = got.detach().float().reshape(-1)
    w = want.detach().float().reshape(-1)
    if g.numel() != w.numel():
        out.update(equal=False, why=f"numel {g.numel()} != live {w.numel()}")
        if g.numel() > w.numel() and torch.equal(g[:w.numel()], w):
            out["why"] += " (live values followed by extra elements)"
        return out
    eq = torch.equal(g, w)
    out["equal"] = bool(eq)
    if not eq:
        out["max_abs_diff"] = float((g - w).abs().max())
        if got.dtype != want.dtype and torch.equal(g, w.to(got.dtype).float()):
            out["why"] = f"equal to the live value rounded to {got.dtype}"
    return out


def tool_tensor(obj):
    """ds_to_universal per-param files: {'param': t, 'cat_dim'?: ...} or a plain tensor (ZeRO-3, 0.14.5)."""
    if isinstance(obj, dict):
        return obj.get("param")
    return obj if torch.is_tensor(obj) else None


# ------------------------------------------------------------------------------------------------------------------
# DeepSpeed's tools on one root
# ------------------------------------------------------------------------------------------------------------------
def root_tags(root):
    tags = []
    for d in sorted(os.listdir(root)):
        p = os.path.join(root, d)
        if os.path.isdir(p) and glob.glob(os.path.join(p, "*model_states.pt")):
            tags.append(d)
    latest = open(os.path.join(root, "latest")).read().strip() if os.path.exists(os.path.join(root, "latest")) \
        else None
    if latest in tags:
        tags.remove(latest)
        tags.append(latest)
    return tags, latest


DS_MODEL_STATE_KEYS = {"module", "buffer_names", "optimizer", "param_shapes", "frozen_param_shapes", "shared_params",
                       "frozen_param_fragments", "lr_scheduler", "data_sampler", "random_ltd",
                       "sparse_tensor_module_names", "skipped_steps", "global_steps", "global_samples",
                       "dp_world_size", "mp_world_size", "ds_config", "ds_version", "checkpoint_parallel_dimensions",
                       "universal_checkpoint_info", "ds_autoep_layers", "compiled_autograd", "num_experts"}


def tag_summary(tag_dir):
    """The facts of a tag that matter most to a reader, from its rank-0 model-states and optimizer files."""
    ms_files = sorted(glob.glob(os.path.join(tag_dir, "*model_states.pt")))
    opt_files = sorted(glob.glob(os.path.join(tag_dir, "*optim_states.pt")))
    # not a per-expert layer_<L>_expert_<E>_* file (MoE / AutoEP), which holds only that expert's weights
    ms = load(next((f for f in ms_files if not os.path.basename(f).startswith("layer_")), ms_files[0]))
    ps = ms.get("param_shapes")
    ps = ps if isinstance(ps, list) else [ps]
    fr = ms.get("frozen_param_shapes")
    out = {
        "model_states_files": [os.path.basename(f) for f in ms_files],
        "optim_states_files": [os.path.basename(f) for f in opt_files],
        "module_entries": len(ms.get("module") or {}),
        "module_entry_dtypes": sorted({str(v.dtype).removeprefix("torch.") for v in (ms.get("module") or {}).values()
                                       if torch.is_tensor(v)}),
        "module_entries_empty": sum(1 for v in (ms.get("module") or {}).values() if torch.is_tensor(v)
                                    and v.numel() == 0),
        "param_shapes_groups": [len(g) for g in ps if g is not None],
        "param_shapes_names": [n for g in ps if g for n in g],
        "frozen_param_shapes": None if fr is None else list(fr),
        "shared_params": ms.get("shared_params"),
        "buffer_names": ms.get("buffer_names"),
        "ds_version": ms.get("ds_version"),
        "global_steps": ms.get("global_steps"),
        "skipped_steps": ms.get("skipped_steps"),
        "dp_world_size": ms.get("dp_world_size"),
        "checkpoint_parallel_dimensions": ms.get("checkpoint_parallel_dimensions"),
        "universal_checkpoint_info": ms.get("universal_checkpoint_info"),
        "lr_scheduler": None if ms.get("lr_scheduler") is None else describe(ms["lr_scheduler"], depth=1),
        "client_state_keys": sorted(k for k in ms if k not in DS_MODEL_STATE_KEYS),
    }
    if opt_files:
        o = load(opt_files[0])
        osd = o.get("optimizer_state_dict", {})
        out["optim_states_top_level"] = sorted(o)
        out["optimizer_state_dict_keys"] = sorted(osd) if isinstance(osd, dict) else tname(osd)
        out["zero_stage"] = str(osd.get("zero_stage")) if isinstance(osd, dict) else None
        out["partition_count"] = describe(osd.get("partition_count")) if isinstance(osd, dict) else None
    return out


def run_tools(ctx, root_rel, exp_rel, z2f_rel):
    """ds_to_universal and zero_to_fp32.py on every tag of the root OUT/NAME/root_rel (cwd OUT/NAME)."""
    fx = ctx.fx
    root = os.path.join(fx, root_rel)
    tags, latest = root_tags(root)
    logs = os.path.join(ctx.scratch, "logs")
    os.makedirs(logs, exist_ok=True)
    res = {"root": root_rel, "latest": latest, "tags": tags, "converter": [], "zero_to_fp32": [],
           "tag_summaries": {t: tag_summary(os.path.join(root, t)) for t in tags}}
    for tag in tags:
        tag_rel = os.path.join(root_rel, tag)
        out_rel = os.path.join(exp_rel, f"{tag}_universal")
        attempts = []
        kept = None
        for inject in (False, True):
            shutil.rmtree(os.path.join(fx, out_rel), ignore_errors=True)
            cmd = [PY, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", tag_rel, "--output_folder",
                   out_rel] + (["--inject_missing_state"] if inject else [])
            safe = re.sub(r"[^\w.-]", "_", f"dtu_{tag_rel}_{int(inject)}")
            rc, dt, out, err = ctx.run(cmd, fx, os.path.join(logs, safe))
            att = {"inject_missing_state": inject, "command": " ".join(["python3"] + cmd[1:]), "rc": rc,
                   "seconds": dt}
            if rc:
                att["error"] = error_line(err) or error_line(out)
                att["stderr_tail"] = tail(err)
                left = list_files(os.path.join(fx, out_rel)) if os.path.isdir(os.path.join(fx, out_rel)) else []
                att["files_left_behind"] = len(left)
                shutil.rmtree(os.path.join(fx, out_rel), ignore_errors=True)
            attempts.append(att)
            if rc == 0:
                kept = out_rel
                break
        lu = os.path.join(fx, exp_rel, "latest_universal")
        rec = {"tag": tag, "is_latest": tag == latest, "attempts": attempts, "output": kept,
               "ok": kept is not None}
        if kept:
            rec["files"] = inventory(os.path.join(fx, kept), fx)
            if os.path.exists(lu):
                rec["latest_universal"] = {"path": os.path.relpath(lu, fx), "content": open(lu).read(),
                                           "sha256": sha256_file(lu)}
        res["converter"].append(rec)
        # zero_to_fp32.py, as the save dir holds it
        for safe_ser in (False, True):
            sub = tag if tag != latest else ""
            out_rel2 = os.path.join(z2f_rel, sub, "safetensors" if safe_ser else "")
            out_rel2 = os.path.normpath(out_rel2)
            outdir = os.path.join(fx, out_rel2)
            before = set(list_files(outdir)) if os.path.isdir(outdir) else set()
            cmd = [PY, os.path.join(root_rel, "zero_to_fp32.py"), root_rel, out_rel2] + \
                (["-t", tag] if tag != latest else []) + (["--safe_serialization"] if safe_ser else [])
            safe = re.sub(r"[^\w.-]", "_", f"z2f_{root_rel}_{tag}_{int(safe_ser)}")
            rc, dt, out, err = ctx.run(cmd, fx, os.path.join(logs, safe))
            z = {"tag": tag, "safe_serialization": safe_ser, "command": " ".join(cmd).replace(PY, "python3"),
                 "rc": rc, "seconds": dt, "output_dir": out_rel2}
            if rc:
                z["error"] = error_line(err) or error_line(out)
                z["stderr_tail"] = tail(err)
            if os.path.isdir(outdir):
                new = sorted(set(f for f in list_files(outdir) if not f.startswith("safetensors/")) - before)
                z["files"] = [dict(e, path=os.path.relpath(os.path.join(outdir, e["path"]), fx))
                              for e in inventory(outdir, outdir) if e["path"] in new]
                if rc and not new:
                    shutil.rmtree(outdir, ignore_errors=True) if not os.listdir(outdir) else None
            res["zero_to_fp32"].append(z)
    return res


def check_tools(fx, roots, live_by_tag, module_by_tag, info_by_tag):
    """Compare the converters' output with the live values recorded at save time."""
    for r in roots:
        for c in r["converter"]:
            info = info_by_tag.get((r["root"], c["tag"]), {})
            live = live_by_tag.get((r["root"], c["tag"]))
            if not c["ok"] or live is None:
                continue
            mod = module_by_tag.get((r["root"], c["tag"]), {})
            zdir = os.path.join(fx, c["output"], "zero")
            checks = {}
            for name, ent in live["params"].items():
                pc = {}
                for key in ("fp32", "exp_avg", "exp_avg_sq", "momentum_buffer"):
                    if key not in ent or ent[key] is None:
                        continue
                    path = os.path.join(zdir, name, f"{key}.pt")
                    got = tool_tensor(load(path)) if os.path.exists(path) else None
                    pc[key] = compare(got, from_rec(ent[key]))
                checks[name] = pc
            extra = {}
            tied = info.get("tied", {})
            for d in sorted(os.listdir(zdir)) if os.path.isdir(zdir) else []:
                if d in live["params"] or not os.path.isdir(os.path.join(zdir, d)):
                    continue
                files = sorted(os.listdir(os.path.join(zdir, d)))
                p = os.path.join(zdir, d, "fp32.pt")
                got = tool_tensor(load(p)) if os.path.exists(p) else None
                mp, mb = mod.get("params", {}), mod.get("buffers", {})
                if d in mp and "b64" in mp[d]:
                    extra[d] = {"what": "frozen param", "files": files, **compare(got, from_rec(mp[d]))}
                elif d in tied:
                    src = tied[d]
                    extra[d] = {"what": f"tied alias of {src}", "files": files}
                    if src in mp and "b64" in mp[src]:
                        extra[d]["vs_module_value_of_" + src] = compare(got, from_rec(mp[src]))
                    if src in live["params"]:
                        extra[d]["vs_fp32_master_of_" + src] = compare(got, from_rec(live["params"][src]["fp32"]))
                elif d in mb and "b64" in mb[d]:
                    extra[d] = {"what": "buffer", "files": files, **compare(got, from_rec(mb[d]))}
                else:
                    extra[d] = {"what": "unknown", "files": files}
            steps = {}
            for name in live["params"]:
                p = os.path.join(zdir, name, "step.pt")
                if os.path.exists(p):
                    v = load(p)
                    steps[name] = float(v) if torch.is_tensor(v) else repr(v)
            c["vs_live"] = {
                "all_equal": all(x.get("equal") for pc in checks.values() for x in pc.values()),
                "params": checks, "other_param_dirs": extra,
                "step_pt": ({"values": sorted(set(steps.values()), key=str), "params_with_step_pt": len(steps)}
                            if steps else None),
            }
        for z in r["zero_to_fp32"]:
            info = info_by_tag.get((r["root"], z["tag"]), {})
            live = live_by_tag.get((r["root"], z["tag"]))
            mod = module_by_tag.get((r["root"], z["tag"]), {})
            if z["rc"] or live is None or not z.get("files"):
                continue
            sd = {}
            for f in z["files"]:
                p = os.path.join(fx, f["path"])
                if p.endswith(".bin"):
                    sd.update(load(p))
                elif p.endswith(".safetensors"):
                    from safetensors.torch import load_file
                    sd.update(load_file(p))
            res = {"keys": list(sd), "dtypes": sorted({str(v.dtype).removeprefix("torch.") for v in sd.values()})}
            vals = {}
            for k, v in sd.items():
                if k in live["params"] and live["params"][k].get("fp32"):
                    vals[k] = dict(compare(v, from_rec(live["params"][k]["fp32"])), source="live fp32 master")
                elif k in info.get("tied", {}) and info["tied"][k] in live["params"]:
                    vals[k] = dict(compare(v, from_rec(live["params"][info["tied"][k]]["fp32"])),
                                   source=f"live fp32 master of {info['tied'][k]} (tied)")
                elif k in mod.get("params", {}) and "b64" in mod["params"][k]:
                    vals[k] = dict(compare(v, from_rec(mod["params"][k])), source="module value (frozen param)")
                elif k in mod.get("buffers", {}) and "b64" in mod["buffers"][k]:
                    vals[k] = dict(compare(v, from_rec(mod["buffers"][k])), source="module buffer")
                else:
                    vals[k] = {"equal": None, "source": "unknown key"}
            res["values"] = vals
            res["all_equal"] = all(x.get("equal") for x in vals.values())
            expected = set(live["params"]) | set(info.get("tied", {})) | set(info.get("frozen", [])) | \
                {b["name"] for b in info.get("buffers", []) if b["persistent"]}
            res["missing"] = sorted(expected - set(sd))
            res["unexpected"] = sorted(set(sd) - expected)
            z["vs_live"] = res


# ------------------------------------------------------------------------------------------------------------------
# file facts and the 0.14.5 comparison
# ------------------------------------------------------------------------------------------------------------------
def file_facts(tag_dir):
    facts = {"files": {}}
    seen = set()
    for p in sorted(glob.glob(os.path.join(tag_dir, "*.pt"))):
        b = os.path.basename(p)
        kind = re.sub(r"\d+", "N", b)
        facts["files"][b] = os.path.getsize(p)
        if kind in seen:
            continue
        seen.add(kind)
        facts[b] = describe(load(p))
    return facts


VS_OLD_EXPLAINED = {
    "decoupled_weight_decay": "torch >= 2.x AdamW param-group key (torch 1.13 had none): not DeepSpeed's",
    "differentiable": "torch >= 2.x optimizer param-group key: not DeepSpeed's",
    "fused": "torch >= 2.x optimizer param-group key: not DeepSpeed's",
    "initial_lr": "set by the recipe's torch LambdaLR scheduler (the 0.14.5 fixtures used DeepSpeed's WarmupDecayLR)",
    "checkpoint_parallel_dimensions": "new in DeepSpeed 0.19.x model states: {'tp_degree', 'pp_degree'}",
    "sparse_tensor_module_names": "dropped from DeepSpeed's model states after 0.14.5",
    "param_alignment_paddings": "new in DeepSpeed ZeRO-1/2 optimizer files and universal optimizer_state.pt "
                                "(per group, per param; zeros unless zero_optimization.parameter_alignment)",
}


def vs_old(new_tag_dir, old_fixture, new_universal=None):
    """Key paths present in the new files and not in the 0.14.5 fixture's (and back), per file kind (file names
    with rank numbers and the bf16_ prefix normalised). ds_config, lr_scheduler and the client state are left out
    (they differ by the recipes' choice); `explained` says where the remaining differences come from."""
    old_root = os.path.join(OLD_FIXTURES, old_fixture)
    old_ckpt = os.path.join(old_root, "checkpoint")
    if not os.path.isdir(old_ckpt):
        return None
    old_tag = open(os.path.join(old_ckpt, "latest")).read().strip()
    old_tag_dir = os.path.join(old_ckpt, old_tag)
    out = {"old_fixture": f"tests/data/fixtures/{old_fixture}", "files": {},
           "file_names_0.19.8": sorted(os.listdir(new_tag_dir)), "file_names_0.14.5": sorted(os.listdir(old_tag_dir))}

    def kinds(d):
        m = {}
        for p in sorted(glob.glob(os.path.join(d, "*.pt"))):
            m.setdefault(re.sub(r"^bf16_", "", re.sub(r"rank_\d+", "rank_N", os.path.basename(p))), p)
        return m

    def paths(p):
        # ds_config, lr_scheduler and client state differ by the recipes' choice, not by DeepSpeed's version
        return {x for x in key_paths(load(p)) if not re.match(r"^(ds_config|lr_scheduler|losses|recipe)\b", x)}
    new_k, old_k = kinds(new_tag_dir), kinds(old_tag_dir)
    out["file_kinds_only_0.19.8"] = sorted(set(new_k) - set(old_k))
    out["file_kinds_only_0.14.5"] = sorted(set(old_k) - set(new_k))
    seen = set()
    for k in sorted(set(new_k) & set(old_k)):
        a, b = paths(new_k[k]), paths(old_k[k])
        out["files"][k] = {"only_0.19.8": sorted(a - b), "only_0.14.5": sorted(b - a)}
        seen |= (a ^ b)
    if new_universal:
        old_u = os.path.join(old_root, "expected", f"{old_tag}_universal")
        if os.path.isdir(old_u):
            def shape(d):
                return {re.sub(r"^zero/[^/]+/", "zero/<param>/", f) for f in list_files(d)}
            nu, ou = shape(new_universal), shape(old_u)
            out["universal_file_kinds"] = {"only_0.19.8": sorted(nu - ou), "only_0.14.5": sorted(ou - nu)}
            pn = {f.split("/")[1] for f in list_files(new_universal) if f.startswith("zero/") and f.count("/") == 2}
            po = {f.split("/")[1] for f in list_files(old_u) if f.startswith("zero/") and f.count("/") == 2}
            out["universal_param_dirs"] = {"only_0.19.8": sorted(pn - po), "only_0.14.5": sorted(po - pn)}
            a = key_paths(load(os.path.join(new_universal, "zero", "optimizer_state.pt")))
            b = key_paths(load(os.path.join(old_u, "zero", "optimizer_state.pt")))
            out["universal_optimizer_state.pt"] = {"only_0.19.8": sorted(a - b), "only_0.14.5": sorted(b - a)}
            seen |= (a ^ b)
    out["explained"] = {k: v for k, v in VS_OLD_EXPLAINED.items() if any(k in x for x in seen)}
    return out


# ------------------------------------------------------------------------------------------------------------------
# one fixture
# ------------------------------------------------------------------------------------------------------------------
def launch(ctx, W, program, args, log, env=None, timeout=900):
    cmd = [PY, LAUNCH, "-n", str(W), "--timeout", str(timeout), "--", os.path.join(MODERN, program)] + args
    return ctx.run(cmd, REPO, log, timeout=timeout + 60, env=env)


def recipe_commands(program, W, resume_note=""):
    """A recipe's rank program and the commands that run its two phases on W ranks in the root."""
    launch_program = (f"tests/ecosystem/run.sh python3 tests/ecosystem/harness/launch.py -n {W} -- "
                      f"tests/tools/modern/{program} --spec SPEC.json --phase")
    return {"program": f"tests/tools/modern/{program} (one rank; started by tests/ecosystem/harness/launch.py)",
            "train_command": f"{launch_program} train",
            "resume_command": f"{launch_program} resume{resume_note}"}


GATE_NOTE = ("TrickyNet's gate is a [1] param here (0-dim [] in the 0.14.5 fixtures): DeepSpeed 0.19.8 cannot take a "
             "0-dim param at any ZeRO stage: DeepSpeedEngine._broadcast_model does dist.broadcast(p.data.view("
             "torch.uint8)) -> 'RuntimeError: self.dim() cannot be 0 to view Float as Byte (different element "
             "sizes)' (seen at stages 1 and 3)")


def muon_facts(tag_dir, tr):
    """How a ZeRO-1/2 Muon group's momentum_buffer is laid out in each rank's file: the whole params that rank's
    flat partition touches, concatenated (checked against param_slice_mappings and across ranks)."""
    names = {p["name"]: p for p in tr["model"]["params"]}
    files = sorted(glob.glob(os.path.join(tag_dir, "*optim_states.pt")), key=lambda p: int(re.search(
        r"rank_(\d+)_mp", p).group(1)))
    per_rank, pieces = [], collections.defaultdict(list)
    for r, f in enumerate(files):
        osd = load(f)["optimizer_state_dict"]
        for g, st in osd["base_optimizer_state"]["state"].items():
            if "momentum_buffer" not in st:
                continue
            buf = st["momentum_buffer"]
            touched = list(osd["param_slice_mappings"][g])
            sizes = [int(torch.Size(names[n]["shape"]).numel()) for n in touched]
            per_rank.append({"rank": r, "group": g, "momentum_buffer": tdesc(buf), "params_touched": touched,
                             "params_touched_numel": sizes, "sum_equals_buffer": sum(sizes) == buf.numel(),
                             "fp32_partition_numel": int(osd["single_partition_of_fp32_groups"][g].numel())})
            if sum(sizes) == buf.numel():
                off = 0
                for n, k in zip(touched, sizes):
                    pieces[n].append(buf[off:off + k].clone())
                    off += k
    return {"per_rank": per_rank,
            "replicas_equal": {n: all(torch.equal(ps[0], x) for x in ps[1:]) for n, ps in pieces.items()},
            "values": {n: {"sha256": tensor_sha(ps[0]), "b64": base64.b64encode(ps[0].contiguous().view(
                torch.uint8).numpy().tobytes()).decode(), "shape": names[n]["shape"], "dtype": "float32"}
                for n, ps in pieces.items()}}


def describe_ds_model():
    return ("TrickyNet (tests/tools/modern/models.py): gate [1], tri [3], embed.weight [24,12] tied with "
            "head.weight, ln1 [12]+[12], fc1 [20,12]+[20], proj [5,20]+[5] FROZEN, fc2 [12,25]+[12], ln2 [12]+[12], "
            "head.bias [24]; buffers mix [12] (persistent), pos [6] (non-persistent); computes in fp32")


def build_ds(ctx, spec, a):
    fx, scratch = ctx.fx, ctx.scratch
    W = spec["W"]
    ckpt = os.path.join(fx, "checkpoint")
    res_base = os.path.join(scratch, "result")
    wspec = {"ds_config": spec["ds_config"], "steps": 4, "extra": 2, "groups": spec.get("groups", "two"),
             "lr_warmup": 3, "ckpt": ckpt, "result": res_base}
    spec_path = os.path.join(scratch, "spec.json")
    json.dump(wspec, open(spec_path, "w"), indent=1)
    program = spec.get("program", "ds_worker.py")  # a fixture may name another rank program (same spec, phases)
    model_definition = spec.get("model_definition") or describe_ds_model()
    rc, dt, out, err = launch(ctx, W, program, ["--spec", spec_path, "--phase", "train"],
                              os.path.join(scratch, "logs", "train"))
    if rc:
        raise RuntimeError(f"training failed rc={rc}: {error_line(err)}\n{tail(err)}")
    tr = json.load(open(res_base + ".train.json"))
    tag = open(os.path.join(ckpt, "latest")).read().strip()
    resume = None
    if not a.no_resume_check:
        rcopy = os.path.join(scratch, "resume", "checkpoint")
        shutil.copytree(ckpt, rcopy, symlinks=True)
        rspec = dict(wspec, ckpt=rcopy)
        rspec_path = os.path.join(scratch, "spec_resume.json")
        json.dump(rspec, open(rspec_path, "w"), indent=1)
        rc, dt, out, err = launch(ctx, W, program, ["--spec", rspec_path, "--phase", "resume"],
                                  os.path.join(scratch, "logs", "resume"))
        resume = {"how": "fresh launch at the same W on a copy of checkpoint/: a model initialised with seed 4321, "
                         "deepspeed.initialize as in training, engine.load_checkpoint(dir) (tag from latest), then "
                         "2 steps on batches 4 and 5", "rc": rc}
        if rc == 0:
            rr = json.load(open(res_base + ".resume.json"))
            resume.update(losses_after=rr["losses_after"], losses_after_per_rank=rr["losses_after_per_rank"],
                          losses_equal=rr["losses_after"] == tr["losses_after"],
                          state_equal=state_equal(tr, rr), global_steps=rr["global_steps"],
                          client_state_keys=rr["client_state_keys"])
        else:
            resume["error"] = error_line(err)
            resume["stderr_tail"] = tail(err)
    roots = [run_tools(ctx, "checkpoint", "expected", "zero_to_fp32")]
    live_by_tag = {("checkpoint", tag): tr["live"]}
    module_by_tag = {("checkpoint", tag): tr["module"]}
    check_tools(fx, roots, live_by_tag, module_by_tag, {("checkpoint", tag): tr["model"]})
    cfg = spec["ds_config"]
    recipe = {
        **recipe_commands(program, W),
        "spec": dict(wspec, ckpt="<checkpoint dir>", result="<result path prefix>"),
        "model": model_definition,
        "init": "torch.manual_seed(1234) then TrickyNet(), on every rank (resume: seed 4321, then load_checkpoint)",
        "param_groups": ("two torch groups from models.tricky_param_groups: decay (dim>=2 or 'tri'; weight_decay "
                         "0.1, lr 1e-2) and no-decay (weight_decay 0.0, lr 5e-3); passed as model_parameters"
                         if wspec["groups"] == "two" else
                         "model.parameters() as one group; DeepSpeed's Muon splits it into 'muon-params' (2-D "
                         "weights but not names containing embed/lm_head) and 'adam-params' (the rest)"),
        "lr_scheduler": "client callable: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s+1)/3)), "
                        "passed as deepspeed.initialize(lr_scheduler=callable); its state is in model_states "
                        "'lr_scheduler'",
        "data": "step s: torch.Generator().manual_seed(1000+s); tokens = randint(0, 24, (2*W, 7)); rank r takes "
                "rows [2r, 2r+2); inputs tokens[:, :-1], labels tokens[:, 1:]; loss = mean cross-entropy",
        "steps": "4 steps (batches 0..3), save_checkpoint(checkpoint/) with default tag, then 2 more steps "
                 "(batches 4, 5) in the same process = losses_after",
        "tag": tag,
    }
    notes = [GATE_NOTE]
    if "BF16_Optimizer" in tr["optimizer_class"]:
        notes.append("DeepSpeed 0.19.8 still picks BF16_Optimizer for bf16 + ZeRO-1 + data_types.grad_accum_dtype "
                     "fp32 (engine._do_optimizer_sanity_check returns BFLOAT16; zero_optimization.compute_grad_norm "
                     "false would raise instead); files bf16_zero_pp_rank_*, as in 0.14.5")
    muon_layout = None
    if cfg.get("optimizer", {}).get("type") == "Muon":
        pg = tr["param_groups"]
        muon_layout = muon_facts(os.path.join(ckpt, tag), tr) if spec["stage"] < 3 else None
        notes.append("Muon: deepspeed.initialize tags every param use_muon (2-D and the name has neither 'embed' nor "
                     "'lm_head'); the engine splits the one incoming group into " +
                     ", ".join(f"{g.get('name')!r} (use_muon {g.get('use_muon')}: {g['params']})" for g in pg) +
                     ("; the Muon group's state is momentum_buffer only, covering the WHOLE params each rank's "
                      "partition touches (not a flat partition), the Adam group's exp_avg/exp_avg_sq/step"
                      if spec["stage"] < 3 else "; ZeRO-3: see live_state.group_state_rank0_view for each "
                      "sub-group's state keys and shapes"))
    base = {
        "kind": "deepspeed engine.save_checkpoint",
        "world_size": W, "zero_stage": spec["stage"], "dtype": spec["dtype"],
        "optimizer": {"ds_config_optimizer": cfg.get("optimizer"), "class": tr["optimizer_class"],
                      "basic_optimizer_class": tr["basic_optimizer_class"], "param_groups": tr["param_groups"],
                      "param_groups_given": tr["param_groups_given"],
                      "engine_param_groups": tr["engine_param_groups"], "lr_scheduler": tr["lr_scheduler_class"]},
        "data_types": tr["data_types"],
        "ds_config": cfg,
        "model": dict(tr["model"], definition=model_definition),
        "recipe": recipe,
        "training": {"losses": tr["losses"], "losses_per_rank": tr["losses_per_rank"],
                     "losses_after": tr["losses_after"], "losses_after_per_rank": tr["losses_after_per_rank"],
                     "global_steps": tr["global_steps"], "global_samples": tr["global_samples"],
                     "skipped_steps": tr["skipped_steps"], "adam_steps": tr["live"]["adam_steps"],
                     "lr_at_save": tr["lr_at_save"], "loss_scale_at_save": tr["loss_scale"],
                     "note": "losses: mean over ranks of each rank's micro-batch loss (fp32 arithmetic)"},
        "resume_check": resume,
        "checkpoint_tag": tag,
        "roots": roots,
        "live_state": {"tag": tag, **tr["live"]},
        "module_values": tr["module"],
        "file_facts": file_facts(os.path.join(ckpt, tag)),
        "muon_momentum_layout": muon_layout,
        "versions": tr["versions"],
        "notes": notes,
    }
    uni = roots[0]["converter"][-1]
    base["vs_0_14_5"] = vs_old(os.path.join(ckpt, tag), spec["old"],
                               os.path.join(fx, uni["output"]) if uni["ok"] else None) if spec.get("old") else None
    return base


def state_equal(saved, loaded):
    """Names whose sha256 differ between a save-time capture and a load-time capture ({"live", "module"} each: the
    resume check of every builder)."""
    bad = []
    for n, e in saved["live"]["params"].items():
        for k, r in e.items():
            if isinstance(r, dict) and "sha256" in r:
                got = loaded["live"]["params"].get(n, {}).get(k)
                if not got or got["sha256"] != r["sha256"]:
                    bad.append(f"{n}.{k}")
    for n, r in saved["module"]["params"].items():
        got = loaded["module"]["params"].get(n)
        if not got or got["sha256"] != r["sha256"]:
            bad.append(f"module.{n}")
    return {"equal": not bad, "differ": bad}


LAYOUT = {
    "checkpoint/ or run/": "the save dir (plain DeepSpeed) or the trainer's run dir, exactly as the library wrote "
                           "it, less DeepSpeed's own zero_to_fp32.py and zero_to_torch.py (another project's code: "
                           "removed_files keeps their sizes and digests)",
    "expected/[<root>/]<tag>_universal/, expected/[<root>/]latest_universal": "DeepSpeed 0.19.8's own "
        "ds_to_universal output for each tag of each root (<root> = the root's path below run/; absent when the "
        "converter failed: see roots[].converter[].attempts)",
    "zero_to_fp32/[<root>/][<tag>/]": "the root's zero_to_fp32.py output (pytorch_model.bin; safetensors/ with "
                                      "--safe_serialization); <tag>/ only for tags other than latest's",
    "MODERN.json": "this file: recipe, losses, live values (b64 = base64 of the little-endian bytes of the tensor, "
                   "C order; sha256 of the same bytes), tool outcomes and checks, file inventory",
}


# ------------------------------------------------------------------------------------------------------------------
def auto_notes(body):
    """Surprises, derived from the results (so they hold for this fixture as built)."""
    notes = []
    for r in body.get("roots", []):
        where = r["root"]
        for c in r["converter"]:
            at = c["attempts"]
            if at[0]["rc"] and c["ok"]:
                notes.append(f"{where}/{c['tag']}: ds_to_universal without --inject_missing_state fails "
                             f"({at[0]['error']}); with it, it converts")
            elif not c["ok"]:
                notes.append(f"{where}/{c['tag']}: ds_to_universal fails: " +
                             "; ".join(f"{'--inject_missing_state' if x['inject_missing_state'] else 'plain'}: "
                                       f"rc {x['rc']} {x.get('error')}" for x in at) + " (its partial output removed)")
            v = c.get("vs_live")
            if v:
                if not v["all_equal"]:
                    bad = [f"{n}.{k} ({x.get('why') or x.get('max_abs_diff')})" for n, pc in v["params"].items()
                           for k, x in pc.items() if not x.get("equal")]
                    notes.append(f"{where}/{c['tag']}: universal values differ from the live engine's: {bad}")
                other = v.get("other_param_dirs") or {}
                kinds = collections.defaultdict(list)
                for d, x in other.items():
                    kinds[x["what"]].append(d)
                if other:
                    notes.append(f"{where}/{c['tag']}: the converter also writes zero/<name>/fp32.pt for module "
                                 f"entries that are not trainable params: " +
                                 "; ".join(f"{k}: {sorted(ds)}" for k, ds in sorted(kinds.items())) +
                                 " (ZeRO-1/2 fallback over model_states['module'], which holds buffers and tied "
                                 "aliases too; no exp_avg/step there)")
                for d, x in other.items():
                    for k, y in x.items():
                        if k.startswith("vs_fp32_master_of_") and isinstance(y, dict) and not y.get("equal"):
                            notes.append(f"{where}/{c['tag']}: zero/{d}/fp32.pt (tied alias) holds the module's "
                                         f"{body.get('dtype')} value cast to fp32, not the fp32 master of "
                                         f"{k[len('vs_fp32_master_of_'):]} (max abs diff {y.get('max_abs_diff')})")
                if v.get("step_pt") is None and body.get("zero_stage") in (1, 2) and c["ok"]:
                    notes.append(f"{where}/{c['tag']}: no step.pt / exp_avg files in the universal output "
                                 f"(the optimizer never stepped: every step was skipped)")
        for z in r["zero_to_fp32"]:
            kind = "--safe_serialization" if z["safe_serialization"] else "pytorch_model.bin"
            if z["rc"]:
                notes.append(f"{where}/{z['tag']}: zero_to_fp32.py ({kind}) fails: {z.get('error')}")
            elif z.get("vs_live"):
                vl = z["vs_live"]
                if vl["missing"]:
                    notes.append(f"{where}/{z['tag']}: zero_to_fp32.py ({kind}) leaves out {len(vl['missing'])} "
                                 f"module entries: {vl['missing'][:6]}{' ...' if len(vl['missing']) > 6 else ''}")
                if not vl["all_equal"]:
                    notes.append(f"{where}/{z['tag']}: zero_to_fp32.py ({kind}) values differ from the live "
                                 f"engine's: {[k for k, x in vl['values'].items() if not x['equal']]}")
    ls = body.get("live_state") or {}
    for key, live in ([("", ls)] if "params" in ls else list(ls.items())):
        un = (live or {}).get("ds_hp_optim_state_unlinked")
        if un:
            notes.append(f"{key + ': ' if key else ''}DeepSpeed 0.19.8 never links the optimizer-state fragments of "
                         f"{len(un)} params ({un[:5]}{' ...' if len(un) > 5 else ''}): ZeRO-1/2 _optimizer_step runs "
                         f"per param group and calls _lazy_init_hp_params_optimizer_state after the FIRST group's "
                         f"step, when the later groups have no state yet, and sets the done-flag; so "
                         f"deepspeed.utils.safe_get_full_optimizer_state raises 'exp_avg not found in optimizer state "
                         f"fragment' for every param outside group 0 (on the ranks that hold a piece, while the "
                         f"others enter the all_reduce: a hang). The live values here read the flat state directly")
    t = body.get("training", {})
    if t.get("skipped_steps"):
        notes.append(f"fp16 loss scaler skipped {t['skipped_steps']} of {t['global_steps']} steps (overflow): "
                     f"global_steps {t['global_steps']} but the optimizer step is {t.get('adam_steps')}")
    rc = body.get("resume_check")
    if rc and (rc.get("rc") or rc.get("losses_equal") is False or
               (isinstance(rc.get("state_equal"), dict) and rc["state_equal"].get("equal") is False)):
        notes.append(f"resume check: rc {rc.get('rc')}, losses_equal {rc.get('losses_equal')}, "
                     f"state_equal {rc.get('state_equal')}")
    return notes


def build(name, a):
    spec = FIXTURES[name]
    fx = os.path.abspath(os.path.join(a.out, name))
    scratch = os.path.join(SCRATCH, name)
    shutil.rmtree(fx, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(fx)
    os.makedirs(os.path.join(scratch, "logs"))
    ctx = Ctx(name, fx, scratch)
    t0 = time.time()
    print(f"== {name}", flush=True)
    builder = {"ds": build_ds}
    sys.path.insert(0, MODERN)
    import builders_runs  # noqa: E402 - tests/tools/modern/builders_runs.py
    builder.update(builders_runs.BUILDERS)
    if "builder" in spec:  # a fixture that brings its own builder (called like builders_runs' ones)
        body = spec["builder"](ctx, spec, a, sys.modules[__name__])
    else:
        body = builder[spec["kind"]](ctx, spec, a) if spec["kind"] == "ds" else \
            builder[spec["kind"]](ctx, spec, a, sys.modules[__name__])
    mj = {"name": name, "generator": "tests/tools/make_modern_fixtures.py",
          "generator_command": f"tests/ecosystem/run.sh python3 tests/tools/make_modern_fixtures.py --only {name}",
          "platform": f"{platform.platform()}; Debian sid root (tests/ecosystem), CPU only, DS_ACCELERATOR=cpu, "
                      f"torch.distributed gloo (harness shims: 16-bit collectives as fp32, no shm comm op, fp16 reported on any CPU)",
          "layout": LAYOUT, "notes": None, **body}
    mj["commands"] = ctx.commands
    mj["seconds"] = round(time.time() - t0, 1)
    mj["removed_files"] = drop_library_scripts(fx)
    mj["files"] = inventory(fx, fx)
    odd = [f"{f['path']} {f['mode']}" for f in mj["files"] if f["mode"] not in ("0o644", "0o744")]
    mj["notes"] = ctx.notes + body.get("notes", []) + auto_notes(body) + (
        [f"file modes other than 0644/0744: {odd} (safetensors 0.8 writes its files with mode 0600)"] if odd else [])
    mj["total_bytes"] = sum(f["size"] for f in mj["files"])
    import common  # tests/tools/modern
    with open(os.path.join(fx, "MODERN.json"), "w") as f:
        json.dump(common.finite(mj), f, indent=1, default=str, allow_nan=False)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(fx, p)) for p in list_files(fx))
    print(f"   {name}: {size} bytes, {mj['seconds']} s", flush=True)
    return mj


def write_index(out):
    """OUT/README.md: what each fixture holds, from the MODERN.json files present."""
    rows = []
    for mjp in sorted(glob.glob(os.path.join(out, "*", "MODERN.json"))):
        d = json.load(open(mjp))
        conv, z2f = [], []
        for r in d.get("roots", []):
            for c in r["converter"]:
                att = c["attempts"]
                conv.append(("ok" if not att[0]["rc"] else "ok with --inject_missing_state") if c["ok"] else
                            f"FAILS ({att[-1].get('error')})")
            for z in r["zero_to_fp32"]:
                if not z["safe_serialization"]:
                    miss = (z.get("vs_live") or {}).get("missing")
                    z2f.append(f"FAILS ({z.get('error')})" if z["rc"] else
                               ("ok" + (f", leaves out {len(miss)} entries" if miss else "")))
        size = sum(f["size"] for f in d["files"]) + os.path.getsize(mjp)
        rows.append(f"| {d['name']} | {d['kind']} | {d['world_size']} | {d['zero_stage']} | {d['dtype']} | "
                    f"{size // 1024} KiB | {'; '.join(sorted(set(conv)))} | {'; '.join(sorted(set(z2f)))} |")
    text = f"""# Modern fixtures: DeepSpeed 0.19.8 (torch 2.14, transformers 5.12, accelerate 1.14, Lightning 2.6, PEFT 0.21)

Made by `tests/tools/make_modern_fixtures.py`, run inside the modern root (tests/ecosystem):

    tests/ecosystem/run.sh python3 tests/tools/make_modern_fixtures.py [--only NAME ...]

Each directory: `checkpoint/` (plain DeepSpeed save dir) or `run/` (a trainer's run dir), exactly as the library
wrote it, less the `zero_to_fp32.py` and `zero_to_torch.py` DeepSpeed copies into each save dir (another project's
code; `removed_files` in MODERN.json keeps their sizes and digests); `expected/` = DeepSpeed 0.19.8's own `ds_to_universal` output per tag; `zero_to_fp32/` = the save dir's
own `zero_to_fp32.py` output; `MODERN.json` = recipe, versions, losses (and the 2 losses after the checkpoint),
the live fp32 masters and optimizer state at save time (base64 little-endian bytes + sha256), every command with
its rc, the tools' outcomes checked against the live values, file inventory (size, sha256, mode as written; git
keeps only the executable bit) and `notes` (the surprises). Rerunning gives the same losses and tensor values, and
byte-identical files except where DeepSpeed saves uninitialised memory (ZeRO-3 flat-partition padding in optimizer
and some model-states files, and zero_to_fp32's output tensors, which are views of the padded storage) and where a
file records an absolute path (HF training_args.bin holds output_dir).

| fixture | kind | W | ZeRO | dtype | size | ds_to_universal | zero_to_fp32.py |
| --- | --- | --- | --- | --- | --- | --- | --- |
""" + "\n".join(rows) + "\n"
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None, help="fixture names (default: all)")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "modern"))
    ap.add_argument("--no-resume-check", action="store_true")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for n, s in FIXTURES.items():
            print(n, s["kind"], f"W={s['W']}", f"stage={s['stage']}", s["dtype"])
        return 0
    names = a.only or list(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        raise SystemExit(f"unknown fixtures {unknown}; known: {list(FIXTURES)}")
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, MODERN)
    t0 = time.time()
    failed = []
    summary = []
    for n in names:
        try:
            mj = build(n, a)
            summary.append((n, mj["total_bytes"], mj["seconds"]))
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            failed.append((n, f"{type(e).__name__}: {e}"))
    write_index(a.out)
    print("\nsummary:")
    for n, b, s in summary:
        print(f"  {n:40s} {b:9d} bytes {s:7.1f} s")
    total = sum(os.path.getsize(os.path.join(a.out, p)) for p in list_files(a.out))
    print(f"  total under {a.out}: {total} bytes; {time.time() - t0:.0f} s")
    for n, e in failed:
        print(f"  FAILED {n}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
