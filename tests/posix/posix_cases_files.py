"""posix_cases_test.py's cases: open files; times; extended attributes, special
files and the read-only parts."""
import errno
import os
import stat

import posix_testing as pt
from posix_cases_lib import (
    EVERYWHERE, MERGING, R0, R1, TAG, UCFS_ONLY, case, expect_errno, make, mode, open_dir, settle)


# --- Open files -----------------------------------------------------------------

@case(EVERYWHERE, "883df09 (OverlayFs keeps the fds of open files per inode); 85d4950")
def open_file_survives_unlink(t):
    """After unlink an open file still reads, writes, fstats (nlink 0),
    ftruncates, fchmods, fchowns and futimens."""
    open_dir(t)

    def scenario():
        fd = os.open("a/f", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"abcdef")
        os.unlink("a/f")
        os.write(fd, b"gh")
        got = os.pread(fd, 100, 0)
        os.ftruncate(fd, 3)
        os.fchmod(fd, 0o604)
        os.fchown(fd, -1, 3000)
        pt.futimens(fd, (100, 5), (200, 7))
        st = os.fstat(fd)
        os.close(fd)
        return got, st.st_nlink, st.st_size, stat.S_IMODE(st.st_mode), st.st_gid, \
            st.st_atime_ns, st.st_mtime_ns
    got = t.run("alice", scenario)
    assert got == (b"abcdefgh", 0, 3, 0o604, 3000, 100 * 10**9 + 5, 200 * 10**9 + 7), got
    assert not os.path.exists(t.p("a/f"))


@case(EVERYWHERE, "883df09 (open files keep working after replace)")
def open_file_survives_rename_over(t):
    """An fd of a file replaced by a rename reads and writes the old file;
    the new name shows the new one. A view file opened for writing (so
    copied up) and replaced likewise."""
    make(t.p("old"), b"old")
    make(t.p("new"), b"new")
    fd = os.open(t.p("old"), os.O_RDWR)
    view_fd = os.open(t.p(R0), os.O_RDWR)
    view_bytes = os.pread(view_fd, 1 << 20, 0)
    try:
        os.rename(t.p("new"), t.p("old"))
        os.rename(t.p("latest"), t.p(R0))
        os.pwrite(fd, b"OLD", 0)
        assert os.pread(fd, 10, 0) == b"OLD"
        assert os.fstat(fd).st_nlink == 0
        assert open(t.p("old"), "rb").read() == b"new"
        assert os.pread(view_fd, 1 << 20, 0) == view_bytes
        assert os.fstat(view_fd).st_nlink == 0
        assert open(t.p(R0), "rb").read() == b"global_step4"
    finally:
        os.close(fd)
        os.close(view_fd)


@case(MERGING, "found by differential_test.py (view-handle-after-copy-up)")
def view_file_fd_reads_the_copy(t):
    """A read-only fd of a view file reads what the file holds once it is
    copied up and changed through its name."""
    fd = os.open(t.p("latest"), os.O_RDONLY)
    try:
        os.truncate(t.p("latest"), 4096)
        got = os.pread(fd, 8192, 0)
        assert got == b"global_step4" + bytes(4084), (len(got), got[:16])
        assert os.fstat(fd).st_size == 4096
    finally:
        os.close(fd)


@case(MERGING, "found by differential_test.py (view-handle-poisons-page-cache)")
def other_fds_read_the_copy(t):
    """A read-write fd of a view file reads back what it wrote, and a new
    open reads the file whole, whatever an older read-only fd of the file
    reads meanwhile."""
    r = os.open(t.p(R1), os.O_RDONLY)
    w = os.open(t.p(R1), os.O_RDWR)
    try:
        os.pwrite(w, b"xx", 0)
        os.pread(r, 100, 4000)
        got = os.pread(w, 4, 0)
        assert got[:2] == b"xx", got
    finally:
        os.close(r)
        os.close(w)
    r = os.open(t.p("latest"), os.O_RDONLY)
    try:
        os.truncate(t.p("latest"), 20000)
        os.pread(r, 1, 1)
        fd = os.open(t.p("latest"), os.O_RDONLY)
        got = os.read(fd, 100)
        os.close(fd)
        assert got == b"global_step4" + bytes(88), got
    finally:
        os.close(r)


