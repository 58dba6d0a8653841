#!/usr/bin/python3
"""Every view of ucfs over checkpoints written by DeepSpeed 0.19.8 on torch 2.14 (tests/data/modern, made by
tests/tools/make_modern_fixtures.py), against what DeepSpeed 0.19.8's own tools wrote of them.

For each fixture and each of its roots (MODERN.json "roots"), on the host:
  - the universal view with --crc holds exactly the files DeepSpeed 0.19.8's ds_to_universal.py wrote, byte for
    byte, wherever the converter succeeded (the attempt it needed: --inject_missing_state or not); where it
    failed (Muon), each param's files are its group's states by key, each the live value in MODERN.json;
  - inspect and verify succeed (every layout of these fixtures is served; the refused ones are the hostile corpus's,
    tests/hostile);
  - the reshard view at N = W - 1 (or 2 at W = 1) and W + 1 lists the rank files DeepSpeed writes at N;
then, inside the modern root (tests/ecosystem/run.sh, torch 2.14), harness/views_loads.py:
  - every file of the universal view loads with torch.load(weights_only=True) exactly where the converter's own
    file does, and equals it;
  - <tag>_fp32/pytorch_model.bin equals zero_to_fp32.py's output (keys, dtypes, shapes, values) wherever it ran;
  - model.safetensors loads with safetensors and holds the same tensors.

usage: modern_views_test.py UCFS_BIN [MODERN_DIR] [FIXTURE...]
Needs root (FUSE) and the modern root (tests/ecosystem/setup.sh). Ends with "N passed, M failed".
"""
import base64
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
import mount_testing  # noqa: E402
from mount_testing import Results, files_below, same_files  # noqa: E402

UCFS = os.path.abspath(sys.argv[1])
MODERN = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.join(REPO, "tests", "data", "modern")
ONLY = set(sys.argv[3:])
results = Results()
check = results.check


def ucfs(*args):
    return subprocess.run([UCFS, *args], capture_output=True, text=True)


def native_moe(facts):
    """Native DeepSpeed MoE (deepspeed.moe.layer.MoE): its universal files are per local name."""
    cfg = facts.get("ds_config") or {}
    return facts.get("ep_size", 1) > 1 and not (cfg.get("expert_parallel") or {}).get("autoep_size")


EXPERT = re.compile(r"^(.*\.deepspeed_moe\.experts\.deepspeed_experts\.)([0-9]+)(\..*)$")


def stacked_live_params(facts):
    """live_state's params as ucfs's universal view of native MoE holds them (src/design/expert-layouts.md §4):
    each local expert's name (deepspeed_experts.<l>, l < local experts) with every state the stack over EP ranks e
    of global expert e * local + l, [EP, *shape]; the other params as they are."""
    ep = facts["ep_size"]
    params = facts["live_state"]["params"]
    experts = {}  # (prefix, suffix) -> {global id: states}
    out = {}
    for name, states in params.items():
        m = EXPERT.match(name)
        if m:
            experts.setdefault((m.group(1), m.group(3)), {})[int(m.group(2))] = states
        else:
            out[name] = states
    for (prefix, suffix), by_id in experts.items():
        local = len(by_id) // ep
        for l in range(local):
            stacked = {}
            for state in by_id[l]:
                parts = [by_id[e * local + l][state] for e in range(ep)]
                raw = b"".join(base64.b64decode(p["b64"]) for p in parts)
                stacked[state] = {"dtype": parts[0]["dtype"], "shape": [ep] + parts[0]["shape"],
                                  "b64": base64.b64encode(raw).decode()}
            out[f"{prefix}{l}{suffix}"] = stacked
    return out


def frozen_names(facts):
    return [p["name"] for p in facts["model"]["params"] if not p["requires_grad"]]


def zero_to_fp32_of(base, root, tag):
    """zero_to_fp32.py's pytorch_model.bin of `tag`, where it ran and made one (it refuses BF16_Optimizer's)."""
    for z in root.get("zero_to_fp32", []):
        path = os.path.join(base, z.get("output_dir", ""), "pytorch_model.bin")
        if z.get("tag") == tag and z.get("rc") == 0 and not z.get("safe_serialization") and os.path.exists(path):
            yield path


