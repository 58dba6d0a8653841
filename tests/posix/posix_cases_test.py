#!/usr/bin/python3
"""Named POSIX cases of the writable mount, each one a behaviour pjdfstest
caught or the overlay's code was written for (git log: 883df09 "POSIX
semantics in the overlay core (pjdfstest)", 85d4950, f93321f "pjdfstest
chmod/12"; the comments of src/overlay/ and src/fuse/writable_ops.cc), or
one tests/posix/differential_test.py found.

Each case runs in a fresh writable ucfs mount of the fixture at its own
world size, shared with -o allow_other, the daemon root with umask 077 (as
posix_testing.UcfsMount starts it). Where the case is a property of any
local file system it runs on kernel overlayfs and on tmpfs over the same
tree too, so the expectation itself is held to the kernel's: a case that
fails there is wrong, not ucfs. Other users are posix_testing.USERS,
switched to in forked children (setgroups/setresgid/setresuid, umask).

Cases named in KNOWN_FAILING are bugs found and not yet fixed: they run,
and their failure on ucfs is reported but does not fail the test; should
one pass, the test fails until it is taken off the list. --strict fails
on them.

usage: posix_cases_test.py UCFS_BIN FIXTURES_DIR [--strict] [--targets=ucfs,...] [CASE...]
  --targets=K,...  run on these of ucfs, overlayfs, tmpfs only (all three by default)
Ends with the line "N passed, M failed".
"""
import errno
import os
import shutil
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import posix_testing as pt  # noqa: E402

TAG = "global_step4"
R0 = f"{TAG}/zero_pp_rank_0_mp_rank_00_model_states.pt"
R1 = f"{TAG}/zero_pp_rank_1_mp_rank_00_model_states.pt"
EVERYWHERE = ("ucfs", "overlayfs", "tmpfs")
MERGING = ("ucfs", "overlayfs")  # what needs a lower layer
UCFS_ONLY = ("ucfs",)

# Bugs found by differential_test.py (its KNOWN_BUGS has each one's
# reproducer): cases that fail on ucfs until they are fixed.
KNOWN_FAILING = {
    "setid_cleared_on_write_after_chmod": "direct-write-keeps-setid",
    "setgid_cleared_on_write_by_non_member": "sgid-kept-for-non-member",
    "setid_cleared_on_truncating_open": "otrunc-keeps-setid",
    "copy_up_keeps_parent_times": "copy-up-touches-parent",
    "copy_up_without_contents_keeps_atime": "truncating-copy-up-atime",
    "opendir_does_not_touch_atime": "opendir-touches-atime",
    "merged_directory_link_count": "merged-dir-nlink-undercount",
    "view_file_fd_reads_the_copy": "view-handle-after-copy-up",
    "other_fds_read_the_copy": "view-handle-poisons-page-cache",
    "replaced_view_directory_renames": "replaced-view-dir-not-movable",
    "removed_directory_fd_fstat": "removed-dir-fd-stale",
    "unlinked_view_file_fd_setattr": "unlinked-view-file-setattr",
}

CASES = []


def case(targets, origin):
    def add(fn):
        CASES.append((fn.__name__, targets, origin, fn))
        return fn
    return add


class Target:
    """One file system a case runs on: `root`, `p(rel)`, `run(user, fn,
    *args, umask)` (fn in a child that became user, cwd root)."""

    def __init__(self, kind, env, upper=None):
        self.kind, self.env = kind, env
        self.base = pt.new_work_dir(os.path.join(env.work, kind + "_"))
        mnt = os.path.join(self.base, "mnt")
        if kind == "ucfs":
            self.upper = upper or os.path.join(self.base, "upper")
            os.makedirs(self.upper, exist_ok=True)
            os.chmod(self.upper, 0o755)  # the mount's root: the daemon's umask is 077
            self.m = pt.UcfsMount(env.ucfs, env.lower.source, mnt, self.upper)
        elif kind == "overlayfs":
            self.m = pt.OverlayMount(env.lower.dir, os.path.join(self.base, "upper"),
                                     os.path.join(self.base, "work"), mnt)
        else:
            self.m = pt.TmpfsMount(env.lower, mnt)
        self.root = self.m.dir

    def p(self, rel):
        return os.path.join(self.root, rel)

    def run(self, user, fn, *args, umask=0o022):
        return pt.run_as(self.root, user, fn, *args, umask=umask)

    def remount(self):
        assert self.kind == "ucfs"
        self.m.close()
        self.m = pt.UcfsMount(self.env.ucfs, self.env.lower.source, self.root, self.upper)

    def close(self):
        try:
            self.m.close()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def expect_errno(err, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except OSError as e:
        assert e.errno == err, (fn.__name__, args, errno.errorcode.get(e.errno), e)
        return
    raise AssertionError(f"{fn.__name__}{args} did not fail with {errno.errorcode[err]}")


def mode(path, follow=False):
    return stat.S_IMODE(os.stat(path, follow_symlinks=follow).st_mode)


def owner(path):
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def make(path, data=b"", perm=0o644):
    """A file as root, with exactly this mode (umask 0)."""
    old = os.umask(0)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, perm)
        os.write(fd, data)
        os.close(fd)
        os.chmod(path, perm)
    finally:
        os.umask(old)


