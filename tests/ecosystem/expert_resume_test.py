#!/usr/bin/python3
"""DeepSpeed 0.19.8 resumes its expert-parallel checkpoints (tests/data/modern/moe_* and autoep_*, ZeRO-1/2/3) through
ucfs, on CPU ranks inside the modern root, with each fixture's own resume program (tests/tools/modern/moe_worker.py
or autoep_worker.py --phase resume: the model built anew with another seed, deepspeed.initialize with the recipe's
ds_config, engine.load_checkpoint(MNT)):
  - reshard view: `ucfs mount --world-size W' CKPT MNT`, W' = EP x D' (EP kept; D' = 1 and 3, or 1 and 2 for a
    fixture saved at D = 3), loaded natively on W' ranks;
  - universal view: `ucfs mount CKPT MNT` with "checkpoint": {"load_universal": true}: AutoEP at (EP', D') = (2, 1),
    (2, 3), (4, 1) ((3, 2) in place of (4, 1) at 6 experts): its universal files hold every expert by global id, any EP'
    dividing E loads them (AutoEP itself refuses an EP' that does not divide E); native MoE
    at EP 2 and D' = 1, 3, and at EP' = 4 DeepSpeed must refuse (its universal loader cuts an expert file by the
    file's ep_num_experts, which for native MoE is the saved EP: src/design/expert-layouts.md section 4).
After each load: every fp32 master and Adam moment (gathered over EP and EDP as the worker does for live_state) and
every module param bit-equal to the values the training process held at save time (MODERN.json live_state and
module_values); global_steps as saved; the recipe's next steps run with finite losses (their values differ from the
saving run's where W' differs: the global batch is 2 x W' rows; at the saved EP and W they must be its own).

usage: expert_resume_test.py UCFS_BIN [--full] [FIXTURE...]   (default: the CI subset, 2 or 3 loads per fixture)
       expert_resume_test.py --source-dir-for-testing [--full] [FIXTURE...]
The second form checks this harness without ucfs: the same resume code pointed at (a) the fixture's own checkpoint/
at its saved W (DeepSpeed's native load of its own files: the reshard view at D' = D must equal it) and (b) for
AutoEP, DeepSpeed's own converter output expected/ with load_universal at every (EP', D') above; native MoE has no
converter output (ds_to_universal fails on it), so there it reads the reference layout of the design note's section
4, built from the rank files by tests/tools/modern/moe_reference_universal.py.
Needs root (FUSE) and the modern root (tests/ecosystem/setup.sh). Ends with "N passed, M failed".
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

sys.path.insert(0, HERE)
from live_values import differing  # noqa: E402

MODERN = os.path.join(REPO, "tests", "data", "modern")
WORKERS = os.path.join(REPO, "tests", "tools", "modern")
FIXTURES = ["autoep_z2_fp32_e2d2", "autoep_z1_fp32_e2d2", "autoep_z2_fp32_e2d3", "autoep_z2_fp32_e2d2_dbe",
            "moe_z2_fp32_e2d2", "moe_z1_fp32_e2d2", "moe_z2_fp32_e2d3", "autoep_z3_fp32_e2d2"]
AUTOEP_UNIVERSAL = [(2, 1), (2, 3), (4, 1)]  # (EP', D')
AUTOEP_UNIVERSAL_6 = [(2, 1), (2, 3), (3, 2)]  # 6 experts (autoep_z2_fp32_e2d3): AutoEP refuses EP' = 4
MOE_UNIVERSAL = [(2, 1), (2, 3), (4, 1)]  # EP' = 4: DeepSpeed must refuse
# The CI subset: each fixture once through each view, both directions of D' and every universal (EP', D') covered
# somewhere, the native refusal once.
CI = {"autoep_z2_fp32_e2d2": ([1], [(4, 1)]), "autoep_z1_fp32_e2d2": ([3], [(2, 3)]),
      "autoep_z2_fp32_e2d3": ([1], [(2, 1)]), "autoep_z2_fp32_e2d2_dbe": ([3], [(4, 1)]),
      "moe_z2_fp32_e2d2": ([3], [(2, 1), (4, 1)]), "moe_z1_fp32_e2d2": ([1], [(2, 3)]),
      "moe_z2_fp32_e2d3": ([1], [(2, 3)]), "autoep_z3_fp32_e2d2": ([1, 3], [(2, 3)])}


def is_autoep(name):
    return name.startswith("autoep_")


def reshard_ds(facts):
    """D' of the reshard view: 1 and 3 around the saved D, or 1 and 2 when D is 3 (D' = D is the source itself)."""
    d = facts["world_size"] // facts["ep_size"]
    return [1, 3] if d != 3 else [1, 2]


def counted(facts):
    """How many tensors a load is judged on (masters and moments, module params)."""
    live = sum(len(s) for s in facts["live_state"]["params"].values())
    return live, len(facts["module_values"]["params"])


def error_line(text):
    """The last exception line of a traceback."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln.strip()) for ln in (text or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception)\b", ln):
            return ln[:400]
    return lines[-1][:400] if lines else ""