def consolidated_loads(base, root, tag, facts, fp32):
    """The in-root checks of <tag>_fp32/ (directory `fp32`): pytorch_model.bin and model.safetensors hold
    zero_to_fp32.py's tensors wherever it ran; where it failed (AutoTP: it takes the 2 × 2 grid's 4 optimizer files
    for 4 data-parallel ranks; MoE: it reads layer_*_expert_* files as model states), the training process's own
    masters judge ours (native MoE's by the global names its expert files use)."""
    loads = []
    made = list(zero_to_fp32_of(base, root, tag))
    if not made and facts.get("live_state", {}).get("params"):
        for name in ("pytorch_model.bin", "model.safetensors"):
            loads.append({"ours": os.path.join(fp32, name), "theirs": os.path.join(base, "MODERN.json"),
                          "kind": "live"})
    for z2f in made:
        # zero_to_fp32.py drops the frozen params at ZeRO-1 (no frozen_param_shapes there): ucfs keeps them, from
        # the model states; the rest must be its bytes.
        extra = frozen_names(facts) if facts["zero_stage"] == 1 else []
        loads.append({"ours": os.path.join(fp32, "pytorch_model.bin"), "theirs": z2f, "kind": "fp32",
                      "ours_only": extra})
        loads.append({"ours": os.path.join(fp32, "model.safetensors"), "theirs": z2f, "kind": "safetensors",
                      "ours_only": extra})
    return loads


def converted(root):
    """(tag, output dir) of each tag the converter wrote."""
    return [(c["tag"], c["output"]) for c in root.get("converter", []) if c.get("ok")]


def unconverted(root):
    """The tags the converter failed on (Muon: KeyError 'exp_avg')."""
    done = {tag for tag, _ in converted(root)}
    return sorted({c["tag"] for c in root.get("converter", []) if c["tag"] not in done})


def live_checks(facts, universal, label):
    """Where no converter output exists: each param folder of the universal view holds fp32.pt, one <state>.pt per
    optimizer state of its group (named by its key: momentum_buffer for Muon's, exp_avg and exp_avg_sq for
    Adam's) and step.pt where the group keeps a step (not at ZeRO-3, as the converter's stage-3 path writes none),
    nothing else; each file's tensor is exactly the live value MODERN.json saved (views_loads.py "live_file")."""
    live = facts["live_state"]
    loads = []
    steps = live.get("adam_steps") or []
    params = stacked_live_params(facts) if native_moe(facts) else live["params"]
    # z2_muon_fp32_ws2's live_state could not read the momentum (its errors say why); muon_momentum_layout has it.
    momentum = (facts.get("muon_momentum_layout") or {}).get("values") or {}
    for param, states in params.items():
        states = dict(states)
        if param in momentum:
            states.setdefault("momentum_buffer", momentum[param])
        d = os.path.join(universal, "zero", param)
        want = {f"{s}.pt" for s in states}
        if "exp_avg" in states and facts["zero_stage"] < 3:
            want.add("step.pt")
            if steps:
                loads.append({"ours": os.path.join(d, "step.pt"), "kind": "live_file", "live": {"value": steps[0]}})
        got = set(os.listdir(d))
        if got != want:
            raise AssertionError(f"{label}: {d} holds {sorted(got)}, not {sorted(want)}")
        for state, value in states.items():
            # ZeRO-3's universal files are flat, as the converter's stage-3 path writes them.
            loads.append({"ours": os.path.join(d, f"{state}.pt"), "kind": "live_file",
                          "live": dict(value, flat=facts["zero_stage"] == 3)})
    return loads