def open_dir(t, rel="a"):
    """A directory anyone may write (root's, 0777)."""
    os.mkdir(t.p(rel))
    os.chmod(t.p(rel), 0o777)
    return t.p(rel)


def settle(t):
    """ucfs lets the kernel cache attributes for 1 s; a change ucfs makes
    behind the kernel's back shows once that has passed."""
    if t.kind == "ucfs":
        time.sleep(1.1)


# --- Set-id bits -----------------------------------------------------------

def write_as(path, flags, data=b"x"):
    fd = os.open(path, flags)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


@case(EVERYWHERE, "pjdfstest chmod/12; f93321f (write-only opens are direct, but not of set-id files)")
def setid_cleared_on_write_by_other(t):
    """A write by a user without CAP_FSETID clears S_ISUID, and S_ISGID
    with group execute, whether the fd is write-only (ucfs's direct
    writes) or read-write, the owner's too; root's writes keep them;
    S_ISGID without group execute stays for a writer in the file's group."""
    d = open_dir(t)
    for name, flags in (("wo", os.O_WRONLY), ("rw", os.O_RDWR), ("ap", os.O_WRONLY | os.O_APPEND)):
        f = os.path.join(d, name)
        make(f, b"data", 0o6777)
        t.run("alice", write_as, f"a/{name}", flags)
        assert mode(f) == 0o777, (name, oct(mode(f)))
    make(os.path.join(d, "own"), b"", 0o6777)
    os.chown(os.path.join(d, "own"), 1001, 1001)
    os.chmod(os.path.join(d, "own"), 0o6777)
    t.run("alice", write_as, "a/own", os.O_WRONLY)
    assert mode(os.path.join(d, "own")) == 0o777, oct(mode(os.path.join(d, "own")))
    make(os.path.join(d, "root"), b"", 0o6777)
    write_as(os.path.join(d, "root"), os.O_WRONLY)
    assert mode(os.path.join(d, "root")) == 0o6777
    f = os.path.join(d, "member")
    make(f, b"", 0o2666)
    os.chown(f, 0, 3000)
    os.chmod(f, 0o2666)
    t.run("alice", write_as, "a/member", os.O_WRONLY)
    assert mode(f) == 0o2666, oct(mode(f))
    # A view file made set-id (copied up by the chmod).
    os.chmod(t.p(R0), 0o6777)
    t.run("bob", write_as, R0, os.O_WRONLY)
    assert mode(t.p(R0)) == 0o777, oct(mode(t.p(R0)))


@case(EVERYWHERE, "found by this file's setid_cleared_on_write_by_other (the kernel's kill-priv)")
def setgid_cleared_on_write_by_non_member(t):
    """S_ISGID without group execute is cleared by a write from a user
    outside the file's group (the kernel's setattr_should_drop_sgid), and
    chown(f, -1, -1) by such a user who does not own the file is EPERM
    (the mode change it implies is the owner's); without S_ISGID it is
    allowed."""
    d = open_dir(t)
    for name in ("f", "g", "plain"):
        f = os.path.join(d, name)
        make(f, b"", 0o666 if name == "plain" else 0o2666)
        os.chown(f, 0, 3000)
    expect_errno(errno.EPERM, t.run, "carol", os.chown, "a/g", -1, -1)
    t.run("carol", os.chown, "a/plain", -1, -1)
    t.run("carol", write_as, "a/f", os.O_RDWR)
    assert mode(os.path.join(d, "f")) == 0o666, oct(mode(os.path.join(d, "f")))


@case(EVERYWHERE, "found by differential_test.py (direct-write-keeps-setid); f93321f decides at open")
def setid_cleared_on_write_after_chmod(t):
    """The bits are cleared by a write through an fd opened before they
    were set (the handle's kind was chosen at open)."""
    open_dir(t)

    def scenario():
        fd = os.open("a/f", os.O_WRONLY | os.O_CREAT, 0o755)
        os.chmod("a/f", 0o4755)
        os.write(fd, b"x")
        os.close(fd)
        return stat.S_IMODE(os.stat("a/f").st_mode)
    got = t.run("alice", scenario)
    assert got == 0o755, oct(got)


