#!/usr/bin/python3
"""DeepSpeed 0.19.8 resumes its AutoTP checkpoints (tests/data/modern/autotp_*) through ucfs at a new
data-parallel size D', the tensor-parallel size T kept: `ucfs mount --world-size D'` shows the T x D' rank files
DeepSpeed would have saved, and an unmodified engine.load_checkpoint reads them natively.

For each fixture and D' (D' = 1 and 3 around the saved D = 2), on T x D' ranks inside the modern root, the
fixture's own resume program (tests/tools/modern/autotp_worker.py --phase resume: the model built anew with another
seed, AutoTP sharding it at T, deepspeed.initialize with the recipe's ds_config, engine.load_checkpoint(MNT)), then:
  - every fp32 master and Adam moment, gathered whole over TP and DP, and every module param, bit for bit against
    the values the training process held at save time (MODERN.json live_state and module_values);
  - global_steps as saved;
  - the recipe's next steps run (losses finite; their values differ from the saving run's: its global batch was
    2 x D rows).
The same from the universal view with "checkpoint": {"load_universal": true}: DeepSpeed 0.19.8's universal loader
reading the files ucfs lays out from the affine map, at a new D, and at a new T where the model's heads split whole
(autotp_kv4_z1_fp32_t2d2, saved at T = 2, loaded at T = 4).
usage: autotp_resume_test.py UCFS_BIN [--full] [FIXTURE...]   (default: the CI subset, one D' per fixture)
Needs root (FUSE) and the modern root (tests/ecosystem/setup.sh). Ends with "N passed, M failed".
"""
import json
import math
import os
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
FIXTURES = ["autotp_z1_fp32_t2d2", "autotp_z2_bf16_t2d2", "autotp_z3_fp32_t2d2", "autotp_uneven_z1_fp32_t2d2",
            "autotp_kv4_z1_fp32_t2d2"]
# A new T through the universal view: (T', D') where the model's heads split whole (4 KV heads at T' = 4; the
# other fixtures' 2 or 3 KV heads do not split 4 ways, and the program needs TP groups, so T' > 1).
NEW_T = {"autotp_kv4_z1_fp32_t2d2": [(4, 1)]}
# The CI subset: each fixture at one D', both directions covered.
CI = {"autotp_z1_fp32_t2d2": [3], "autotp_z2_bf16_t2d2": [1], "autotp_z3_fp32_t2d2": [3],
      "autotp_uneven_z1_fp32_t2d2": [1], "autotp_kv4_z1_fp32_t2d2": [3]}


def resume(ucfs, name, facts, d, results, new_tp=None):
    src = os.path.join(MODERN, name, "checkpoint")
    tp = new_tp or facts["tp_size"]
    label = (f"{name}: DeepSpeed 0.19.8 resumes natively from the view at T={tp} x D={d}" if new_tp is None else
             f"{name}: DeepSpeed 0.19.8 resumes at T={tp} x D={d} from the universal view (load_universal)")
    with tempfile.TemporaryDirectory() as scratch:
        view = ("--world-size", str(d)) if new_tp is None else ()
        m = mount_testing.Mount(ucfs, src, "latest", "--no-cache", *view)
        try:
            spec = dict(facts["recipe"]["spec"], ckpt=m.dir, result=os.path.join(scratch, "result"))
            if new_tp is not None:
                cfg = json.loads(json.dumps(spec["ds_config"]))
                cfg["tensor_parallel"] = {"autotp_size": new_tp}
                cfg["checkpoint"] = {"load_universal": True}
                spec["ds_config"] = cfg
            spec_path = os.path.join(scratch, "spec.json")
            json.dump(spec, open(spec_path, "w"))
            env = dict(os.environ, UCFS_ECOSYSTEM_MOUNTS=m.dir, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
            cmd = [os.path.join(HERE, "run.sh"), "python3", os.path.join(HERE, "harness", "launch.py"),
                   "-n", str(tp * d), "--timeout", "600", "--",
                   os.path.join(REPO, "tests", "tools", "modern", "autotp_worker.py"),
                   "--spec", spec_path, "--phase", "resume"]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)

            def loads_every_value_exact():
                assert r.returncode == 0, r.stderr[-3000:]
                loaded = json.load(open(spec["result"] + ".resume.json"))
                assert loaded["tp_world_size"] == tp and loaded["dp_world_size"] == d, loaded["rank_layout"]
                bad = differing(facts, loaded)
                assert not bad, f"{len(bad)} values differ from the live ones at save time: {bad[:8]}"
                assert loaded["global_steps"] == facts["training"]["global_steps"], loaded["global_steps"]
                assert all(math.isfinite(x) for x in loaded["losses_after"]), loaded["losses_after"]
            results.check(label + ": every master, moment and module param bit-equal to the live ones, "
                          "the next steps run", loads_every_value_exact)
        finally:
            m.close()


def main():
    args = sys.argv[1:]
    full = "--full" in args
    args = [a for a in args if a != "--full"]
    ucfs, only = os.path.abspath(args[0]), set(args[1:])
    results = Results()
    for name in FIXTURES:
        if only and name not in only:
            continue
        facts = json.load(open(os.path.join(MODERN, name, "MODERN.json")))
        for d in ([1, 3] if full else CI[name]):
            resume(ucfs, name, facts, d, results)
        # DeepSpeed's universal loader, from ucfs's universal view, at a new D, and at a new T where the
        # model's heads allow it (NEW_T).
        for d in ([1, 3] if full else [3]):
            resume(ucfs, name, facts, d, results, new_tp=facts["tp_size"])
        for t, d in NEW_T.get(name, []):
            resume(ucfs, name, facts, d, results, new_tp=t)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
