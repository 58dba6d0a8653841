"""mount(8)'s helper, mount.fuse.ucfs: run directly as mount(8) runs it, then
through the real mount(8) -- `mount -t fuse.ucfs`, an fstab line, `mount -t
ucfs` -- and umount(8). Needs root and /dev/fuse, as the other FUSE tests.

mount(8) looks for helpers only in /sbin, so the real-mount(8) checks run in a
private mount namespace (unshare -m) where a scratch directory holding the
helper links is bind-mounted over /sbin: nothing on the machine is touched,
and a helper installed there is neither used nor replaced.

Usage: mount_helper_test.py UCFS FIXTURES
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from mount_testing import Results  # noqa: E402

RANK_FILES = {f"zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt" for r in range(3) for kind in ("optim", "model")}


def mount_of(mnt):
    """(fstype, options) of the mount on `mnt`, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[4] == mnt:
                return fields[sep + 1], fields[5]
    return None


def run(*cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def expect_ok(p):
    assert p.returncode == 0, f"{p.args} exited {p.returncode}: {p.stderr}"


def check_reshard_mount(mnt, upper, ranks=RANK_FILES):
    """The mount is there, at world size 3, and writes land in `upper`."""
    assert mount_of(mnt) is not None and mount_of(mnt)[0] == "fuse.ucfs", mount_of(mnt)
    with open(os.path.join(mnt, "latest")) as f:
        assert f.read().strip() == "global_step4"
    shown = {n for n in os.listdir(os.path.join(mnt, "global_step4")) if n.startswith("zero_pp_rank_")}
    assert shown == ranks, sorted(shown)
    with open(os.path.join(mnt, "global_step4", "zero_pp_rank_2_mp_rank_00_optim_states.pt"), "rb") as f:
        assert f.read(4) == b"PK\x03\x04"
    with open(os.path.join(mnt, "global_step4", "note.txt"), "w") as f:
        f.write("written through the mount\n")
    with open(os.path.join(upper, "global_step4", "note.txt")) as f:
        assert f.read() == "written through the mount\n"


def unmount(mnt, how=("umount",)):
    expect_ok(run(*how, mnt))
    assert mount_of(mnt) is None, "still mounted"


def cleanup(mnt):
    if mount_of(mnt) is not None:
        run("umount", "-l", mnt)


def direct_checks(ucfs, src, tmp, results):
    """The helper invoked as mount(8) would invoke it."""
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    helper = os.path.join(bindir, "mount.fuse.ucfs")
    os.symlink(ucfs, helper)
    os.symlink(ucfs, os.path.join(bindir, "mount.ucfs"))
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)

    def reshard_writable():
        upper, log = os.path.join(tmp, "upper"), os.path.join(tmp, "helper.log")
        try:
            # The options of the fstab line, as typed there.
            p = run(helper, src, mnt, "-o",
                    f"world_size=3,upper={upper},log_file={log},verbose,noauto,user,_netdev,nofail,"
                    "x-systemd.automount,comment=x,defaults,noatime")
            expect_ok(p)
            # No waiting: the helper returns once the mount is ready.
            check_reshard_mount(mnt, upper)
            with open(log) as f:
                text = f.read()
            assert "view at world size 3, writable into " + upper in text, text
            unmount(mnt)
        finally:
            cleanup(mnt)

    def universal_read_only():
        try:
            expect_ok(run(os.path.join(bindir, "mount.ucfs"), src, mnt, "-s", "-n", "-v", "-o",
                          "rw,tag=global_step4,no_cache", "-t", "ucfs"))
            assert mount_of(mnt)[0] == "fuse.ucfs"
            assert os.path.isfile(os.path.join(mnt, "global_step4_universal", "zero", "fc1.weight", "fp32.pt"))
            try:
                open(os.path.join(mnt, "x"), "w").close()
                raise AssertionError("a mount without upper= took a write")
            except OSError:
                pass
            unmount(mnt, (ucfs, "umount"))
        finally:
            cleanup(mnt)

    def fake_mounts_nothing():
        p = run(helper, src, mnt, "-f", "-v", "-o", "world_size=2,allow_other")
        expect_ok(p)
        assert "would run ucfs mount --world-size 2 -v -o allow_other " in p.stderr, p.stderr
        assert mount_of(mnt) is None

    def errors_are_clear():
        p = run(helper, src, mnt, "-o", f"ro,upper={tmp}/u")
        assert p.returncode == 1 and "ro and upper=" in p.stderr, (p.returncode, p.stderr)
        p = run(helper, src, mnt, "-o", "world_size=three")
        assert p.returncode == 1 and "world_size=three" in p.stderr, (p.returncode, p.stderr)
        try:
            # Unknown to ucfs, so passed on to libfuse, which refuses it by name.
            p = run(helper, src, mnt, "-o", "world_size=3,bogus_opt=7")
            assert p.returncode == 32 and "bogus_opt=7" in p.stderr, (p.returncode, p.stderr)
            assert mount_of(mnt) is None
        finally:
            cleanup(mnt)
        p = run(helper, os.path.join(tmp, "nowhere"), mnt)
        assert p.returncode == 32 and os.path.join(tmp, "nowhere") in p.stderr, (p.returncode, p.stderr)
        assert not os.listdir(mnt)

    results.check("direct: mount.fuse.ucfs SRC MNT -o world_size=3,upper=DIR,noauto,_netdev,...",
                  reshard_writable)
    results.check("direct: mount.ucfs, universal view, read-only, -s -n -v -t ucfs", universal_read_only)
    results.check("direct: -f mounts nothing, -v shows the ucfs mount command", fake_mounts_nothing)
    results.check("direct: errors name the option, mount(8) exit statuses", errors_are_clear)


