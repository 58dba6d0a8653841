#!/usr/bin/python3
"""What other users may do through a mount shared with `-o allow_other`.

A login node's mount is shared: the kernel's default_permissions check must
hold exactly what the checkpoint holds. With a checkpoint of rank files
0640 root:root in a 0755 root, mounted by root with allow_other:
  - user nobody cannot read a built file (the universal view's fp32.pt, the
    consolidated weights) nor a rank file, and sees them as root's 0640;
  - source entries show their own owner and mode (a 0755 script keeps it);
  - symlinks in the checkpoint are shown as the links they are, whatever
    they point to, and the daemon never reads through one: one to
    /etc/shadow is no more readable by nobody than /etc/shadow is, a relative
    one leading out of the checkpoint resolves beside the mountpoint (not
    beside the checkpoint), and one pointing inside reads as its target;
  - once the rank files are 0644, nobody reads the same bytes root does;
  - `ucfs export` writes files no more readable than the view shows them.

usage: permissions_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mount_testing  # noqa: E402
from mount_testing import Results  # noqa: E402

UCFS = sys.argv[1]
FIXTURES = sys.argv[2]
NOBODY = 65534
results = Results()
check = results.check


def Mount(src, *extra):
    return mount_testing.Mount(UCFS, src, "latest", *extra)


def as_nobody(path):
    """(returncode, stdout bytes, stderr text) of `cat path` run as nobody."""
    p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        "cat", path], capture_output=True)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def main():
    work = tempfile.mkdtemp(prefix="ucfs_perm_")
    os.chmod(work, 0o755)
    try:
        ckpt = os.path.join(work, "ckpt")
        shutil.copytree(os.path.join(FIXTURES, "z3_fp32_ws2", "checkpoint"), ckpt)
        shutil.rmtree(os.path.join(ckpt, "global_step4_universal"))
        os.unlink(os.path.join(ckpt, "latest_universal"))
        os.chmod(ckpt, 0o755)
        tag = os.path.join(ckpt, "global_step4")
        os.chmod(tag, 0o755)
        for name in os.listdir(tag):
            os.chmod(os.path.join(tag, name), 0o640)
        script = os.path.join(ckpt, "zero_to_fp32.py")
        with open(script, "w") as f:
            f.write("print('hello')\n")
        os.chmod(script, 0o755)
        with open(os.path.join(work, "beside"), "w") as f:
            f.write("not the checkpoint's\n")
        os.symlink("/etc/shadow", os.path.join(ckpt, "shadow"))
        os.symlink("../beside", os.path.join(ckpt, "beside"))
        os.symlink("zero_to_fp32.py", os.path.join(ckpt, "script_link"))

        m = Mount(ckpt, "-o", "allow_other")
        try:
            fp32 = os.path.join(m.dir, "global_step4_universal", "zero", "fc1.weight", "fp32.pt")
            rank1 = os.path.join(m.dir, "global_step4", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
            consolidated = os.path.join(m.dir, "global_step4_fp32", "pytorch_model.bin")

            def owners_and_modes():
                for path in (fp32, consolidated, rank1):
                    st = os.stat(path)
                    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o640), \
                        (path, st)
                st = os.stat(os.path.dirname(fp32))
                assert stat.S_IMODE(st.st_mode) == 0o750, oct(st.st_mode)
                assert stat.S_IMODE(os.stat(os.path.join(m.dir, "zero_to_fp32.py")).st_mode) \
                    == 0o755
                assert stat.S_IMODE(os.stat(m.dir).st_mode) == 0o755
            check("built files take the rank files' owner and mode; source files keep theirs",
                  owners_and_modes)

            def nobody_refused():
                for path in (fp32, consolidated, rank1):
                    code, out, err = as_nobody(path)
                    assert code != 0 and out == b"" and "Permission denied" in err, (path, err)
                code, out, _ = as_nobody(os.path.join(m.dir, "zero_to_fp32.py"))
                assert code == 0 and out == b"print('hello')\n"
            check("user nobody cannot read what the checkpoint does not let it read",
                  nobody_refused)

            def symlinks_shown_as_links():
                for name, target in (("shadow", "/etc/shadow"), ("beside", "../beside"),
                                     ("script_link", "zero_to_fp32.py")):
                    path = os.path.join(m.dir, name)
                    assert stat.S_ISLNK(os.lstat(path).st_mode), name
                    assert os.readlink(path) == target, name
                code, out, _ = as_nobody(os.path.join(m.dir, "shadow"))
                assert code != 0 and out == b"", (code, out)
                # Resolved by the kernel from the mountpoint: never the file
                # beside the checkpoint.
                beside = os.path.join(os.path.dirname(m.dir), "beside")
                assert not os.path.exists(beside) or open(beside).read() != "not the checkpoint's\n"
                with open(os.path.join(m.dir, "script_link"), "rb") as f:
                    assert f.read() == b"print('hello')\n"
            check("symlinks are shown as links, never read through by the daemon",
                  symlinks_shown_as_links)

            def export_keeps_modes():
                out = os.path.join(work, "export")
                subprocess.run([UCFS, "export", ckpt, out, "--no-cache"], check=True,
                               capture_output=True)
                for dirpath, _, files in os.walk(out):
                    for name in files:
                        mode = stat.S_IMODE(os.stat(os.path.join(dirpath, name)).st_mode)
                        assert mode & 0o007 == 0, (name, oct(mode))
            check("export writes files no more readable than the view shows them",
                  export_keeps_modes)
        finally:
            m.close()

        for name in os.listdir(tag):
            os.chmod(os.path.join(tag, name), 0o644)
        m = Mount(ckpt, "-o", "allow_other")
        try:
            def nobody_reads():
                fp32 = os.path.join(m.dir, "global_step4_universal", "zero", "fc1.weight",
                                    "fp32.pt")
                code, out, err = as_nobody(fp32)
                assert code == 0, err
                with open(fp32, "rb") as f:
                    assert out == f.read()
                assert stat.S_IMODE(os.stat(fp32).st_mode) == 0o644
            check("with rank files 0644, nobody reads what root reads", nobody_reads)
        finally:
            m.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
