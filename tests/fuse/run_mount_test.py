#!/usr/bin/python3
"""A training run's directory through a real FUSE mount (the run view).

The fixtures laid out as an HF Trainer output_dir (checkpoint-4/ of a ZeRO-3
run, checkpoint-8/ of a ZeRO-2 one, each with the trainer's per-rank and
rank-0 files), an accelerate root with one tag per model, and an OpenRLHF
ckpt/_actor/: the mount shows the run as it is, every root with its views;
each view's files are byte for byte DeepSpeed's ds_to_universal output (with
--crc) and torch.load reads them; the consolidated weights equal
zero_to_fp32.py's; listing the run reads no rank file (no tag is opened in
the log); a tag with a missing rank file is not served; a directory with no
root anywhere below it is refused with an error saying what a root is; and
the source is never written.

usage: run_mount_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

deepspeed_stand_ins.install()
UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check


def tag_dir(fixture):
    return os.path.join(FIXTURES, fixture, "checkpoint", "global_step4")


def reference_universal(fixture):
    ds = os.path.join(FIXTURES, fixture, "checkpoint", "global_step4_universal")
    return ds if os.path.isdir(ds) else os.path.join(FIXTURES, fixture, "expected", "global_step4_universal")


def make_run(base):
    """The run directory, with what each framework writes (frameworks.md)."""
    run = os.path.join(base, "output_dir")
    layout = {
        # HF Trainer: checkpoint-N/ is the DeepSpeed root, tag global_stepN.
        "checkpoint-4": ("z3_bf16_ws2", "global_step4"),
        "checkpoint-8": ("z2_tricky_fp32_ws2", "global_step8"),
        # accelerate save_state: one tag per prepared model.
        "accelerate": ("z3_fp32_ws2", "pytorch_model"),
        # OpenRLHF PPO: the actor's root two levels down.
        "ckpt/_actor": ("z3_bf16_ws3", "global_step2"),
    }
    for root, (fixture, tag) in layout.items():
        shutil.copytree(tag_dir(fixture), os.path.join(run, root, tag))
        with open(os.path.join(run, root, "latest"), "w") as f:
            f.write(tag)
    shutil.copytree(tag_dir("z3_fp32_ws3"), os.path.join(run, "accelerate", "pytorch_model_1"))
    for r in range(2):
        with open(os.path.join(run, "checkpoint-4", f"rng_state_{r}.pth"), "wb") as f:
            torch.save({"rank": r}, f)
    for name in ("config.json", "trainer_state.json"):
        with open(os.path.join(run, "checkpoint-4", name), "w") as f:
            f.write("{}")
    os.makedirs(os.path.join(run, "runs"))
    with open(os.path.join(run, "runs", "events.out"), "w") as f:
        f.write("tensorboard")
    return run, layout


def files_below(d):
    out = {}
    for dirpath, _, names in os.walk(d):
        for n in names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, d)] = p
    return out


def test_run(base):
    run, layout = make_run(base)
    before = mount_testing.tree_sha256(run)
    m = mount_testing.Mount(UCFS, run, "checkpoint-4", "--no-cache", "--crc")
    try:
        def shows_the_run():
            assert sorted(os.listdir(m.dir)) == ["accelerate", "checkpoint-4", "checkpoint-8", "ckpt", "runs"]
            assert sorted(os.listdir(os.path.join(m.dir, "checkpoint-4"))) == [
                "config.json", "global_step4", "global_step4_fp32", "global_step4_universal", "latest",
                "latest_universal", "model.safetensors", "rng_state_0.pth", "rng_state_1.pth",
                "trainer_state.json"]
            assert sorted(os.listdir(os.path.join(m.dir, "accelerate"))) == [
                "latest", "latest_universal", "pytorch_model", "pytorch_model_1", "pytorch_model_1_fp32",
                "pytorch_model_1_universal", "pytorch_model_fp32", "pytorch_model_universal"]
            assert sorted(os.listdir(os.path.join(m.dir, "ckpt", "_actor"))) == [
                "global_step2", "global_step2_fp32", "global_step2_universal", "latest", "latest_universal"]
            with open(os.path.join(m.dir, "accelerate", "latest_universal")) as f:
                assert f.read() == "pytorch_model_universal"
            with open(os.path.join(m.dir, "runs", "events.out")) as f:
                assert f.read() == "tensorboard"
            assert torch.load(os.path.join(m.dir, "checkpoint-4", "rng_state_1.pth")) == {"rank": 1}
        check("the run shows as it is, every root with its views", shows_the_run)

        def listing_opens_no_tag():
            for dirpath, dirnames, _ in os.walk(m.dir):
                # stat of everything at the roots' level, nothing inside a view
                dirnames[:] = [d for d in dirnames if not d.endswith(("_universal", "_fp32"))]
            for root in layout:
                for name in os.listdir(os.path.join(m.dir, root)):
                    os.stat(os.path.join(m.dir, root, name))
            # Only checkpoint-4's latest tag: its config.json wants model.safetensors,
            # whose names depend on its size.
            opened = [line for line in m.log_text().splitlines() if " opened (" in line]
            assert len(opened) == 1 and "checkpoint-4: tag global_step4 opened" in opened[0], opened
        check("listing the whole run and stat of every view opens no tag but the one HF weights need",
              listing_opens_no_tag)

        for root, (fixture, tag) in sorted(layout.items()):
            def universal_is_deepspeeds(root=root, fixture=fixture, tag=tag):
                ours = files_below(os.path.join(m.dir, root, tag + "_universal"))
                theirs = files_below(reference_universal(fixture))
                assert sorted(ours) == sorted(theirs), (sorted(ours), sorted(theirs))
                for rel, path in ours.items():
                    with open(path, "rb") as a, open(theirs[rel], "rb") as b:
                        assert a.read() == b.read(), rel
                    if rel.endswith("/fp32.pt"):
                        t = torch.load(path)
                        assert isinstance(t, (torch.Tensor, dict)), rel
            check(f"{root}/{tag}_universal is byte for byte ds_to_universal's ({fixture})",
                  universal_is_deepspeeds)

            if os.path.isdir(os.path.join(FIXTURES, fixture, "zero_to_fp32")):
                def weights_are_zero_to_fp32s(root=root, fixture=fixture, tag=tag):
                    want = torch.load(os.path.join(FIXTURES, fixture, "zero_to_fp32", "pytorch_model.bin"))
                    got = torch.load(os.path.join(m.dir, root, tag + "_fp32", "pytorch_model.bin"))
                    assert list(got) == list(want)
                    for k, t in want.items():
                        assert got[k].dtype == t.dtype and torch.equal(got[k], t), k
                check(f"{root}/{tag}_fp32/pytorch_model.bin equals zero_to_fp32's ({fixture})",
                      weights_are_zero_to_fp32s)

        def each_tag_opened_once():
            text = m.log_text()
            for root, (_, tag) in layout.items():
                assert text.count(f"{root}: tag {tag} opened") == 1, (root, tag, text)
        check("each tag looked into was opened once", each_tag_opened_once)
    finally:
        m.close()
    def source_unchanged():
        assert mount_testing.tree_sha256(run) == before, "the run directory changed"
    check("the source is unchanged", source_unchanged)

    # A tag missing a rank file is not served; its root's other tags are.
    os.remove(os.path.join(run, "accelerate", "pytorch_model_1", "zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    # A root whose `latest` names a tag that is not there (deleted by rotation).
    shutil.copytree(tag_dir("z3_fp32_ws2"), os.path.join(run, "stale", "global_step4"))
    with open(os.path.join(run, "stale", "latest"), "w") as f:
        f.write("global_step9")
    m = mount_testing.Mount(UCFS, run, "checkpoint-4", "--no-cache")
    try:
        def stale_latest_said():
            names = sorted(os.listdir(os.path.join(m.dir, "stale")))
            assert names == ["global_step4", "global_step4_fp32", "global_step4_universal", "latest"], names
            assert "stale/latest names global_step9, which is not a tag here" in m.log_text(), m.log_text()
        check("a latest naming an absent tag is said; the root's tags are still served", stale_latest_said)

        def incomplete_not_served():
            names = sorted(os.listdir(os.path.join(m.dir, "accelerate")))
            assert "pytorch_model_1_universal" not in names and "pytorch_model_universal" in names, names
            assert "zero_pp_rank_2_mp_rank_00_optim_states.pt: missing" in m.log_text(), m.log_text()
        check("a tag with a missing rank file is not served, and the file is named", incomplete_not_served)
    finally:
        m.close()

    def refuses_what_holds_no_root():
        empty = os.path.join(base, "no_checkpoints")
        os.makedirs(os.path.join(empty, "logs"))
        target = tempfile.mkdtemp(prefix="ucfs_mnt_")
        try:
            p = subprocess.run([UCFS, "mount", "-f", empty, target], capture_output=True, text=True, timeout=30)
        finally:
            os.rmdir(target)
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert "no DeepSpeed checkpoint in it" in p.stderr and "`latest`" in p.stderr, p.stderr
    check("a directory with no checkpoint below it is refused, saying what a root is", refuses_what_holds_no_root)

    def export_of_a_run():
        out = os.path.join(base, "exported")
        p = subprocess.run([UCFS, "export", "--no-cache", "--crc", run, out], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        for root, (fixture, tag) in layout.items():
            ours = files_below(os.path.join(out, root, tag + "_universal"))
            theirs = files_below(reference_universal(fixture))
            assert sorted(ours) == sorted(theirs), (root, sorted(ours)[:3], sorted(theirs)[:3])
            for rel, path in ours.items():
                with open(path, "rb") as a, open(theirs[rel], "rb") as b:
                    assert a.read() == b.read(), (root, rel)
        with open(os.path.join(out, "accelerate", "latest_universal")) as f:
            assert f.read() == "pytorch_model_universal"
        assert not os.path.exists(os.path.join(out, "runs")), "export wrote the run's own files"
    check("export of a run writes every root's universal output at its path, ds_to_universal's bytes",
          export_of_a_run)

    def export_of_a_run_at_n():
        out = os.path.join(base, "exported3")
        p = subprocess.run([UCFS, "export", "--no-cache", "--world-size", "3", run, out], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        ck = sorted(os.listdir(os.path.join(out, "checkpoint-4")))
        assert ck == ["config.json", "global_step4", "latest", "model.safetensors", "rng_state_0.pth",
                      "rng_state_1.pth", "rng_state_2.pth", "trainer_state.json"], ck
        tag = sorted(os.listdir(os.path.join(out, "checkpoint-4", "global_step4")))
        assert len([t for t in tag if t.endswith("optim_states.pt")]) == 3, tag
        sd = torch.load(os.path.join(out, "checkpoint-4", "global_step4", "zero_pp_rank_2_mp_rank_00_model_states.pt"))
        assert sd["dp_world_size"] == 3
        assert sorted(os.listdir(os.path.join(out, "accelerate"))) == ["latest", "pytorch_model", "pytorch_model_1"]
        with open(os.path.join(out, "runs", "events.out")) as f:
            assert f.read() == "tensorboard"
    check("export --world-size 3 of a run writes the whole run at N, ready to resume without ucfs",
          export_of_a_run_at_n)

    def tag_takes_a_root():
        target = tempfile.mkdtemp(prefix="ucfs_mnt_")
        try:
            p = subprocess.run([UCFS, "mount", "-f", "--tag", "global_step4", run, target], capture_output=True,
                               text=True, timeout=30)
        finally:
            os.rmdir(target)
        assert p.returncode != 0 and "is a run directory" in p.stderr and "every tag of a run is served" in \
            p.stderr, (p.returncode, p.stderr)
    check("--tag over a run directory names a root to use instead", tag_takes_a_root)


base = tempfile.mkdtemp(prefix="ucfs_run_")
try:
    test_run(base)
finally:
    shutil.rmtree(base)
sys.exit(results.finish())