def run_worker(name, facts, ckpt, ep, d, universal, scratch, mounts=""):
    """The fixture's resume program on EP x D ranks, loading ckpt: (completed process, result path)."""
    spec = json.loads(json.dumps(facts["recipe"]["spec"]))
    spec.update(ckpt=ckpt, result=os.path.join(scratch, "result"))
    cfg = spec["ds_config"]
    if is_autoep(name):
        cfg["expert_parallel"]["autoep_size"] = ep
    else:
        spec["ep_size"] = ep
    if universal:
        cfg["checkpoint"] = {"load_universal": True}
    spec_path = os.path.join(scratch, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    worker = "autoep_worker.py" if is_autoep(name) else "moe_worker.py"
    env = dict(os.environ, UCFS_ECOSYSTEM_MOUNTS=mounts, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [os.path.join(HERE, "run.sh"), "python3", os.path.join(HERE, "harness", "launch.py"),
           "-n", str(ep * d), "--timeout", "600", "--", os.path.join(WORKERS, worker),
           "--spec", spec_path, "--phase", "resume"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    return r, spec["result"] + ".resume.json"


def check_loaded(facts, r, result, ep, d):
    assert r.returncode == 0, r.stderr[-3000:]
    with open(result) as f:
        loaded = json.load(f)
    assert loaded["world_size"] == ep * d and loaded["ep_world_size"] == ep, loaded["rank_layout"]
    bad = differing(facts, loaded)
    assert not bad, f"{len(bad)} values differ from the live ones at save time: {bad[:8]}"
    assert loaded["global_steps"] == facts["training"]["global_steps"], loaded["global_steps"]
    after = loaded["losses_after"]
    assert all(math.isfinite(x) for x in after), after
    same = after == facts["training"]["losses_after"]
    if ep * d == facts["world_size"] and ep == facts["ep_size"]:
        # the saving run's topology and global batch: its next losses, to the bit
        assert same, (after, facts["training"]["losses_after"])
    live, mod = counted(facts)
    also = " (the saving run's, exactly)" if same else ""
    print(f"   {live} masters and moments, {mod} module params bit-equal; global_steps {loaded['global_steps']}; "
          f"next losses {[round(x, 4) for x in after]}{also}")


def check_refused(r, result):
    """DeepSpeed must stop with an error of its own (not a hang: launch.py's timeout gives another message)."""
    assert r.returncode != 0, "DeepSpeed loaded the native MoE universal checkpoint at another EP"
    assert not os.path.exists(result), "a result was written"
    msg = error_line(r.stderr)
    assert "timeout" not in msg.lower() and "timed out" not in msg.lower(), msg
    print(f"   refused: {msg}")


def one(name, facts, src, ep, d, universal, results, ucfs=None, label_from="the view"):
    """Mounts src (unless testing on a plain directory), runs the resume, checks it."""
    native = not is_autoep(name)
    refuse = universal and native and ep != facts["ep_size"]
    how = (f"resumes at EP {ep} x D {d} from {label_from} (load_universal)" if universal else
           f"resumes natively at EP {ep} x D {d} from {label_from}")
    label = f"{name}: DeepSpeed 0.19.8 " + (f"refuses the native MoE universal checkpoint at EP {ep}" if refuse
                                            else how)
    with tempfile.TemporaryDirectory(prefix="ucfs_expert_resume_") as scratch:
        m = None
        try:
            if ucfs is not None:
                view = () if universal else ("--world-size", str(ep * d))
                m = mount_testing.Mount(ucfs, src, "latest", "--no-cache", *view)
                ckpt, mounts = m.dir, m.dir
            else:
                ckpt, mounts = os.path.join(scratch, "ckpt"), ""
                shutil.copytree(src, ckpt, symlinks=True)  # a copy: a load must not touch the fixture
            r, result = run_worker(name, facts, ckpt, ep, d, universal, scratch, mounts)
            if refuse:
                results.check(label, lambda: check_refused(r, result))
            else:
                results.check(label + ": every master, moment and module param bit-equal to the live ones, the "
                              "next steps run", lambda: check_loaded(facts, r, result, ep, d))
        finally:
            if m is not None:
                m.close()


def reference_universal(fx, out):
    """tests/tools/modern/moe_reference_universal.py's layout of fixture fx in out (inside the modern root)."""
    cmd = [os.path.join(HERE, "run.sh"), "python3", os.path.join(WORKERS, "moe_reference_universal.py"),
           os.path.join(fx, "checkpoint"), out]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if r.returncode:
        raise RuntimeError(f"moe_reference_universal.py failed: {r.stderr[-2000:]}")
    return out


def main():
    args = sys.argv[1:]
    full = "--full" in args
    testing = "--source-dir-for-testing" in args
    args = [a for a in args if a not in ("--full", "--source-dir-for-testing")]
    if not testing and not args:
        print(__doc__)
        return 2
    ucfs = None if testing else os.path.abspath(args.pop(0))
    only = set(args)
    unknown = only - set(FIXTURES)
    if unknown:
        print(f"unknown fixtures {sorted(unknown)}; known: {FIXTURES}")
        return 2
    results = Results()
    skipped = []
    for name in FIXTURES:
        if only and name not in only:
            continue
        fx = os.path.join(MODERN, name)
        with open(os.path.join(fx, "MODERN.json")) as f:
            facts = json.load(f)
        ep, d0 = facts["ep_size"], facts["world_size"] // facts["ep_size"]
        if full or testing:
            ds, unis = reshard_ds(facts), MOE_UNIVERSAL
            if is_autoep(name):
                experts = facts["recipe"]["spec"]["mixtral"]["num_local_experts"]
                unis = AUTOEP_UNIVERSAL if experts % 4 == 0 else AUTOEP_UNIVERSAL_6
        else:
            ds, unis = CI[name]
        src = os.path.join(fx, "checkpoint")
        if testing:
            # (a) DeepSpeed's native load of its own files at the saved W: what the reshard view at D' = D serves
            one(name, facts, src, ep, d0, False, results, label_from="its own checkpoint/ (testing)")
        else:
            for d in ds:
                one(name, facts, src, ep, d, False, results, ucfs)
        with tempfile.TemporaryDirectory(prefix="ucfs_expert_ref_") as ref:
            for uep, ud in unis:
                if not testing:
                    one(name, facts, src, uep, ud, True, results, ucfs)
                elif os.path.exists(os.path.join(fx, "expected", "latest_universal")):
                    # (b) DeepSpeed's own converter output, which the universal view must equal
                    one(name, facts, os.path.join(fx, "expected"), uep, ud, True, results,
                        label_from="ds_to_universal's expected/ (testing)")
                elif not is_autoep(name):
                    if not os.path.exists(os.path.join(ref, "latest_universal")):
                        reference_universal(fx, ref)
                    one(name, facts, ref, uep, ud, True, results,
                        label_from="the reference layout of moe_reference_universal.py (testing)")
                else:
                    skipped.append(f"{name} universal EP {uep} x D {ud} (no converter output)")
    for s in skipped:
        print(f"skipped: {s}")
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
