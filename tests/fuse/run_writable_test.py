#!/usr/bin/python3
"""What trainers do to a writable mount of their run (--world-size N --upper).

The fixtures laid out as an HF Trainer output_dir (checkpoint-4/ ZeRO-3 at
W=2, checkpoint-8/ ZeRO-2 at W=2, with rng_state_{r}.pth and the rank-0
files), a Lightning checkpoints/ dir and an OpenRLHF root, mounted with
`--world-size 3 --upper U`:

- every tag at N: DeepSpeed's three ranks' files, rng_state_2.pth a copy of
  rank 0's, files inside tag dirs (OpenRLHF's metric.json) passed through;
  no _universal/_fp32/latest_universal anywhere unless --views;
- mtimes are the source's, so sorting checkpoint-* by mtime is training order;
- HF's rotation (shutil.rmtree of the oldest checkpoint-* by mtime) removes a
  source root: it is gone from the mount (whiteouts), the source is untouched;
- HF's staging directory (tmp-checkpoint-12 renamed to checkpoint-12),
  Lightning's relative last.ckpt symlink, four processes creating one
  directory at once and each writing a file in it, and accelerate's one file
  written by every rank all work, and what they wrote is in the upper dir;
- a second mount of the same run with the same --upper on another mount point
  reads what the first wrote (a job mounts its run on every node);
- --views shows the extra views on a writable mount; --no-rank-file-copies
  leaves new ranks without rng_state_{r}.pth;
- the run's sha256 is the same after all of it.

usage: run_writable_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check


def tag_dir(fixture):
    return os.path.join(FIXTURES, fixture, "checkpoint", "global_step4")


def make_run(base):
    run = os.path.join(base, "output_dir")
    layout = {
        "checkpoint-4": ("z3_bf16_ws2", "global_step4"),
        "checkpoint-8": ("z2_tricky_fp32_ws2", "global_step8"),
        "checkpoints/epoch=0-step=4.ckpt": ("z3_fp32_ws2", "checkpoint"),
        "ckpt/_actor": ("z3_bf16_ws2", "global_step2"),
    }
    for root, (fixture, tag) in layout.items():
        shutil.copytree(tag_dir(fixture), os.path.join(run, root, tag))
        with open(os.path.join(run, root, "latest"), "w") as f:
            f.write(tag)
    for ck in ("checkpoint-4", "checkpoint-8"):
        for r in range(2):
            with open(os.path.join(run, ck, f"rng_state_{r}.pth"), "wb") as f:
                f.write(f"{ck} rank {r}".encode())
        with open(os.path.join(run, ck, "trainer_state.json"), "w") as f:
            f.write("{}")
    with open(os.path.join(run, "ckpt", "_actor", "global_step2", "metric.json"), "w") as f:
        f.write('{"reward": 0.5}')
    # Training order: checkpoint-4 older than checkpoint-8, by more than HF's
    # 1 s "mtime is unreliable" spread.
    now = time.time()
    for i, root in enumerate(("checkpoint-4", "checkpoint-8")):
        t = now - 100 + 10 * i
        for dirpath, dirnames, names in os.walk(os.path.join(run, root), topdown=False):
            for n in names:
                os.utime(os.path.join(dirpath, n), (t, t))
            os.utime(dirpath, (t, t))
    return run


def hf_sorted_checkpoints(output_dir):
    """transformers' _sorted_checkpoints(use_mtime=True) with its 1 s fallback."""
    import glob
    import re
    paths = [p for p in glob.glob(os.path.join(output_dir, "checkpoint-*")) if os.path.isdir(p)]
    by_mtime = sorted((os.path.getmtime(p), p) for p in paths)
    if len(by_mtime) > 1 and by_mtime[-1][0] - by_mtime[0][0] < 1.0:
        return sorted(paths, key=lambda p: int(re.match(r".*checkpoint-(\d+)", p).group(1)))
    return [p for _, p in by_mtime]


