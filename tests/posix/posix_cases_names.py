"""posix_cases_test.py's cases: names and paths; links and renames; directories
in place of the view's."""
import errno
import os
import shutil
import stat

import posix_testing as pt
from posix_cases_lib import (
    EVERYWHERE, MERGING, R0, R1, TAG, UCFS_ONLY, case, expect_errno, make, mode)


# --- Names and paths --------------------------------------------------------------

@case(EVERYWHERE, "883df09 (names over NAME_MAX answer ENAMETOOLONG)")
def name_max(t):
    """255-byte names work (in a new directory and in the view's); 256
    bytes is ENAMETOOLONG for every call that names one."""
    ok, long = "n" * 255, "n" * 256
    for d in ("", TAG):
        make(os.path.join(t.p(d), ok), b"x")
        assert os.path.getsize(os.path.join(t.p(d), ok)) == 1
        os.unlink(os.path.join(t.p(d), ok))
        os.mkdir(os.path.join(t.p(d), ok))
        os.rmdir(os.path.join(t.p(d), ok))
        bad = os.path.join(t.p(d), long)
        expect_errno(errno.ENAMETOOLONG, os.open, bad, os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(errno.ENAMETOOLONG, os.mkdir, bad)
        expect_errno(errno.ENAMETOOLONG, os.stat, bad)
        expect_errno(errno.ENAMETOOLONG, os.symlink, "x", bad)
        expect_errno(errno.ENAMETOOLONG, os.link, t.p("latest"), bad)
        expect_errno(errno.ENAMETOOLONG, os.rename, t.p("latest"), bad)
        expect_errno(errno.ENAMETOOLONG, os.mkfifo, bad)
    assert os.path.exists(t.p("latest"))


@case(UCFS_ONLY, "883df09; ucfs(1) THE WRITABLE MOUNT: a .wh. name may be at most 245 bytes")
def whiteout_name_limit(t):
    """Names beginning with .wh. are stored escaped (10 bytes more): 245
    bytes work, 246 are ENAMETOOLONG; other names still reach 255."""
    make(t.p(".wh." + "w" * 241), b"x")
    assert os.path.getsize(t.p(".wh." + "w" * 241)) == 1
    expect_errno(errno.ENAMETOOLONG, make, t.p(".wh." + "w" * 242))
    expect_errno(errno.ENAMETOOLONG, os.mkdir, t.p(".wh." + "w" * 242))
    make(t.p("w" * 255), b"x")


def deep_tree(root_fd, levels, name_len):
    """levels directories of name_len bytes below root_fd, made and entered
    by fd; a file at the bottom written and read back; the whole path's
    length."""
    fd = os.dup(root_fd)
    for _ in range(levels):
        os.mkdir("x" * name_len, dir_fd=fd)
        nfd = os.open("x" * name_len, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    f = os.open("deep", os.O_RDWR | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(f, b"deep")
    assert os.pread(f, 4, 0) == b"deep"
    os.close(f)
    os.rename("deep", "deeper", src_dir_fd=fd, dst_dir_fd=fd)
    assert os.stat("deeper", dir_fd=fd).st_size == 4
    os.symlink("deeper", "link", dir_fd=fd)
    assert os.readlink("link", dir_fd=fd) == "deeper"
    os.close(fd)
    return levels * (name_len + 1) + len("deeper")


@case(EVERYWHERE, "883df09 (paths as long as the kernel allows: the upper directory walked by fds)")
def long_paths(t):
    """Paths past PATH_MAX inside the mount, made and used relative to
    directory fds."""
    fd = os.open(t.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert deep_tree(fd, 24, 200) > 4096
    finally:
        os.close(fd)


@case(UCFS_ONLY, "883df09 (whatever the length of DIR's own path)")
def long_upper_path(t):
    """An upper directory whose own path is 3,000 bytes long, under paths
    of 2,000 more inside the mount."""
    base = t.base
    long = os.path.join(t.env.work, *(["u" * 250] * 12))
    os.makedirs(long)
    assert len(long) > 3000
    mnt = pt.UcfsMount(t.env.ucfs, t.env.lower.source, os.path.join(base, "mnt2"),
                       os.path.join(long, "up"))
    try:
        fd = os.open(mnt.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert deep_tree(fd, 10, 200) > 2000
        finally:
            os.close(fd)
        os.chmod(os.path.join(mnt.dir, R1), 0o600)  # copy-up under the long path
        assert mode(os.path.join(mnt.dir, R1)) == 0o600
    finally:
        mnt.close()
        shutil.rmtree(os.path.join(t.env.work, "u" * 250), ignore_errors=True)


# --- Links and renames ------------------------------------------------------------

@case(EVERYWHERE, "883df09 (a view file is copied up first; both names one inode); 85d4950")
def hard_link_to_view_file(t):
    """A hard link to a view file: one inode, nlink 2, the same bytes;
    written through one name, read through the other; nlink 1 again after
    one name goes."""
    data = open(t.p(R0), "rb").read()
    os.link(t.p(R0), t.p("h"))
    a, b = os.stat(t.p(R0)), os.stat(t.p("h"))
    assert (a.st_ino, a.st_nlink) == (b.st_ino, 2), (a, b)
    assert open(t.p("h"), "rb").read() == data
    with open(t.p("h"), "r+b") as f:
        f.write(b"XY")
    assert open(t.p(R0), "rb").read()[:2] == b"XY"
    os.unlink(t.p(R0))
    assert os.stat(t.p("h")).st_nlink == 1
    assert not os.path.exists(t.p(R0))


@case(EVERYWHERE, "883df09 (RENAME_EXCHANGE and RENAME_NOREPLACE); 85d4950")
def rename_exchange_and_noreplace(t):
    """RENAME_EXCHANGE swaps (files, a view file, a file and a directory);
    RENAME_NOREPLACE refuses an existing target (EEXIST); EXCHANGE needs
    both (ENOENT); the two flags together are EINVAL."""
    make(t.p("n"), b"new")
    pt.renameat2(t.p("n"), t.p("latest"), pt.RENAME_EXCHANGE)
    assert (open(t.p("latest"), "rb").read(), open(t.p("n"), "rb").read()) == \
        (b"new", b"global_step4")
    os.mkdir(t.p("d"))
    make(t.p("d/in"))
    pt.renameat2(t.p("d"), t.p("n"), pt.RENAME_EXCHANGE)
    assert os.path.isdir(t.p("n")) and os.path.isfile(t.p("d"))
    assert os.listdir(t.p("n")) == ["in"]
    expect_errno(errno.EEXIST, pt.renameat2, t.p("d"), t.p("latest"), pt.RENAME_NOREPLACE)
    expect_errno(errno.ENOENT, pt.renameat2, t.p("d"), t.p("missing"), pt.RENAME_EXCHANGE)
    expect_errno(errno.EINVAL, pt.renameat2, t.p("d"), t.p("latest"),
                 pt.RENAME_EXCHANGE | pt.RENAME_NOREPLACE)
    pt.renameat2(t.p("d"), t.p("fresh"), pt.RENAME_NOREPLACE)
    assert open(t.p("fresh"), "rb").read() == b"global_step4"


@case(EVERYWHERE, "pjdfstest rename/ (directories over directories and files)")
def rename_directories(t):
    """A directory renames over an empty one, not over a non-empty one
    (ENOTEMPTY), not over a file (ENOTDIR), nor into itself (EINVAL); a
    file not over a directory (EISDIR)."""
    for d in ("d", "e", "full", "full/x"):
        os.mkdir(t.p(d))
    make(t.p("d/f"), b"f")
    make(t.p("file"))
    os.rename(t.p("d"), t.p("e"))
    assert os.listdir(t.p("e")) == ["f"]
    expect_errno(errno.ENOTEMPTY, os.rename, t.p("e"), t.p("full"))
    expect_errno(errno.ENOTDIR, os.rename, t.p("e"), t.p("file"))
    expect_errno(errno.EISDIR, os.rename, t.p("file"), t.p("e"))
    expect_errno(errno.EINVAL, os.rename, t.p("full"), t.p("full/x/y"))


@case(MERGING, "ucfs(1) Not supported: a directory holding view entries renames with EXDEV, "
      "as overlayfs without redirect_dir")
def view_directory_rename(t):
    """Renaming the view's tag directory is EXDEV (mv copies); a directory
    made through the mount renames."""
    expect_errno(errno.EXDEV, os.rename, t.p(TAG), t.p("moved"))
    expect_errno(errno.EXDEV, pt.renameat2, t.p(TAG), t.p("latest"), pt.RENAME_EXCHANGE)
    os.mkdir(t.p("mine"))
    os.rename(t.p("mine"), t.p("moved"))
    assert os.path.isdir(t.p("moved"))


@case(EVERYWHERE, "883df09 (a directory moved onto a view name must not merge with it: opaque)")
def directory_replacing_view_directory(t):
    """A directory renamed over the emptied view directory, or made where it
    was removed, shows only its own entries (after a remount too)."""
    names = sorted(os.listdir(t.p(TAG)))
    for n in names:
        os.unlink(t.p(f"{TAG}/{n}"))
    os.mkdir(t.p("d"))
    make(t.p("d/mine"), b"m")
    os.rename(t.p("d"), t.p(TAG))
    assert os.listdir(t.p(TAG)) == ["mine"]
    shutil.rmtree(t.p(TAG))
    os.mkdir(t.p(TAG))
    assert os.listdir(t.p(TAG)) == []
    make(t.p(f"{TAG}/{os.path.basename(R0)}"), b"new")
    if t.kind == "ucfs":
        t.remount()
    assert os.listdir(t.p(TAG)) == [os.path.basename(R0)]
    assert open(t.p(R0), "rb").read() == b"new"


@case(EVERYWHERE, "883df09 (.wh. names are ordinary names: stored escaped, never whiteouts)")
def whiteout_like_names(t):
    """Entries named .wh.<x> and .wh..opq are ordinary: they hide nothing,
    and removing a view entry leaves no name behind."""
    make(t.p(".wh.latest"), b"not a whiteout")
    make(t.p(f"{TAG}/.wh..opq"), b"not opaque")
    assert open(t.p("latest"), "rb").read() == b"global_step4"
    assert len(os.listdir(t.p(TAG))) == 9
    os.unlink(t.p("latest"))
    names = set(os.listdir(t.p(""))) - {f"{TAG}_fp32"}
    assert names == {TAG, ".wh.latest"}, names
    assert open(t.p(".wh.latest"), "rb").read() == b"not a whiteout"
    make(t.p("latest"), b"again")
    os.mkdir(t.p(".wh.d"))
    if t.kind == "ucfs":
        t.remount()
    names = set(os.listdir(t.p(""))) - {f"{TAG}_fp32"}
    assert names == {TAG, ".wh.latest", "latest", ".wh.d"}, names
    assert open(t.p("latest"), "rb").read() == b"again"


@case(EVERYWHERE, "found by differential_test.py (replaced-view-dir-not-movable)")
def replaced_view_directory_renames(t):
    """A directory made in place of the removed view directory holds
    nothing of the view: it renames like any new one (mv(1) would hide an
    EXDEV by copying)."""
    shutil.rmtree(t.p(TAG))
    os.mkdir(t.p(TAG))
    make(t.p(f"{TAG}/mine"), b"m")
    os.rename(t.p(TAG), t.p("moved"))
    assert os.listdir(t.p("moved")) == ["mine"]
    assert not os.path.exists(t.p(TAG))


@case(EVERYWHERE, "found by differential_test.py (removed-dir-fd-stale)")
def removed_directory_fd_fstat(t):
    """An fd of a removed directory still answers fstat (nlink 0 where the
    file system counts), a new directory's and the view's alike."""
    os.mkdir(t.p("d"))
    fds = [os.open(t.p("d"), os.O_RDONLY | os.O_DIRECTORY),
           os.open(t.p(TAG), os.O_RDONLY | os.O_DIRECTORY)]
    try:
        os.rmdir(t.p("d"))
        shutil.rmtree(t.p(TAG))
        for fd in fds:
            st = os.fstat(fd)
            assert stat.S_ISDIR(st.st_mode) and st.st_nlink in (0, 1), st
    finally:
        for fd in fds:
            os.close(fd)


@case(EVERYWHERE, "pjdfstest rmdir/ (a view directory is removed once it is empty)")
def rmdir_view_directory(t):
    """The view's directory is ENOTEMPTY until its files are gone, then
    removed; made again, it is empty."""
    expect_errno(errno.ENOTEMPTY, os.rmdir, t.p(TAG))
    for n in os.listdir(t.p(TAG)):
        os.unlink(t.p(f"{TAG}/{n}"))
    os.rmdir(t.p(TAG))
    assert not os.path.exists(t.p(TAG))
    os.mkdir(t.p(TAG))
    assert os.listdir(t.p(TAG)) == []


@case(EVERYWHERE, "pjdfstest open/ (O_EXCL and symlinks)")
def exclusive_create_and_symlinks(t):
    """O_CREAT|O_EXCL fails on any existing name (a view file, a dangling
    symlink: EEXIST); O_CREAT through a dangling symlink makes its target;
    O_NOFOLLOW on a symlink is ELOOP."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    expect_errno(errno.EEXIST, os.open, t.p("latest"), flags, 0o644)
    os.symlink("target", t.p("dangling"))
    expect_errno(errno.EEXIST, os.open, t.p("dangling"), flags, 0o644)
    os.close(os.open(t.p("dangling"), os.O_WRONLY | os.O_CREAT, 0o644))
    assert os.path.isfile(t.p("target"))
    expect_errno(errno.ELOOP, os.open, t.p("dangling"), os.O_RDONLY | os.O_NOFOLLOW)
    os.symlink("latest", t.p("cur"))
    assert (os.readlink(t.p("cur")), open(t.p("cur"), "rb").read()) == ("latest", b"global_step4")
