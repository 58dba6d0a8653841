"""posix_cases_test.py's cases: set-id bits; owners, groups and the umask; sticky
directories."""
import errno
import os
import stat
import time

from posix_cases_lib import EVERYWHERE, R0, case, expect_errno, make, mode, open_dir, owner


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
    outside the file's group (the kernel's setattr_should_drop_sgid),
    through a read-write fd and a write-only (direct) one alike, and by
    chown(f, -1, -1) by its owner outside the group; a member's write
    keeps it."""
    d = open_dir(t)
    for name in ("rw", "wo", "member", "own"):
        f = os.path.join(d, name)
        make(f, b"", 0o2666)
        os.chown(f, 1003 if name == "own" else 0, 3000)
        os.chmod(f, 0o2666)
    t.run("carol", write_as, "a/rw", os.O_RDWR)
    t.run("carol", write_as, "a/wo", os.O_WRONLY)
    t.run("alice", write_as, "a/member", os.O_WRONLY)
    t.run("carol", os.chown, "a/own", -1, -1)
    got = {n: mode(os.path.join(d, n)) for n in ("rw", "wo", "member", "own")}
    assert got == {"rw": 0o666, "wo": 0o666, "member": 0o2666, "own": 0o666}, \
        {n: oct(m) for n, m in got.items()}


@case(EVERYWHERE, "found by setgid_cleared_on_write_by_non_member (the kernel's kill-priv)")
def chown_nothing_by_non_member_of_setgid_file(t):
    """chown(f, -1, -1) of a file with S_ISGID and no group execute by a
    user who neither owns it nor is of its group is EPERM (the mode change
    it implies is the owner's); without S_ISGID it is allowed."""
    d = open_dir(t)
    for name in ("g", "plain"):
        f = os.path.join(d, name)
        make(f, b"", 0o666 if name == "plain" else 0o2666)
        os.chown(f, 0, 3000)
    t.run("carol", os.chown, "a/plain", -1, -1)
    expect_errno(errno.EPERM, t.run, "carol", os.chown, "a/g", -1, -1)


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


@case(EVERYWHERE, "found by setid_cleared_on_write_after_chmod (the kernel's cached mode)")
def hard_link_after_write_cleared_setid(t):
    """Once a write through an fd opened before the file was made set-id
    cleared its bits, another user may hard-link it at once
    (fs.protected_hardlinks refuses set-id files only, by the mode the
    kernel has cached, which ucfs must have it drop)."""
    open_dir(t)

    def scenario():
        fd = os.open("a/f", os.O_WRONLY | os.O_CREAT, 0o777)
        os.fchmod(fd, 0o4777)
        os.write(fd, b"x")
        os.close(fd)
    t.run("alice", scenario, umask=0)
    t.run("bob", os.link, "a/f", "a/g")
    assert os.stat(t.p("a/g")).st_nlink == 2


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
