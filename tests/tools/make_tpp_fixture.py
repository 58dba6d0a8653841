#!/usr/bin/python3
"""Makes a tests/data/tp_fixtures/<name> fixture from a run of the TP/PP oracle (../shared/oracle/tpp).

A developer's tool, not run by the suite: it needs the oracle's environment (setup_env.sh) and a run trained
with `launch.py ... --worker tpp/tpp_worker.py -- --mode train ...` (its checkpoint/ and train.<rank>.json),
plus, where DeepSpeed's converter is right, its ds_to_universal.py output (--expected DIR). It writes:

  checkpoint/    the run's checkpoint, zero_to_fp32.py left out (as the shared fixtures leave it out)
  expected/      the correct universal checkpoint (--expected), with latest_universal
  ORACLE.json    in the shared fixtures' format (the fields ucfs's tests and load_check_tpp.py read):
                 topology, zero_stage, dtype, optimizer_class, universal_checkpoint_info_saved, params,
                 expected_full_values (from tpp_ckpt.py, the oracle's plain-torch reader, merged by the model's
                 true TP rules: independent of ucfs), native_overrides, native_lp_not_in_checkpoint, harness

usage: make_tpp_fixture.py --run RUN --dest DEST --kind plain|pipe [--no-model-axis] --stage S --dtype D
                           [--vocab V] [--swiglu] [--patterns always|megatron] [--expected DIR]
                           [--expected-model-states FROM]
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TPP = os.environ.get("TPP", os.path.join(HERE, "..", "..", "..", "shared", "oracle", "tpp"))
sys.path.insert(0, TPP)
sys.path.insert(0, os.path.dirname(TPP))
import tpp_ckpt  # noqa: E402
import tpp_models  # noqa: E402


def flat(t):
    return [float(x) for x in t.reshape(-1).double().tolist()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--dest", required=True)
    ap.add_argument("--kind", required=True, choices=["plain", "pipe"])
    ap.add_argument("--no-model-axis", action="store_true")
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("--dtype", required=True)
    ap.add_argument("--vocab", type=int, default=13)
    ap.add_argument("--swiglu", action="store_true")
    ap.add_argument("--patterns", default="always")
    ap.add_argument("--expected", help="a correct <tag>_universal directory (ds_to_universal.py's, where right)")
    ap.add_argument("--expected-model-states", help="tag dir whose model-state files expected/ holds instead")
    a = ap.parse_args()
    name = os.path.basename(os.path.normpath(a.dest))
    train = json.load(open(os.path.join(a.run, "train.0.json")))
    P, T, D = train["P"], train["T"], train["D"]
    if os.path.exists(a.dest):
        shutil.rmtree(a.dest)
    shutil.copytree(os.path.join(a.run, "checkpoint"), os.path.join(a.dest, "checkpoint"),
                    ignore=shutil.ignore_patterns("zero_to_fp32.py"))
    tag = tpp_ckpt.tag_of(os.path.join(a.run, "checkpoint"))
    if a.expected:
        out = os.path.join(a.dest, "expected", tag + "_universal")
        shutil.copytree(a.expected, out)
        if a.expected_model_states:
            for f in os.listdir(out):
                if f.endswith("_model_states.pt"):
                    shutil.copyfile(os.path.join(a.expected_model_states, f), os.path.join(out, f))
        with open(os.path.join(a.dest, "expected", "latest_universal"), "w") as f:
            f.write(tag + "_universal")
    ck = tpp_ckpt.TPPCheckpoint(os.path.join(a.run, "checkpoint", tag))
    table = tpp_models.param_table(a.vocab, a.swiglu, a.kind)
    rules = {n: v["tp"] for n, v in table.items()}
    merged = ck.merged(rules, a.vocab)
    params, full = {}, {s: {} for s in tpp_ckpt.STATES}
    full["step"] = {}
    for n, e in merged.items():
        holders = ck.holders(n)
        params[n] = {"full_shape": list(e["fp32"].shape), "tp": rules[n],
                     "local_shape_saved": list(ck.local_shapes[(holders[0], 0)][n]), "group": table[n]["group"],
                     "stages": holders, "step": float(e["step"])}
        for s in tpp_ckpt.STATES:
            full[s][n] = flat(e[s])
        full["step"][n] = float(e["step"])
    # A later stage's copy of a name that differs from the merged one (an unused tied position embedding):
    # what a native load at the saved P and T restores there.
    overrides, lp_missing = {}, []
    for (p, t), names in sorted(ck.local.items()):
        for n, e in names.items():
            if p == ck.holders(n)[0]:
                continue
            want = tpp_models.tp_slice(merged[n]["fp32"], rules[n], T, t, ck.local_shapes[(p, t)][n][0])
            if (e["fp32"].reshape(-1).double() == want.reshape(-1).double()).all():
                continue  # the tied copy the engine broadcasts from the first stage
            overrides.setdefault(f"{p},{t}", {})[n] = {s: flat(e[s]) for s in tpp_ckpt.STATES}
            if ck.lp.get((p, t), {}).get(n) is None:
                lp_missing.append(f"{p},{t}:{n}")
    lp_dtype = "torch.float32" if a.dtype == "fp32" else "torch.bfloat16"
    oracle = {
        "name": name, "format": "tpp-oracle-1",
        "what": "real DeepSpeed 0.14.5 TP/PP checkpoint made with ../shared/oracle/tpp by tests/tools/make_tpp_fixture.py",
        "topology": {"P": P, "T": T, "D": D, "world_size": P * T * D},
        "zero_stage": a.stage, "dtype": a.dtype, "optimizer_class": train["optimizer_class"],
        "universal_checkpoint_info_saved": train["universal_checkpoint_info"],
        "params": params, "expected_full_values": full,
        "native_overrides": overrides, "native_lp_not_in_checkpoint": lp_missing,
        "harness": {
            "kind": a.kind, "no_model_axis": a.no_model_axis, "vocab": a.vocab, "swiglu": a.swiglu,
            "stage": a.stage, "dtype": a.dtype, "patterns": a.patterns, "saved_topology": [P, T, D],
            "steps": 4, "extra": len(train["continuation_losses"]), "tag": tag,
            "optimizer_class": train["optimizer_class"], "lp_dtype": lp_dtype,
            "params": table, "expected_step": 4.0,
            "expected_scalars": {
                "global_steps": 4, "global_samples": 48, "skipped_steps": 0,
                "lr_scheduler": {"last_batch_iteration": 3}, "iteration": 4,
                "param_groups": [dict(weight_decay=wd, lr=0.003, betas=[0.9, 0.95], eps=1e-08, amsgrad=False,
                                      foreach=None, maximize=False, capturable=False) for wd in (0.1, 0.0)]},
            "reference": {"train_losses": train["train_losses"],
                          "continuation_losses": train["continuation_losses"],
                          "adam_step_after_continuation": 6.0},
            "loss_abs_tol": 1e-05 if a.dtype == "fp32" else 0.002,
            "z3_loader_default": "tp-fixed" if a.stage == 3 else None,
            "global_batch": 12, "gas": tpp_models.gas_of(a.kind),
        },
    }
    with open(os.path.join(a.dest, "ORACLE.json"), "w") as f:
        json.dump(oracle, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