@case(EVERYWHERE, "pjdfstest truncate/ftruncate (the kernel's kill-priv on truncate)")
def setid_cleared_on_truncate_by_other(t):
    """truncate(2) and ftruncate(2) by a user without CAP_FSETID clear them."""
    d = open_dir(t)
    for name in ("t", "ft"):
        make(os.path.join(d, name), b"data", 0o6777)
    t.run("alice", os.truncate, "a/t", 1)

    def ftrunc():
        fd = os.open("a/ft", os.O_WRONLY)
        os.ftruncate(fd, 2)
        os.close(fd)
    t.run("alice", ftrunc)
    assert (mode(os.path.join(d, "t")), mode(os.path.join(d, "ft"))) == (0o777, 0o777)


@case(EVERYWHERE, "found by differential_test.py (otrunc-keeps-setid)")
def setid_cleared_on_truncating_open(t):
    """So does an open with O_TRUNC by such a user."""
    d = open_dir(t)
    make(os.path.join(d, "f"), b"data", 0o6777)
    t.run("carol", lambda: os.close(os.open("a/f", os.O_WRONLY | os.O_TRUNC)))
    assert mode(os.path.join(d, "f")) == 0o777, oct(mode(os.path.join(d, "f")))


@case(EVERYWHERE, "pjdfstest chown/00; overlay_fs.cc SetAttr (chown before chmod)")
def chown_clears_setid(t):
    """chown of a regular file clears S_ISUID and S_ISGID-with-group-execute,
    by root too; a directory keeps its bits."""
    d = open_dir(t)
    f, g, sub = os.path.join(d, "f"), os.path.join(d, "g"), os.path.join(d, "sub")
    make(f, b"", 0o6755)
    os.chown(f, 1001, -1)
    assert (owner(f), mode(f)) == ((1001, 0), 0o755), (owner(f), oct(mode(f)))
    make(g, b"", 0o6755)
    os.chown(g, 1001, 1001)
    os.chmod(g, 0o6755)
    t.run("alice", os.chown, "a/g", -1, 3000)
    assert (owner(g), mode(g)) == ((1001, 3000), 0o755), (owner(g), oct(mode(g)))
    os.mkdir(sub)
    os.chmod(sub, 0o6755)
    os.chown(sub, 1002, 3000)
    assert mode(sub) == 0o6755, oct(mode(sub))


@case(EVERYWHERE, "883df09 (FinishCreate sets the mode asked for after the daemon's chown)")
def create_keeps_requested_setid(t):
    """A file made with set-id bits keeps them (the daemon's chown of the
    new file must not clear them); mkdir keeps the sticky bit only."""
    old = os.umask(0)
    try:
        os.close(os.open(t.p("su"), os.O_WRONLY | os.O_CREAT, 0o6755))
        os.mkdir(t.p("dir"), 0o7777)
    finally:
        os.umask(old)
    assert (mode(t.p("su")), mode(t.p("dir"))) == (0o6755, 0o1777), \
        (oct(mode(t.p("su"))), oct(mode(t.p("dir"))))
    open_dir(t)
    t.run("alice", lambda: os.close(os.open("a/s", os.O_WRONLY | os.O_CREAT, 0o4755)))
    t.run("carol", lambda: os.close(os.open("a/g", os.O_WRONLY | os.O_CREAT, 0o2755)))
    assert (mode(t.p("a/s")), owner(t.p("a/s"))) == (0o4755, (1001, 1001))
    assert (mode(t.p("a/g")), owner(t.p("a/g"))) == (0o2755, (1003, 3001))


@case(EVERYWHERE, "pjdfstest chmod/11 (S_ISGID dropped for a group not the owner's)")
def chmod_by_owner_and_others(t):
    """Only the owner (or root) may chmod (EPERM); an owner outside the
    file's group setting S_ISGID has it silently dropped."""
    d = open_dir(t)
    f = os.path.join(d, "f")
    make(f, b"", 0o644)
    os.chown(f, 1001, 3001)
    expect_errno(errno.EPERM, t.run, "bob", os.chmod, "a/f", 0o600)
    t.run("alice", os.chmod, "a/f", 0o2755)
    assert mode(f) == 0o755, oct(mode(f))
    t.run("alice", os.chmod, "a/f", 0o4755)
    assert mode(f) == 0o4755, oct(mode(f))
    expect_errno(errno.EPERM, t.run, "alice", os.chmod, R0, 0o600)  # root's view file


