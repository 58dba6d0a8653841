#!/usr/bin/python3
"""Elastic training twice over: checkpoints saved through a mount, resumed at
yet another size (--layer).

An HF Trainer output_dir holds checkpoint-4 (ZeRO-3, bf16, W=2). It resumes
at 3 ranks through `mount --world-size 3 --upper U1`, saves checkpoint-12 at
3 ranks (real DeepSpeed 0.14.5 files of a 3-rank run, with rng_state_{0,1,2})
and rotates checkpoint-4 away. The next job has 2 GPUs:
`mount --layer U1 --world-size 2 --upper U2` must show the run as the first
mount left it, with checkpoint-12 resharded to 2 ranks, byte for byte what
`ucfs export --world-size 2` makes of those files, and per-rank files at 2;
what this job saves lands in U2, and neither the run nor U1 changes. A
read-only mount with both layers serves every checkpoint's universal view,
and `export --layer` writes the same bytes as the mount. --upper overlapping
a --layer is refused.

usage: layered_resume_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mount_testing  # noqa: E402
from mount_testing import Results, same_files  # noqa: E402

UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check


def fixture_tag(name):
    return os.path.join(FIXTURES, name, "checkpoint", "global_step4")


def export(*args):
    r = subprocess.run([UCFS, "export", "--no-cache", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test(base):
    run = os.path.join(base, "output_dir")
    shutil.copytree(fixture_tag("z3_bf16_ws2"), os.path.join(run, "checkpoint-4", "global_step4"))
    with open(os.path.join(run, "checkpoint-4", "latest"), "w") as f:
        f.write("global_step4")
    for r in range(2):
        with open(os.path.join(run, "checkpoint-4", f"rng_state_{r}.pth"), "wb") as f:
            f.write(f"step 4 rank {r}".encode())
    run_sha = mount_testing.tree_sha256(run)
    u1, u2 = os.path.join(base, "u1"), os.path.join(base, "u2")

    # The 3-rank job: saves checkpoint-12 through the mount, rotates checkpoint-4.
    m1 = mount_testing.Mount(UCFS, run, "checkpoint-4", "--no-cache", "--world-size", "3", "--upper", u1)
    try:
        ck = os.path.join(m1.dir, "checkpoint-12")
        shutil.copytree(fixture_tag("z3_bf16_ws3"), os.path.join(ck, "global_step12"))
        for r in range(3):
            with open(os.path.join(ck, f"rng_state_{r}.pth"), "wb") as f:
                f.write(f"step 12 rank {r}".encode())
        with open(os.path.join(ck, "latest"), "w") as f:
            f.write("global_step12")
        shutil.rmtree(os.path.join(m1.dir, "checkpoint-4"))
    finally:
        m1.close()
    u1_sha = mount_testing.tree_sha256(u1)
    # What DeepSpeed would have saved at 2 ranks from those files.
    ref = os.path.join(base, "ref")
    shutil.copytree(fixture_tag("z3_bf16_ws3"), os.path.join(ref, "global_step12"))
    with open(os.path.join(ref, "latest"), "w") as f:
        f.write("global_step12")
    export("--world-size", "2", ref, os.path.join(base, "ref_at_2"))
    export(ref, os.path.join(base, "ref_universal"))

    def overlap_refused():
        mnt = tempfile.mkdtemp(prefix="ucfs_mnt_")
        try:
            r = subprocess.run([UCFS, "mount", "-f", "--no-cache", "--layer", u1, "--world-size", "2",
                                "--upper", u1, run, mnt], capture_output=True, text=True, timeout=30)
            assert r.returncode == 2, (r.returncode, r.stderr)
            assert "overlap" in r.stderr and u1 in r.stderr, r.stderr
        finally:
            os.rmdir(mnt)
    check("--upper overlapping a --layer is refused, naming both", overlap_refused)

    # The 2-rank job.
    m2 = mount_testing.Mount(UCFS, run, "checkpoint-12", "--no-cache", "--layer", u1, "--world-size", "2",
                             "--upper", u2)
    try:
        def as_the_first_mount_left_it():
            assert sorted(os.listdir(m2.dir)) == ["checkpoint-12"], os.listdir(m2.dir)
            names = sorted(os.listdir(os.path.join(m2.dir, "checkpoint-12")))
            assert names == ["global_step12", "latest", "rng_state_0.pth", "rng_state_1.pth"], names
            with open(os.path.join(m2.dir, "checkpoint-12", "rng_state_1.pth"), "rb") as f:
                assert f.read() == b"step 12 rank 1"
        check("the run as the 3-rank job left it: checkpoint-4 rotated away, per-rank files at 2",
              as_the_first_mount_left_it)

        def resharded_to_2():
            same_files(os.path.join(m2.dir, "checkpoint-12", "global_step12"),
                       os.path.join(base, "ref_at_2", "global_step12"))
        check("checkpoint-12 (saved at 3 through the first mount) at 2 ranks: export's bytes",
              resharded_to_2)

        def saves_land_in_the_new_upper():
            ck = os.path.join(m2.dir, "checkpoint-16")
            os.makedirs(os.path.join(ck, "global_step16"))
            with open(os.path.join(ck, "global_step16", "zero_pp_rank_0_mp_rank_00_optim_states.pt"), "wb") as f:
                f.write(b"x" * 1000)
            with open(os.path.join(ck, "latest"), "w") as f:
                f.write("global_step16")
            assert os.path.exists(os.path.join(u2, "checkpoint-16", "latest"))
            assert not os.path.exists(os.path.join(u1, "checkpoint-16"))
        check("what the 2-rank job saves lands in --upper, not in the layer", saves_land_in_the_new_upper)

        def batch_advice_once_naming_the_layer():
            # checkpoint-12 was saved at 3 ranks with micro batch 4 of 12: at 2
            # no accumulation keeps it. Said once, of the tag where it lies.
            for _ in range(2):
                os.listdir(os.path.join(m2.dir, "checkpoint-12", "global_step12"))
                os.listdir(m2.dir)
            with open(m2.log) as f:
                said = [line for line in f if "the run was saved with" in line]
            assert len(said) == 1, said
            where = os.path.join(u1, "checkpoint-12", "global_step12")
            assert f"{where}: the run was saved with train_batch_size 12" in said[0], said
        check("the batch advice is said once, naming the tag in the layer that holds it",
              batch_advice_once_naming_the_layer)
    finally:
        m2.close()

    def exported_with_the_layer():
        out = os.path.join(base, "exported")
        export("--layer", u1, "--world-size", "2", run, out)
        same_files(os.path.join(out, "checkpoint-12", "global_step12"),
                   os.path.join(base, "ref_at_2", "global_step12"))
        assert not os.path.exists(os.path.join(out, "checkpoint-4"))
    check("export --layer writes the mount's bytes", exported_with_the_layer)

    m3 = mount_testing.Mount(UCFS, run, "checkpoint-12", "--no-cache", "--layer", u1, "--layer", u2)
    try:
        def universal_of_every_checkpoint():
            ck = os.path.join(m3.dir, "checkpoint-12")
            with open(os.path.join(ck, "latest_universal")) as f:
                assert f.read() == "global_step12_universal"
            same_files(os.path.join(ck, "global_step12_universal"),
                       os.path.join(base, "ref_universal", "global_step12_universal"))
            assert os.path.isdir(os.path.join(m3.dir, "checkpoint-16", "global_step16"))
        check("read-only over both layers: each checkpoint's universal view, export's bytes",
              universal_of_every_checkpoint)
    finally:
        m3.close()

    def nothing_below_written():
        assert mount_testing.tree_sha256(run) == run_sha, "the run directory changed"
        assert mount_testing.tree_sha256(u1) == u1_sha, "the layer changed"
    check("neither the run nor the layer is written", nothing_below_written)


base = tempfile.mkdtemp(prefix="ucfs_layered_")
try:
    test(base)
finally:
    shutil.rmtree(base)
sys.exit(results.finish())