def test_root(name, base, facts, root):
    src = os.path.join(base, root["root"])
    label = f"{name}/{root['root']}"

    def inspect_and_verify():
        for command in ("inspect", "verify"):
            r = ucfs(command, src)
            assert r.returncode == 0, (command, r.stdout, r.stderr)
    check(f"{label}: inspect and verify pass", inspect_and_verify)

    loads = []  # (ours, theirs, what) for the in-root checks
    mounts = []
    try:
        for tag, out in converted(root):
            m = mount_testing.Mount(UCFS, src, tag + "_universal", "--no-cache", "--crc", "--tag", tag)
            mounts.append(m)
            mine, ref = os.path.join(m.dir, tag + "_universal"), os.path.join(base, out)

            def same_bytes(mine=mine, ref=ref):
                same_files(mine, ref)
            check(f"{label}: {tag}_universal is DeepSpeed 0.19.8's converter output, byte for byte (--crc)",
                  same_bytes)
            for rel in files_below(ref):
                loads.append({"ours": os.path.join(mine, rel), "theirs": os.path.join(ref, rel), "kind": "universal"})
            loads.extend(consolidated_loads(base, root, tag, facts, os.path.join(m.dir, tag + "_fp32")))
        for tag in unconverted(root):
            if (facts.get("live_state") or {}).get("tag") != tag or root["root"] != "checkpoint":
                continue
            m = mount_testing.Mount(UCFS, src, tag + "_universal", "--no-cache", "--crc", "--tag", tag)
            mounts.append(m)
            mine = os.path.join(m.dir, tag + "_universal")
            live_loads = []

            def state_files(mine=mine, live_loads=live_loads):
                live_loads.extend(live_checks(facts, mine, label))
            check(f"{label}: {tag}_universal (no converter output) holds each param's fp32.pt and its group's "
                  "states by key", state_files)
            loads.extend(live_loads)
            loads.extend(consolidated_loads(base, root, tag, facts, os.path.join(m.dir, tag + "_fp32")))
        # Data-parallel ranks anew; tensor-parallel ranks kept (each writes its rank files at N).
        tp = facts.get("tp_size", 1)
        w = facts["world_size"] // tp
        ep = facts.get("ep_size", 1)  # experts keep their EP size: N = EP · D'
        d = w // ep
        for n in sorted({ep * (max(1, d - 1) if d > 1 else 2), ep * (d + 1)}):
            m = mount_testing.Mount(UCFS, src, "latest", "--no-cache", "--world-size", str(n))
            mounts.append(m)
            tag = root["latest"]

            def rank_files(m=m, n=n, tag=tag):
                names = sorted(os.listdir(os.path.join(m.dir, tag)))
                optim = [x for x in names if x.endswith("_optim_states.pt")]
                assert len(optim) == n * tp, names
                for x in names:
                    assert os.path.getsize(os.path.join(m.dir, tag, x)) > 0, x
            check(f"{label}: the view at N={n} lists {n} ranks' files", rank_files)
        if loads:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(loads, f)
                spec = f.name
            try:
                env = dict(os.environ, UCFS_ECOSYSTEM_MOUNTS=" ".join(m.dir for m in mounts))
                r = subprocess.run([os.path.join(HERE, "run.sh"), "python3",
                                    os.path.join(HERE, "harness", "views_loads.py"), spec],
                                   capture_output=True, text=True, env=env)
            finally:
                os.unlink(spec)

            def torch_214_loads():
                assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
            check(f"{label}: torch 2.14 loads every file as DeepSpeed's own (weights_only where theirs does), "
                  "pytorch_model.bin and model.safetensors equal zero_to_fp32's (or, where it failed, the live "
                  "masters)", torch_214_loads)
    finally:
        for m in mounts:
            m.close()


def test_run(name, base, facts):
    """The run directory mounted whole, as users mount it: every root found at its depth (Lightning's four levels
    down), each converted tag's universal view DeepSpeed's bytes again; writable at N, no extra view anywhere."""
    run = os.path.join(base, "run")
    roots = [r for r in facts.get("roots", []) if r["root"].startswith("run/")]
    if not roots:
        return
    first = os.path.relpath(os.path.join(base, roots[0]["root"]), run)
    m = mount_testing.Mount(UCFS, run, first, "--no-cache", "--crc")
    try:
        def every_root_served():
            for root in roots:
                rel = os.path.relpath(os.path.join(base, root["root"]), run)
                for tag, out in converted(root):
                    same_files(os.path.join(m.dir, rel, tag + "_universal"), os.path.join(base, out))
        check(f"{name}: the run mounted whole serves every root's universal view, DeepSpeed's bytes", every_root_served)
    finally:
        m.close()
    with tempfile.TemporaryDirectory() as upper:
        n = facts["world_size"] + 1
        m = mount_testing.Mount(UCFS, run, first, "--no-cache", "--world-size", str(n), "--upper",
                                os.path.join(upper, "u"))
        try:
            def writable_at_n():
                for dirpath, dirnames, _ in os.walk(m.dir):
                    extra = [d for d in dirnames if d.endswith(("_universal", "_fp32"))]
                    assert not extra, (dirpath, extra)
                for root in roots:
                    rel = os.path.relpath(os.path.join(base, root["root"]), run)
                    names = os.listdir(os.path.join(m.dir, rel, root["latest"]))
                    assert len([x for x in names if x.endswith("_optim_states.pt")]) == n, names
            check(f"{name}: the run mounted writable at N={n}: every root at N, no extra view", writable_at_n)
        finally:
            m.close()


def main():
    for name in sorted(os.listdir(MODERN)):
        base = os.path.join(MODERN, name)
        if ONLY and name not in ONLY:
            continue
        if not os.path.exists(os.path.join(base, "MODERN.json")):
            continue
        facts = json.load(open(os.path.join(base, "MODERN.json")))
        for root in facts.get("roots", []):
            test_root(name, base, facts, root)
        test_run(name, base, facts)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