# --- Owners, groups, umask ----------------------------------------------------

@case(EVERYWHERE, "85d4950 (chown(f, -1, -1) changes the ctime, as on a local file system)")
def chown_nothing_changes_ctime(t):
    """chown(f, -1, -1) succeeds, changes nothing but the ctime: for a new
    file by its owner, a view file by root, a symlink by lchown."""
    open_dir(t)
    make(t.p("a/f"))
    os.chown(t.p("a/f"), 1001, 1001)
    os.symlink("f", t.p("a/l"))
    os.lchown(t.p("a/l"), 1001, 1001)
    for who, rel, follow in (("alice", "a/f", True), ("root", R0, True), ("alice", "a/l", False)):
        before = os.lstat(t.p(rel))
        time.sleep(0.05)
        t.run(who, lambda: os.chown(rel, -1, -1, follow_symlinks=follow))
        after = os.lstat(t.p(rel))
        assert after.st_ctime_ns > before.st_ctime_ns, (rel, before.st_ctime_ns, after.st_ctime_ns)
        assert (after.st_uid, after.st_gid, after.st_mode, after.st_mtime_ns) == \
            (before.st_uid, before.st_gid, before.st_mode, before.st_mtime_ns), (rel, before, after)


@case(EVERYWHERE, "883df09 (FUSE_CAP_DONT_MASK; the daemon's umask, 077 here, undone)")
def umask_applied_once(t):
    """The caller's umask, applied exactly once, to files, directories,
    FIFOs, sockets and mknod'ed files; the daemon's own does not show."""
    open_dir(t)

    def make_all(suffix):
        os.close(os.open(f"a/f{suffix}", os.O_WRONLY | os.O_CREAT, 0o666))
        os.mkdir(f"a/d{suffix}", 0o777)
        os.mkfifo(f"a/p{suffix}", 0o666)
        os.mknod(f"a/s{suffix}", 0o666 | stat.S_IFSOCK)
        os.mknod(f"a/r{suffix}", 0o666 | stat.S_IFREG)
    for umask, want_file, want_dir in ((0o022, 0o644, 0o755), (0o000, 0o666, 0o777),
                                       (0o077, 0o600, 0o700), (0o027, 0o640, 0o750)):
        t.run("alice", make_all, f"{umask:o}", umask=umask)
        got = {k: mode(t.p(f"a/{k}{umask:o}")) for k in "fdpsr"}
        assert got == {"f": want_file, "d": want_dir, "p": want_file, "s": want_file,
                       "r": want_file}, (oct(umask), {k: oct(v) for k, v in got.items()})


@case(EVERYWHERE, "883df09 (new entries are the caller's; symlinks chown'ed without following)")
def new_entries_belong_to_their_maker(t):
    """What a user makes is theirs (uid, primary gid): files, directories,
    FIFOs, sockets, symlinks; a hard link is the linked file's."""
    open_dir(t)
    make(t.p("a/roots"), b"", 0o666)  # protected_hardlinks: bob may link what he may write

    def make_all():
        os.close(os.open("a/f", os.O_WRONLY | os.O_CREAT, 0o644))
        os.mkdir("a/d")
        os.mkfifo("a/p")
        os.mknod("a/s", 0o644 | stat.S_IFSOCK)
        os.symlink("f", "a/l")
        os.link("a/roots", "a/h")
    t.run("bob", make_all)
    for rel in ("a/f", "a/d", "a/p", "a/s", "a/l"):
        assert owner(t.p(rel)) == (1002, 1002), (rel, owner(t.p(rel)))
    assert owner(t.p("a/h")) == (0, 0)


@case(EVERYWHERE, "883df09 (FinishCreate: in a setgid directory the directory's group)")
def setgid_directory_inheritance(t):
    """In a setgid directory new entries get its group; new directories are
    setgid too (and pass it on); a non-member's S_ISGID on a new file is
    dropped."""
    g = t.p("g")
    os.mkdir(g)
    os.chown(g, 0, 3000)
    os.chmod(g, 0o2777)

    def as_member():
        os.close(os.open("g/f", os.O_WRONLY | os.O_CREAT, 0o644))
        os.mkdir("g/d", 0o755)
        os.mkdir("g/d/e", 0o755)
        os.symlink("f", "g/l")
        os.mkfifo("g/p", 0o644)
    t.run("alice", as_member)
    assert [owner(t.p(r)) for r in ("g/f", "g/d", "g/d/e", "g/l", "g/p")] == [(1001, 3000)] * 5
    assert mode(t.p("g/f")) == 0o644
    assert (mode(t.p("g/d")), mode(t.p("g/d/e"))) == (0o2755, 0o2755), \
        (oct(mode(t.p("g/d"))), oct(mode(t.p("g/d/e"))))
    t.run("carol", lambda: os.close(os.open("g/c", os.O_WRONLY | os.O_CREAT, 0o2755)))
    assert (owner(t.p("g/c")), mode(t.p("g/c"))) == ((1003, 3000), 0o755), \
        (owner(t.p("g/c")), oct(mode(t.p("g/c"))))