def mount8_checks(ucfs, src, tmp, results):
    """Through mount(8) and umount(8); run inside a private mount namespace."""
    sbin = os.path.join(tmp, "sbin")
    os.mkdir(sbin)
    for name in ("mount.fuse.ucfs", "mount.ucfs"):
        os.symlink(ucfs, os.path.join(sbin, name))
    expect_ok(run("mount", "--bind", sbin, os.path.realpath("/sbin")))
    mnt = os.path.join(tmp, "mnt8")
    os.mkdir(mnt)

    def mount_t():
        upper = os.path.join(tmp, "upper8")
        try:
            expect_ok(run("mount", "-t", "fuse.ucfs", "-o", f"world_size=3,upper={upper}", src, mnt))
            check_reshard_mount(mnt, upper)
            unmount(mnt)
        finally:
            cleanup(mnt)

    def fstab_line():
        upper = os.path.join(tmp, "upper_fstab")
        fstab = os.path.join(tmp, "fstab")
        with open(fstab, "w") as f:
            f.write("# a line as in /etc/fstab\n")
            f.write(f"{src} {mnt} fuse.ucfs world_size=3,upper={upper},noauto,user,_netdev,"
                    "x-systemd.automount 0 0\n")
        try:
            expect_ok(run("mount", "--fstab", fstab, mnt))
            check_reshard_mount(mnt, upper)
            # `user` means noexec,nosuid,nodev to mount(8); the helper passes them on.
            assert "noexec" in mount_of(mnt)[1].split(","), mount_of(mnt)
            unmount(mnt)
        finally:
            cleanup(mnt)

    def type_ucfs():
        try:
            expect_ok(run("mount", "-t", "ucfs", "-o", "tag=global_step4", src, mnt))
            assert os.path.isdir(os.path.join(mnt, "global_step4_universal", "zero"))
            assert mount_of(mnt)[1].split(",")[0] == "ro"
            unmount(mnt)
        finally:
            cleanup(mnt)

    def ro_with_upper_refused():
        try:
            p = run("mount", "-t", "fuse.ucfs", "-o", f"ro,upper={tmp}/u", src, mnt)
            assert p.returncode != 0 and "ro and upper=" in p.stderr, (p.returncode, p.stderr)
            assert mount_of(mnt) is None
        finally:
            cleanup(mnt)

    results.check("mount(8): mount -t fuse.ucfs -o world_size=3,upper=DIR SRC MNT; umount MNT", mount_t)
    results.check("mount(8): mount --fstab FILE MNT with noauto,user,_netdev,x-systemd.*", fstab_line)
    results.check("mount(8): mount -t ucfs (mount.ucfs) SRC MNT", type_ucfs)
    results.check("mount(8): ro with upper= is refused", ro_with_upper_refused)


def main():
    in_namespace = sys.argv[1] == "--in-namespace"
    ucfs, fixtures = (os.path.abspath(a) for a in sys.argv[2 if in_namespace else 1:][:2])
    src = os.path.join(fixtures, "z3_fp32_ws2", "checkpoint")
    results = Results()
    with tempfile.TemporaryDirectory(prefix="ucfs_helper_") as tmp:
        if in_namespace:
            mount8_checks(ucfs, src, tmp, results)
            return results.finish()
        direct_checks(ucfs, src, tmp, results)

        def in_private_namespace():
            p = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                                os.path.abspath(__file__), "--in-namespace", ucfs, fixtures],
                               capture_output=True, text=True, timeout=120)
            sys.stdout.write(p.stdout)
            assert p.returncode == 0, f"unshare exited {p.returncode}: {p.stderr}"

        results.check("mount(8) checks, in a private mount namespace", in_private_namespace)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