def write_in_shared_dir(args):
    """A rank of a multi-process save: mkdir -p (racing the others), then its file."""
    mnt, rank = args
    d = os.path.join(mnt, "checkpoint-12", "global_step12")
    os.makedirs(d, exist_ok=True)
    for kind in ("model", "optim"):
        with open(os.path.join(d, f"zero_pp_rank_{rank}_mp_rank_00_{kind}_states.pt"), "wb") as f:
            f.write(bytes([rank]) * 4096)
    # accelerate's dl_state_dict.bin: every rank writes one path.
    with open(os.path.join(mnt, "checkpoint-12", "dl_state_dict.bin"), "wb") as f:
        f.write(b"dl" * 100)
    return rank


def test_writable(base):
    run = make_run(base)
    before = mount_testing.tree_sha256(run)
    upper = os.path.join(base, "upper")
    m = mount_testing.Mount(UCFS, run, "checkpoint-4", "--no-cache", "--world-size", "3", "--upper", upper)
    try:
        def every_tag_at_n_and_no_extra_views():
            ck4 = sorted(os.listdir(os.path.join(m.dir, "checkpoint-4")))
            assert ck4 == ["global_step4", "latest", "rng_state_0.pth", "rng_state_1.pth", "rng_state_2.pth",
                           "trainer_state.json"], ck4
            with open(os.path.join(m.dir, "checkpoint-4", "rng_state_2.pth"), "rb") as f:
                assert f.read() == b"checkpoint-4 rank 0"
            tag = sorted(os.listdir(os.path.join(m.dir, "checkpoint-4", "global_step4")))
            assert tag == [f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(3)] + [
                f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(3)], tag
            ck8 = sorted(os.listdir(os.path.join(m.dir, "checkpoint-8", "global_step8")))
            assert ck8 == ["mp_rank_00_model_states.pt"] + [
                f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(3)], ck8
            lightning = sorted(os.listdir(os.path.join(m.dir, "checkpoints", "epoch=0-step=4.ckpt")))
            assert lightning == ["checkpoint", "latest"], lightning
            actor = os.path.join(m.dir, "ckpt", "_actor")
            assert sorted(os.listdir(actor)) == ["global_step2", "latest"], os.listdir(actor)
            with open(os.path.join(actor, "global_step2", "metric.json")) as f:
                assert f.read() == '{"reward": 0.5}'
            for dirpath, dirnames, names in os.walk(m.dir):
                for n in dirnames + names:
                    assert not n.endswith(("_universal", "_fp32")), os.path.join(dirpath, n)
        check("every tag at N, rng_state_2.pth a copy of rank 0's, no extra view", every_tag_at_n_and_no_extra_views)

        def mtimes_give_training_order():
            for root in ("checkpoint-4", "checkpoint-8"):
                for rel in ("", "global_step" + root.split("-")[1], "rng_state_2.pth"):
                    ours = os.stat(os.path.join(m.dir, root, rel)).st_mtime_ns
                    src = os.path.join(run, root, rel if rel != "rng_state_2.pth" else "rng_state_0.pth")
                    assert abs(ours - os.stat(src).st_mtime_ns) < 1_000_000, (root, rel)
            order = [os.path.basename(p) for p in hf_sorted_checkpoints(m.dir)]
            assert order == ["checkpoint-4", "checkpoint-8"], order
        check("directories and files carry the source's mtimes: checkpoint-* sort in training order",
              mtimes_give_training_order)

        def staging_dir_renamed_and_ranks_race():
            staging = os.path.join(m.dir, "tmp-checkpoint-12")
            os.mkdir(staging)
            os.rename(staging, os.path.join(m.dir, "checkpoint-12"))
            # fork, not Python 3.14's default forkserver, which fails in a
            # chroot (tests/fuse_next): these ranks need nothing but the fork.
            with multiprocessing.get_context("fork").Pool(4) as pool:
                assert sorted(pool.map(write_in_shared_dir, [(m.dir, r) for r in range(4)])) == [0, 1, 2, 3]
            with open(os.path.join(m.dir, "checkpoint-12", "latest"), "w") as f:
                f.write("global_step12")
            d = os.path.join(upper, "checkpoint-12", "global_step12")
            assert sorted(os.listdir(d)) == sorted(
                f"zero_pp_rank_{r}_mp_rank_00_{k}_states.pt" for r in range(4) for k in ("model", "optim")), \
                os.listdir(d)
            with open(os.path.join(upper, "checkpoint-12", "dl_state_dict.bin"), "rb") as f:
                assert f.read() == b"dl" * 100
            assert not os.path.exists(os.path.join(m.dir, "tmp-checkpoint-12"))
        check("HF's staging dir renamed into place; four ranks mkdir one dir and write in it",
              staging_dir_renamed_and_ranks_race)

        def lightning_relative_symlink():
            link = os.path.join(m.dir, "checkpoints", "last.ckpt")
            os.symlink("epoch=0-step=4.ckpt", link)
            assert os.readlink(link) == "epoch=0-step=4.ckpt"
            assert sorted(os.listdir(link)) == ["checkpoint", "latest"]
            with open(os.path.join(link, "latest")) as f:
                assert f.read() == "checkpoint"
        check("Lightning's relative last.ckpt symlink resolves inside the mount", lightning_relative_symlink)

        def hf_rotation_removes_the_oldest():
            oldest = hf_sorted_checkpoints(m.dir)[0]
            assert os.path.basename(oldest) == "checkpoint-4", oldest
            shutil.rmtree(oldest)  # HF passes ignore_errors=True; nothing may fail here
            assert not os.path.exists(os.path.join(m.dir, "checkpoint-4"))
            assert sorted(os.listdir(m.dir)) == ["checkpoint-12", "checkpoint-8", "checkpoints", "ckpt"], \
                os.listdir(m.dir)
            assert os.path.isdir(os.path.join(run, "checkpoint-4", "global_step4"))
        check("HF's rotation rmtree's the oldest checkpoint-*: gone from the mount, not from the run",
              hf_rotation_removes_the_oldest)

        def second_mount_sees_the_first():
            other = mount_testing.Mount(UCFS, run, "checkpoint-8", "--no-cache", "--world-size", "3",
                                        "--upper", upper)
            try:
                with open(os.path.join(other.dir, "checkpoint-12", "dl_state_dict.bin"), "rb") as f:
                    assert f.read() == b"dl" * 100
                assert not os.path.exists(os.path.join(other.dir, "checkpoint-4"))
                # checkpoint-12 was saved at 4 ranks into the upper dir: said, not resharded
                assert "global_step12: saved into --upper at 4 ranks, shown as saved (not at 3)" in \
                    other.log_text(), other.log_text()
                # and back: written through the second, read through the first
                with open(os.path.join(other.dir, "checkpoint-12", "trainer_state.json"), "w") as f:
                    f.write('{"global_step": 12}')
                deadline = time.time() + 5
                while True:
                    try:
                        with open(os.path.join(m.dir, "checkpoint-12", "trainer_state.json")) as f:
                            if f.read() == '{"global_step": 12}':
                                break
                    except FileNotFoundError:
                        pass
                    assert time.time() < deadline, "the first mount never saw the second's file"
                    time.sleep(0.2)
            finally:
                other.close()
        check("two mounts with one --upper on two mount points see each other's writes",
              second_mount_sees_the_first)
    finally:
        m.close()

    views = mount_testing.Mount(UCFS, run, "checkpoint-8", "--no-cache", "--world-size", "3",
                                "--upper", os.path.join(base, "upper_views"), "--views", "--no-rank-file-copies")
    try:
        def views_on_request_and_no_copies():
            names = sorted(os.listdir(os.path.join(views.dir, "checkpoint-8")))
            assert names == ["global_step8", "global_step8_fp32", "global_step8_universal", "latest",
                             "latest_universal", "rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"], names
        check("--views shows the extra views; --no-rank-file-copies gives new ranks no file",
              views_on_request_and_no_copies)
    finally:
        views.close()

    def source_unchanged():
        assert mount_testing.tree_sha256(run) == before, "the run directory changed"
    check("the run's sha256 is unchanged", source_unchanged)


base = tempfile.mkdtemp(prefix="ucfs_runw_")
try:
    test_writable(base)
finally:
    shutil.rmtree(base)
sys.exit(results.finish())