@case(("ucfs", "tmpfs"),
      "found by differential_test.py (unlinked-view-file-setattr); ucfs(1) Open files")
def unlinked_view_file_fd_setattr(t):
    """fchmod through a read-only fd of a view file that was unlinked
    works, as ucfs(1) says of open files (overlayfs fails too, so not run
    there)."""
    fd = os.open(t.p(R1), os.O_RDONLY)
    try:
        os.unlink(t.p(R1))
        os.fchmod(fd, 0o600)
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        assert len(os.pread(fd, 100, 0)) == 100
    finally:
        os.close(fd)


# --- Times ------------------------------------------------------------------------

@case(EVERYWHERE, "pjdfstest utimensat/ (who may set which times)")
def utimensat_permissions(t):
    """Anyone who may write a file may set both times to now; only its
    owner (or root) explicit times (EPERM) or to now without write access
    (EACCES); UTIME_OMIT leaves a time as it is; times land to the ns."""
    open_dir(t)
    make(t.p("a/f"), b"", 0o666)
    os.chown(t.p("a/f"), 1001, 1001)
    os.chmod(t.p("a/f"), 0o666)
    pt.utimensat(t.p("a/f"), (1000000000, 1), (1234567890, 123456789))
    t.run("bob", pt.utimensat, "a/f", "now", "now")
    expect_errno(errno.EPERM, t.run, "bob", pt.utimensat, "a/f", (5, 0), (5, 0))
    t.run("alice", pt.utimensat, "a/f", "omit", (1500000000, 999999999))
    st = os.stat(t.p("a/f"))
    assert st.st_mtime_ns == 1500000000999999999 and st.st_atime_ns > 1000000001, st
    t.run("alice", pt.utimensat, "a/f", (1000000000, 1), "omit")
    st = os.stat(t.p("a/f"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (1000000000000000001, 1500000000999999999), st
    os.chmod(t.p("a/f"), 0o644)
    expect_errno(errno.EACCES, t.run, "bob", pt.utimensat, "a/f", "now", "now")
    os.symlink("f", t.p("a/l"))
    pt.utimensat(t.p("a/l"), (7, 7), (8, 8), follow=False)
    assert os.lstat(t.p("a/l")).st_mtime_ns == 8 * 10**9 + 8
    assert os.stat(t.p("a/f")).st_mtime_ns == 1500000000999999999


@case(EVERYWHERE, "85d4950 (copy-up keeps the mode, owner and times it was shown with)")
def copy_up_keeps_mode_owner_times(t):
    """Changing a view file's metadata (open for writing with nothing
    written, chmod, chown, xattr, rename, link) keeps its mtime, bytes and
    owner."""
    files = sorted(os.listdir(t.p(TAG)))
    before = {f: os.stat(t.p(f"{TAG}/{f}")) for f in files}
    data = {f: open(t.p(f"{TAG}/{f}"), "rb").read() for f in files}
    os.close(os.open(t.p(f"{TAG}/{files[0]}"), os.O_RDWR))
    os.chmod(t.p(f"{TAG}/{files[1]}"), 0o640)
    os.chown(t.p(f"{TAG}/{files[2]}"), 1001, -1)
    os.setxattr(t.p(f"{TAG}/{files[3]}"), "user.note", b"x")
    os.rename(t.p(f"{TAG}/{files[4]}"), t.p(f"{TAG}/moved"))
    os.link(t.p(f"{TAG}/{files[5]}"), t.p("linked"))
    after = {f: os.stat(t.p(f"{TAG}/{f}")) for f in files if f != files[4]}
    after[files[4]] = os.stat(t.p(f"{TAG}/moved"))
    for f in files:
        assert after[f].st_mtime_ns == before[f].st_mtime_ns, (f, before[f], after[f])
    assert stat.S_IMODE(after[files[1]].st_mode) == 0o640
    assert (after[files[2]].st_uid, after[files[2]].st_gid) == (1001, before[files[2]].st_gid)
    assert open(t.p(f"{TAG}/moved"), "rb").read() == data[files[4]]
    assert open(t.p("linked"), "rb").read() == data[files[5]]


@case(MERGING, "found by differential_test.py (copy-up-touches-parent)")
def copy_up_keeps_parent_times(t):
    """Copying a file up does not change its directory's mtime."""
    before = os.stat(t.p(TAG)).st_mtime_ns
    os.chmod(t.p(R0), 0o600)
    settle(t)
    assert os.stat(t.p(TAG)).st_mtime_ns == before, (before, os.stat(t.p(TAG)).st_mtime_ns)


@case(MERGING, "found by differential_test.py (truncating-copy-up-atime)")
def copy_up_without_contents_keeps_atime(t):
    """A view file truncated to 0 (copied up without its bytes) keeps the
    atime it was shown with."""
    before = os.stat(t.p(R0)).st_atime_ns
    os.truncate(t.p(R0), 0)
    settle(t)
    assert os.stat(t.p(R0)).st_atime_ns == before, (before, os.stat(t.p(R0)).st_atime_ns)


@case(EVERYWHERE, "found by differential_test.py (opendir-touches-atime)")
def opendir_does_not_touch_atime(t):
    """Opening a directory without reading it leaves its atime."""
    os.mkdir(t.p("d"))
    pt.utimensat(t.p("d"), (1000000000, 0), "omit")
    os.close(os.open(t.p("d"), os.O_RDONLY | os.O_DIRECTORY))
    settle(t)
    assert os.stat(t.p("d")).st_atime_ns == 10**18, os.stat(t.p("d")).st_atime_ns


@case(EVERYWHERE, "found by differential_test.py (merged-dir-nlink-undercount)")
def merged_directory_link_count(t):
    """A directory's link count is 2 plus its subdirectories, or 1 (not
    counted, as overlayfs shows a merged directory), after a view
    directory is copied up too; where directories merge, the one copied
    up shows 1 at once (ucfs tells the kernel, which caches attributes)."""
    def check():
        for rel in ("", TAG):
            st = os.stat(t.p(rel))
            subdirs = sum(1 for n in os.listdir(t.p(rel)) if os.path.isdir(t.p(os.path.join(rel, n)))
                          and not os.path.islink(t.p(os.path.join(rel, n))))
            assert st.st_nlink in (1, 2 + subdirs), (rel, st.st_nlink, subdirs)
    check()
    os.chmod(t.p(R0), 0o600)
    if t.kind in MERGING:
        assert os.stat(t.p(TAG)).st_nlink == 1, os.stat(t.p(TAG)).st_nlink
    os.mkdir(t.p("new"))
    settle(t)
    check()


# --- Extended attributes, special files, read-only parts ---------------------------------

@case(EVERYWHERE, "883df09 (xattrs on upper entries; a view entry is copied up first); 85d4950")
def xattrs(t):
    """user.* xattrs: set on a view file (its bytes unchanged), XATTR_CREATE
    on an existing one EEXIST, XATTR_REPLACE on a missing one ENODATA,
    removexattr of a missing one ENODATA; on symlinks and FIFOs EPERM; only
    who may write the file sets them (EACCES)."""
    data = open(t.p(R0), "rb").read()
    os.setxattr(t.p(R0), "user.a", b"1")
    assert os.getxattr(t.p(R0), "user.a") == b"1"
    assert "user.a" in os.listxattr(t.p(R0))
    assert open(t.p(R0), "rb").read() == data
    expect_errno(errno.EEXIST, os.setxattr, t.p(R0), "user.a", b"2", os.XATTR_CREATE)
    expect_errno(errno.ENODATA, os.setxattr, t.p(R0), "user.b", b"2", os.XATTR_REPLACE)
    os.setxattr(t.p(R0), "user.a", b"3", os.XATTR_REPLACE)
    assert os.getxattr(t.p(R0), "user.a") == b"3"
    os.removexattr(t.p(R0), "user.a")
    expect_errno(errno.ENODATA, os.removexattr, t.p(R0), "user.a")
    expect_errno(errno.ENODATA, os.getxattr, t.p(R1), "user.none")
    os.symlink("latest", t.p("l"))
    os.mkfifo(t.p("p"))
    expect_errno(errno.EPERM, os.setxattr, t.p("l"), "user.a", b"1", follow_symlinks=False)
    expect_errno(errno.EPERM, os.setxattr, t.p("p"), "user.a", b"1")
    expect_errno(errno.EACCES, t.run, "alice", os.setxattr, R1, "user.a", b"1")
    if t.kind == "ucfs":  # the view's own, read-only
        expect_errno(errno.EPERM, os.setxattr, t.p(R1), "user.ucfs.x", b"1")


@case(EVERYWHERE, "85d4950 (FIFOs, sockets, mknod of regular files, devices)")
def special_files(t):
    os.mkfifo(t.p("p"), 0o644)
    os.mknod(t.p("s"), 0o644 | stat.S_IFSOCK)
    os.mknod(t.p("r"), 0o644 | stat.S_IFREG)
    os.mknod(t.p("c"), 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    kinds = {n: stat.S_IFMT(os.lstat(t.p(n)).st_mode) for n in "psrc"}
    assert kinds == {"p": stat.S_IFIFO, "s": stat.S_IFSOCK, "r": stat.S_IFREG,
                     "c": stat.S_IFCHR}, kinds
    assert os.lstat(t.p("c")).st_rdev == os.makedev(1, 3)
    assert os.path.getsize(t.p("r")) == 0
    r = os.open(t.p("p"), os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(t.p("p"), os.O_WRONLY | os.O_NONBLOCK)
    os.write(w, b"through")
    assert os.read(r, 100) == b"through"
    os.close(w)
    os.close(r)
    open_dir(t)
    expect_errno(errno.EPERM, t.run, "alice", os.mknod, "a/c2", 0o644 | stat.S_IFCHR,
                 os.makedev(1, 3))


@case(UCFS_ONLY, "883df09; ucfs(1) Read-only parts (<tag>_fp32 is EROFS in every way)")
def consolidated_weights_read_only(t):
    """<tag>_fp32/ (shown in a writable mount with --views) is EROFS to
    every change, and EACCES to other users."""
    m = pt.UcfsMount(t.env.ucfs, t.env.lower.source, os.path.join(t.base, "views"),
                     os.path.join(t.base, "views-upper"), extra=["--views"])
    try:
        check_consolidated_read_only(t, m.dir)
    finally:
        m.close()


def check_consolidated_read_only(t, root):
    fp32 = os.path.join(root, f"{TAG}_fp32")
    inside = os.path.join(fp32, sorted(os.listdir(fp32))[0])
    assert mode(fp32) & 0o222 == 0
    expect_errno(errno.EROFS, os.open, os.path.join(fp32, "new"), os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno(errno.EROFS, os.open, inside, os.O_RDWR)
    expect_errno(errno.EROFS, os.unlink, inside)
    expect_errno(errno.EROFS, os.rename, inside, os.path.join(root, "out"))
    expect_errno(errno.EROFS, os.rename, os.path.join(root, "latest"), os.path.join(fp32, "in"))
    expect_errno(errno.EROFS, os.link, inside, os.path.join(root, "out"))
    expect_errno(errno.EROFS, os.chmod, inside, 0o600)
    expect_errno(errno.EROFS, os.setxattr, inside, "user.a", b"1")
    expect_errno(errno.EROFS, os.mkdir, os.path.join(fp32, "d"))
    expect_errno(errno.EROFS, os.rmdir, fp32)
    expect_errno(errno.EACCES, pt.run_as, root, "alice", os.open, f"{TAG}_fp32/new",
                 os.O_WRONLY | os.O_CREAT, 0o644)