# --- Sticky directories ---------------------------------------------------------

@case(EVERYWHERE, "pjdfstest unlink/11, rename/09-10, rmdir/11 (sticky directories)")
def sticky_directory(t):
    """In a sticky directory only an entry's owner, the directory's owner or
    root may unlink, rename or replace it (EPERM otherwise)."""
    os.mkdir(t.p("s"))
    os.chmod(t.p("s"), 0o1777)

    def alices():
        os.close(os.open("s/f", os.O_WRONLY | os.O_CREAT, 0o666))
        os.mkdir("s/d", 0o777)
    t.run("alice", alices)
    t.run("bob", lambda: os.close(os.open("s/b", os.O_WRONLY | os.O_CREAT, 0o666)))
    expect_errno(errno.EPERM, t.run, "bob", os.unlink, "s/f")
    expect_errno(errno.EPERM, t.run, "bob", os.rename, "s/f", "s/g")
    expect_errno(errno.EPERM, t.run, "bob", os.rename, "s/b", "s/f")
    expect_errno(errno.EPERM, t.run, "bob", os.rmdir, "s/d")
    expect_errno(errno.EPERM, t.run, "alice", os.rename, "s/b", "s/b2")
    t.run("alice", os.rename, "s/f", "s/f2")
    t.run("alice", os.rmdir, "s/d")
    os.unlink(t.p("s/b"))  # root
    # The directory's owner may remove anyone's.
    os.chown(t.p("s"), 1002, 1002)
    t.run("bob", os.unlink, "s/f2")
    assert sorted(os.listdir(t.p("s"))) == []


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
    directory is copied up too."""
    def check():
        for rel in ("", TAG):
            st = os.stat(t.p(rel))
            subdirs = sum(1 for n in os.listdir(t.p(rel)) if os.path.isdir(t.p(os.path.join(rel, n)))
                          and not os.path.islink(t.p(os.path.join(rel, n))))
            assert st.st_nlink in (1, 2 + subdirs), (rel, st.st_nlink, subdirs)
    check()
    os.chmod(t.p(R0), 0o600)
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


# --- Running ----------------------------------------------------------------------


class Env:
    def __init__(self, ucfs, fixtures, work):
        self.ucfs, self.work = ucfs, work
        self.lower = pt.Lower(ucfs, fixtures, work)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    strict = "--strict" in sys.argv or os.environ.get("UCFS_POSIX_STRICT") == "1"
    kinds = set(EVERYWHERE)
    for a in sys.argv[1:]:
        if a.startswith("--targets="):
            kinds = set(a.split("=", 1)[1].split(","))
    ucfs, fixtures, wanted = os.path.realpath(args[0]), os.path.realpath(args[1]), set(args[2:])
    unknown = wanted - {name for name, *_ in CASES}
    assert not unknown, f"no such case: {sorted(unknown)}"
    assert set(KNOWN_FAILING) <= {name for name, *_ in CASES}
    os.umask(0o022)
    work = pt.new_work_dir("ucfs_posix_cases_")
    passed = failed = known = 0
    started = time.time()
    try:
        env = Env(ucfs, fixtures, work)
        for name, targets, origin, fn in CASES:
            if wanted and name not in wanted:
                continue
            for kind in (k for k in targets if k in kinds):
                label = f"{name} [{kind}]"
                error = None
                try:
                    t = Target(kind, env)
                    try:
                        fn(t)
                    finally:
                        t.close()
                except Exception as e:  # noqa: BLE001 - reported below
                    import traceback
                    error = traceback.format_exc()
                    error_line = f"{type(e).__name__}: {e}"
                bug = KNOWN_FAILING.get(name) if kind == "ucfs" else None
                if error is None and bug and not strict:
                    failed += 1
                    print(f"FAILED: {label} passes: take it off KNOWN_FAILING ({bug} is fixed?)")
                elif error is None:
                    passed += 1
                    print(f"ok: {label}")
                elif bug and not strict:
                    known += 1
                    print(f"known bug: {label} ({bug}): {error_line}")
                else:
                    failed += 1
                    print(f"FAILED: {label} ({origin})\n{error}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(CASES)} cases; {known} known bugs seen; {time.time() - started:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
