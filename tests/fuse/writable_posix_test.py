#!/usr/bin/python3
"""POSIX semantics of the writable reshard view (`ucfs mount --world-size N --upper DIR`) through a real FUSE mount.

A mount shared with other users (their files theirs, their umask once, modes
enforced), symlinks, hard links, FIFOs, sockets, devices, open-unlinked files,
RENAME_EXCHANGE/NOREPLACE, xattrs, paths past PATH_MAX, copy-up keeping
mtimes, <tag>_fp32 read-only, tar extracting into the mount, view entries
named like whiteouts. And the source tree's sha256 never changes.
(writable_mount_test.py: a trainer's saves, copy-up, concurrency, crashes.)

usage: writable_posix_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""

import ctypes
import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from mount_testing import Results, read, tree_sha256, write_synced  # noqa: E402
import writable_setup  # noqa: E402
from writable_setup import TAG  # noqa: E402

UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check

SOURCE = writable_setup.source_of(FIXTURES)


def Mount(upper, *extra):
    return writable_setup.mount(UCFS, SOURCE, upper, *extra)


source_sha = tree_sha256(SOURCE)
work = tempfile.mkdtemp(prefix="ucfs_writable_posix_")


def expect_errno(err, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        assert e.errno == err, (fn.__name__, args, e)
        return
    raise AssertionError(f"{fn.__name__}{args} did not fail with {errno.errorcode[err]}")


def as_user(uid, script, cwd):
    """Runs `sh -c script` as `uid` (group `uid` too); returns its stdout."""
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    out = subprocess.run(["/bin/sh", "-c", script], cwd=cwd, preexec_fn=drop, capture_output=True,
                         text=True)
    assert out.returncode == 0, (script, out.stdout, out.stderr)
    return out.stdout


libc = ctypes.CDLL(None, use_errno=True)


def renameat2(src, dst, flags):
    if libc.renameat2(-100, src.encode(), -100, dst.encode(), ctypes.c_uint(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)


def shared_mount_posix():
    # A mount shared with other users: what they make is theirs, with their
    # umask applied once; they are held to the modes shown.
    upper = os.path.join(work, "shared")
    m = Mount(upper, "-o", "allow_other", "--views")
    try:
        pub = os.path.join(m.dir, "pub")
        os.mkdir(pub)
        os.chmod(pub, 0o1777)
        out = as_user(65534, "umask 002; echo x > f; chmod 600 f; echo y > f; mkdir d; "
                      "echo global_step8 > latest; echo global_step9 > latest; cat f latest; "
                      "stat -c '%u %g %a' f d latest", pub)
        assert out.split("\n")[:5] == ["y", "global_step9", "65534 65534 600", "65534 65534 775",
                                        "65534 65534 664"], out
        st = os.stat(os.path.join(upper, "pub", "f"))
        assert (st.st_uid, st.st_mode & 0o7777) == (65534, 0o600), st
        # Root's umask, once.
        old = os.umask(0o002)
        try:
            open(os.path.join(m.dir, "made"), "w").close()
            os.mkdir(os.path.join(m.dir, "made.d"))
        finally:
            os.umask(old)
        assert os.stat(os.path.join(m.dir, "made")).st_mode & 0o777 == 0o664
        assert os.stat(os.path.join(m.dir, "made.d")).st_mode & 0o777 == 0o775
        # Other users are held to the modes shown: root's view files and
        # the consolidated weights are not theirs to write.
        for script in ("echo x >> ../latest", f"touch ../{TAG}_fp32/new"):
            def drop():
                os.setgid(65534)
                os.setuid(65534)
            r = subprocess.run(["/bin/sh", "-c", script], cwd=pub, preexec_fn=drop,
                               capture_output=True, text=True)
            assert r.returncode != 0 and "Permission denied" in r.stderr, (script, r.stderr)
    finally:
        m.close()


check("a shared mount: other users' files are theirs, their umask applies once, modes hold",
      shared_mount_posix)


def posix_operations():
    upper = os.path.join(work, "posix")
    m = Mount(upper, "--views")
    try:
        d = m.dir
        tag = os.path.join(d, TAG)
        rank0 = os.path.join(tag, "zero_pp_rank_0_mp_rank_00_model_states.pt")
        shown = read(rank0)
        # Copy-up keeps the file as shown: an open for writing that writes
        # nothing, a chmod, a rename change no mtime.
        before = os.stat(rank0)
        open(rank0, "r+b").close()
        os.chmod(rank0, 0o640)
        after = os.stat(rank0)
        assert after.st_mtime_ns == before.st_mtime_ns, (before, after)
        assert after.st_mode & 0o777 == 0o640
        rank1 = os.path.join(tag, "zero_pp_rank_1_mp_rank_00_model_states.pt")
        mtime1 = os.stat(rank1).st_mtime_ns
        os.rename(rank1, rank1 + ".moved")
        assert os.stat(rank1 + ".moved").st_mtime_ns == mtime1
        os.rename(rank1 + ".moved", rank1)
        # Hard links to a shown file: copied up, one inode.
        os.link(rank0, os.path.join(d, "hard"))
        assert os.stat(rank0).st_ino == os.stat(os.path.join(d, "hard")).st_ino
        assert os.stat(rank0).st_nlink == 2
        assert read(os.path.join(d, "hard")) == shown
        # Symbolic links, FIFOs, sockets, regular files and devices by mknod.
        os.symlink("latest", os.path.join(d, "cur"))
        assert os.readlink(os.path.join(d, "cur")) == "latest"
        assert read(os.path.join(d, "cur")) == read(os.path.join(d, "latest"))
        os.mkfifo(os.path.join(d, "fifo"))
        os.mknod(os.path.join(d, "sock"), 0o600 | stat.S_IFSOCK)
        os.mknod(os.path.join(d, "plain"), 0o600 | stat.S_IFREG)
        os.mknod(os.path.join(d, "null"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        kinds = {n: stat.S_IFMT(os.lstat(os.path.join(d, n)).st_mode)
                 for n in ("cur", "fifo", "sock", "plain", "null")}
        assert kinds == {"cur": stat.S_IFLNK, "fifo": stat.S_IFIFO, "sock": stat.S_IFSOCK,
                         "plain": stat.S_IFREG, "null": stat.S_IFCHR}, kinds
        assert os.stat(os.path.join(d, "null")).st_rdev == os.makedev(1, 3)
        # An open file outlives its name.
        fd = os.open(os.path.join(d, "plain"), os.O_RDWR)
        try:
            os.write(fd, b"abc")
            os.unlink(os.path.join(d, "plain"))
            os.ftruncate(fd, 2)
            os.fchmod(fd, 0o604)
            os.utime(fd, (100, 200))
            st = os.fstat(fd)
            assert (st.st_size, st.st_mode & 0o777, st.st_mtime) == (2, 0o604, 200), st
        finally:
            os.close(fd)
        # RENAME_EXCHANGE and RENAME_NOREPLACE (an atomic save of `latest`).
        write_synced(os.path.join(d, "latest.new"), b"global_step9")
        renameat2(os.path.join(d, "latest.new"), os.path.join(d, "latest"), 2)
        assert read(os.path.join(d, "latest")) == b"global_step9"
        assert read(os.path.join(d, "latest.new")) == TAG.encode()
        expect_errno(errno.EEXIST, renameat2, os.path.join(d, "latest.new"), os.path.join(d, "latest"), 1)
        # Extended attributes: set on a shown file copies it up; the view's
        # own are read-only.
        model2 = os.path.join(tag, "zero_pp_rank_2_mp_rank_00_model_states.pt")
        expect_errno(errno.EPERM, os.setxattr, model2, "user.ucfs.param", b"x")
        os.setxattr(model2, "user.note", b"kept")
        assert os.getxattr(model2, "user.note") == b"kept"
        assert "user.note" in os.listxattr(model2)
        os.removexattr(model2, "user.note")
        expect_errno(errno.ENODATA, os.getxattr, model2, "user.note")
        # NAME_MAX, and paths past PATH_MAX (made relative to directory fds).
        expect_errno(errno.ENAMETOOLONG, os.stat, os.path.join(d, "n" * 256))
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        for i in range(24):
            os.mkdir("x" * 200, dir_fd=dfd)
            nfd = os.open("x" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        f = os.open("deep", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)
        os.write(f, b"deep")
        os.close(f)
        os.close(dfd)
        # The consolidated weights are read-only in every way.
        fp32 = os.path.join(d, TAG + "_fp32")
        bin_ = os.path.join(fp32, "pytorch_model.bin")
        expect_errno(errno.EROFS, open, os.path.join(fp32, "new"), "w")
        expect_errno(errno.EROFS, open, bin_, "r+b")
        expect_errno(errno.EROFS, os.unlink, bin_)
        expect_errno(errno.EROFS, os.rename, bin_, os.path.join(d, "out.bin"))
        expect_errno(errno.EROFS, os.rename, os.path.join(d, "latest.new"), os.path.join(fp32, "in"))
        expect_errno(errno.EROFS, os.link, bin_, os.path.join(d, "linked.bin"))
        expect_errno(errno.EROFS, os.link, os.path.join(d, "latest.new"), os.path.join(fp32, "in"))
        expect_errno(errno.EROFS, os.chmod, bin_, 0o600)
        expect_errno(errno.EROFS, os.mkdir, os.path.join(fp32, "sub"))
        expect_errno(errno.EROFS, os.rmdir, fp32)
        assert os.stat(fp32).st_mode & 0o222 == 0
        assert not os.path.exists(os.path.join(upper, TAG + "_fp32"))
    finally:
        m.close()
    # DIR holds them as they are.
    assert os.path.islink(os.path.join(upper, "cur"))
    assert stat.S_ISFIFO(os.lstat(os.path.join(upper, "fifo")).st_mode)
    assert os.stat(os.path.join(upper, "hard")).st_nlink == 2


check("symlinks, hard links, special files, open-unlinked files, RENAME_EXCHANGE, xattrs, "
      "long paths; copy-up keeps mtimes; <tag>_fp32 is read-only", posix_operations)


def tar_extracts_everything():
    # `tar --xattrs -x` (mknod of a regular file, hard links, symlinks,
    # FIFOs, xattrs, mtimes): the archive comes back whole.
    src = os.path.join(work, "tar_src")
    os.makedirs(os.path.join(src, "d"))
    with open(os.path.join(src, "d", "f"), "w") as f:
        f.write("hi")
    os.setxattr(os.path.join(src, "d", "f"), "user.k", b"v")
    os.utime(os.path.join(src, "d", "f"), (1577836800, 1577836800))
    os.link(os.path.join(src, "d", "f"), os.path.join(src, "d", "hard"))
    os.symlink("f", os.path.join(src, "d", "sym"))
    os.mkfifo(os.path.join(src, "d", "fifo"))
    archive = os.path.join(work, "t.tar")
    subprocess.run(["tar", "--xattrs", "-cf", archive, "-C", src, "d"], check=True)
    m = Mount(os.path.join(work, "tar_upper"))
    try:
        subprocess.run(["tar", "--xattrs", "--xattrs-include=user.*", "-xf", archive, "-C", m.dir],
                       check=True)
        d = os.path.join(m.dir, "d")
        assert sorted(os.listdir(d)) == ["f", "fifo", "hard", "sym"], os.listdir(d)
        st = os.stat(os.path.join(d, "f"))
        assert (st.st_nlink, st.st_mtime, read(os.path.join(d, "hard"))) == (2, 1577836800, b"hi"), st
        assert os.getxattr(os.path.join(d, "f"), "user.k") == b"v"
        assert os.readlink(os.path.join(d, "sym")) == "f"
        assert stat.S_ISFIFO(os.lstat(os.path.join(d, "fifo")).st_mode)
    finally:
        m.close()


check("tar --xattrs -x into the mount extracts every entry, link, xattr and mtime", tar_extracts_everything)


def whiteout_like_names_in_the_view():
    # A source root holding entries named like whiteouts: they show, and
    # deleting one hides it alone.
    src = os.path.join(work, "wh_source")
    shutil.copytree(SOURCE, src)
    for name in (".wh.notes", ".wh..opq"):
        with open(os.path.join(src, name), "w") as f:
            f.write(name)
    upper = os.path.join(work, "wh_upper")
    m = writable_setup.mount(UCFS, src, upper)
    try:
        names = os.listdir(m.dir)
        assert ".wh.notes" in names and ".wh..opq" in names, names
        assert read(os.path.join(m.dir, ".wh.notes")) == b".wh.notes"
        os.unlink(os.path.join(m.dir, ".wh.notes"))
        names = os.listdir(m.dir)
        assert ".wh.notes" not in names and ".wh..opq" in names and "latest" in names, names
        assert os.path.exists(os.path.join(upper, ".wh..wh.w..wh.notes"))
    finally:
        m.close()
    m = writable_setup.mount(UCFS, src, upper)
    try:
        names = os.listdir(m.dir)
        assert ".wh.notes" not in names and ".wh..opq" in names and TAG in names, names
    finally:
        m.close()


check("view entries named .wh.* show in a writable mount; their whiteouts never collide",
      whiteout_like_names_in_the_view)


def source_untouched():
    assert tree_sha256(SOURCE) == source_sha, "the source checkpoint changed"


check("the source checkpoint's sha256 is unchanged", source_untouched)
shutil.rmtree(work, ignore_errors=True)
sys.exit(results.finish())
