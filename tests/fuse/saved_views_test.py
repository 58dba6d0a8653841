#!/usr/bin/python3
"""Checkpoints saved through a writable mount of a run are roots like the
source's: the views serve them too.

An HF Trainer output_dir (checkpoint-4, ZeRO-3 bf16 at W=2, config.json)
mounted with `--world-size 3 --upper U`, and the trainer saves
checkpoint-12 through it (real DeepSpeed 0.14.5 files of a 3-rank run, its
config.json, and `latest` written last, as DeepSpeed writes it):

- while the tag is half-saved (one rank's files still missing) checkpoint-12
  shows as written, no view; once whole, model.safetensors appears beside its
  config.json, byte for byte what a read-only mount of the same files shows,
  and a stat finds it at once though one missed it before (HF Trainer looks
  the name up before it saves: the kernel must not have kept that miss);
- without --views no _universal/_fp32/latest_universal; with --views they
  appear, and global_step12_universal/ is byte for byte `ucfs export`'s;
- a look-up of global_step12_universal/ with no listing first finds it;
- a tag saved again under its name (accelerate's fixed `pytorch_model`)
  gets its views anew: the universal files then hold the new values;
- HF's rotation of the new checkpoint (rmtree) removes it and its views;
- the run's sha256 is unchanged.

usage: saved_views_test.py UCFS_BIN FIXTURES_DIR
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

VIEWS = ["global_step12_fp32", "global_step12_universal", "latest_universal"]


def fixture_tag(name):
    return os.path.join(FIXTURES, name, "checkpoint", "global_step4")


def make_root(path, fixture, tag):
    shutil.copytree(fixture_tag(fixture), os.path.join(path, tag))
    with open(os.path.join(path, "config.json"), "w") as f:
        f.write('{"model_type": "test"}')
    with open(os.path.join(path, "latest"), "w") as f:
        f.write(tag)


def save_through(mnt, fixture, hold_back=None):
    """DeepSpeed's save of checkpoint-12 through the mount: the tag's files,
    `latest` last; `hold_back`: a file left unwritten (a rank still saving)."""
    ck = os.path.join(mnt, "checkpoint-12")
    os.makedirs(os.path.join(ck, "global_step12"), exist_ok=True)
    with open(os.path.join(ck, "config.json"), "w") as f:
        f.write('{"model_type": "test"}')
    src = fixture_tag(fixture)
    for name in sorted(os.listdir(src)):
        if name != hold_back:
            shutil.copyfile(os.path.join(src, name), os.path.join(ck, "global_step12", name))
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write("global_step12")


def test(base):
    run = os.path.join(base, "output_dir")
    make_root(os.path.join(run, "checkpoint-4"), "z3_bf16_ws2", "global_step4")
    before = mount_testing.tree_sha256(run)
    # What the views of checkpoint-12 must hold: a read-only mount and an
    # export of the same files as a source.
    refs = {}
    for fixture in ("z3_bf16_ws3", "z3_fp32_ws3"):
        ref = os.path.join(base, "ref_" + fixture)
        make_root(ref, fixture, "global_step12")
        out = os.path.join(base, "ref_universal_" + fixture)
        r = subprocess.run([UCFS, "export", "--no-cache", ref, out], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        m = mount_testing.Mount(UCFS, ref, "model.safetensors", "--no-cache")
        try:
            with open(os.path.join(m.dir, "model.safetensors"), "rb") as f:
                weights = f.read()
        finally:
            m.close()
        refs[fixture] = (os.path.join(out, "global_step12_universal"), weights)

    m = mount_testing.Mount(UCFS, run, "checkpoint-4", "--no-cache", "--world-size", "3",
                            "--upper", os.path.join(base, "upper"))
    try:
        ck = os.path.join(m.dir, "checkpoint-12")

        def half_saved_shows_as_written():
            held = "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"
            save_through(m.dir, "z3_bf16_ws3", hold_back=held)
            names = sorted(os.listdir(ck))
            assert names == ["config.json", "global_step12", "latest"], names
            assert not os.path.exists(os.path.join(ck, "model.safetensors"))
            shutil.copyfile(os.path.join(fixture_tag("z3_bf16_ws3"), held),
                            os.path.join(ck, "global_step12", held))
        check("a half-saved checkpoint shows as written, no view", half_saved_shows_as_written)

        def weights_once_whole():
            # Found at once by a lookup that follows the one that missed.
            assert os.path.isfile(os.path.join(ck, "model.safetensors"))
            names = sorted(os.listdir(ck))
            assert names == ["config.json", "global_step12", "latest", "model.safetensors"], names
            with open(os.path.join(ck, "model.safetensors"), "rb") as f:
                assert f.read() == refs["z3_bf16_ws3"][1]
        check("once whole: model.safetensors beside its config.json, as a mount of the files shows it",
              weights_once_whole)

        def rotation_removes_it():
            shutil.rmtree(ck)
            assert not os.path.exists(ck)
            assert sorted(os.listdir(m.dir)) == ["checkpoint-4"], os.listdir(m.dir)
        check("HF's rotation of the saved checkpoint removes it and its weights", rotation_removes_it)
    finally:
        m.close()

    v = mount_testing.Mount(UCFS, run, "checkpoint-4", "--no-cache", "--world-size", "3",
                            "--upper", os.path.join(base, "upper_views"), "--views")
    try:
        ck = os.path.join(v.dir, "checkpoint-12")
        save_through(v.dir, "z3_bf16_ws3")

        def found_without_a_listing():
            # A loader opens the path it was given; nothing listed checkpoint-12.
            with open(os.path.join(ck, "latest_universal")) as f:
                assert f.read() == "global_step12_universal"
            assert os.path.isdir(os.path.join(ck, "global_step12_universal", "zero"))
        check("--views: a look-up finds the saved checkpoint's views unlisted", found_without_a_listing)

        def views_with_export_bytes():
            names = sorted(os.listdir(ck))
            for name in VIEWS + ["model.safetensors"]:
                assert name in names, names
            same_files(os.path.join(ck, "global_step12_universal"), refs["z3_bf16_ws3"][0])
        check("--views: the saved checkpoint's universal view is export's, byte for byte",
              views_with_export_bytes)

        def saved_again_under_its_name():
            # The same tag saved anew (here in fp32, so that every value differs).
            shutil.rmtree(os.path.join(ck, "global_step12"))
            save_through(v.dir, "z3_fp32_ws3")
            os.listdir(ck)  # the listing that looks again
            same_files(os.path.join(ck, "global_step12_universal"), refs["z3_fp32_ws3"][0])
            with open(os.path.join(ck, "model.safetensors"), "rb") as f:
                assert f.read() == refs["z3_fp32_ws3"][1]
        check("a tag saved again under its name gets its views anew", saved_again_under_its_name)
    finally:
        v.close()

    def source_unchanged():
        assert mount_testing.tree_sha256(run) == before, "the run directory changed"
    check("the run's sha256 is unchanged", source_unchanged)


base = tempfile.mkdtemp(prefix="ucfs_saved_views_")
try:
    test(base)
finally:
    shutil.rmtree(base)
sys.exit(results.finish())
