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
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the repository
from checks_deepspeed import DS_FIXTURES, MUON_FIXTURES, ds_check, ns_for  # noqa: E402
from checks_trainers import (
    HF_FIXTURES, accel_check, from_pretrained_check, hf_check, lightning_check, new_tag_weights_visible)  # noqa: E402
from driver_support import Ctx, MODERN, batch_split, facts_of  # noqa: E402


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
