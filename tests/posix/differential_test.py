#!/usr/bin/python3
"""The writable mount against kernel overlayfs: the same random sequences of
file operations, every answer and the trees they leave compared.

Each sequence runs twice from the same starting tree: in (a) a writable
ucfs mount of the fixture at its own world size (`ucfs mount --world-size 4
--upper DIR -o allow_other`, the daemon root, as a shared mount is), and in
(b) overlayfs (`mount -t overlay`, options as close to ucfs's as it has:
posix_testing.OVERLAY_OPTIONS) over the tree the ucfs mount shows
(posix_testing.Lower says why that, not the fixture's bytes). Every
operation runs in a worker forked for its user (posix_testing.USERS: root
and four others with their own and shared supplementary groups;
setgroups/setresgid/setresuid), with the umask the operation names; a
worker keeps the fds it opened, so a file can stay open across other
users' unlinks and renames. Then, compared: every operation's return value
or errno; the final trees -- names, types, modes, owners, sizes, contents,
symlink targets, link counts and which names are one file, user.* xattrs,
times where they are deterministic (any before the run began: the view's,
and those utimensat set; times taken from the clock during the run differ
between the two runs by nature); the ucfs tree again after a remount of
the same DIR; and that the ucfs daemon exits 0 after its unmount.

The operations: open (O_CREAT, O_EXCL, O_TRUNC, O_APPEND, modes with set-id
and sticky bits) into per-user fd slots, write/pwrite/read/pread/fstat/
ftruncate/fchmod/fchown/futimens/close through them, whole-file reads and
writes by path, mkdir, rmdir, unlink, rm -r, chmod, chown/lchown, link,
symlink, readlink, rename (plain, RENAME_NOREPLACE, RENAME_EXCHANGE; over
files and directories), truncate, set/get/list/removexattr (follow or not),
utimensat (explicit times, UTIME_NOW, UTIME_OMIT), mknod of FIFOs, sockets
and regular files, stat/lstat/access/listdir; on the fixture's files
(copy-up) and on new ones, in a sticky directory, a setgid directory and
the view's tag directory. Every open adds O_NONBLOCK (a FIFO must not hang
a worker) and O_CLOEXEC.

A sequence that diverges is shrunk (delta debugging: ops dropped while a
divergence of the same kind remains), and printed as a reproducer: its
ops, the first difference, a JSON file ($UCFS_POSIX_OUT, else /tmp) and
the command that replays it.

The known, intended differences (ucfs(1), THE WRITABLE MOUNT; README) are
KNOWN_DIFFERENCES below; the divergences this test found that are ucfs's
bugs, until they are fixed, KNOWN_BUGS (each with its reproducer). Each is
excused where the comparison is made, as narrowly as the comparison can
tell it, and counted in the summary; --known lists them, --strict fails on
the bugs.

By default (ctest) 250 sequences of 80 operations, seeds 1-250, 20-45 s
on two cores with a release build; no sequence is started after 120 s (a
slower, sanitized build runs fewer), and at most the first two that
diverge are shrunk (for 45 s each) and printed whole; the others are
named, with their reproducers' files.

usage: differential_test.py UCFS_BIN FIXTURES_DIR [--seed S] [--sequences N]
           [--ops M] [--seconds T] [--shrink-seconds T] [--shrinks N]
           [--no-shrink] [--strict] [--stats] [--replay FILE] [--known]
  --seed S            first sequence's seed (each next one S+1); env UCFS_POSIX_SEED
  --sequences N       how many sequences; env UCFS_POSIX_SEQUENCES
  --ops M             operations per sequence; env UCFS_POSIX_OPS
  --seconds T         start no sequence after T seconds (0: no limit); env UCFS_POSIX_SECONDS
  --shrink-seconds T  time to shrink one divergent sequence
  --shrinks N         how many divergent sequences to shrink
  --strict            fail on KNOWN_BUGS too; env UCFS_POSIX_STRICT=1
  --stats             print how each operation was answered, counted
  --replay FILE       run the sequence in FILE (a reproducer this test wrote)
                      on both and print every answer side by side
Ends with the line "N passed, M failed" (sequences).
"""
import argparse
import json
import os
import random
import shutil
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import posix_testing as pt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# What is not compared, or not generated, and why. Each is applied where the
# comparison is made (look for its key).
KNOWN_DIFFERENCES = {
    "lower-is-the-view": (
        "overlayfs's lower directory is the tree a read-only ucfs mount at the fixture's world "
        "size shows, not the fixture: ucfs lays rank files out anew (their bytes, sizes and "
        "mtimes differ from the source's) even at the size they were saved at"),
    "view-extras": (
        "a ucfs mount may show view directories the source lacks (<tag>_fp32/, <tag>_universal, "
        "latest_universal; a writable mount only with --views): no operation names them, listings "
        "and the tree walk leave out the names a read-only mount at the same size shows at its "
        "root and the source has not"),
    "merged-dir-nlink": (
        "overlayfs shows a directory merged with a lower one with nlink 1 (it does not count "
        "them); a directory's link count is compared only where overlayfs gives a count"),
    "dir-size": "a directory's st_size is its file system's own: never compared",
    "identity": (
        "st_ino, st_dev, st_blocks, st_blksize and ctime are not comparable between file "
        "systems: which names are one file is compared instead (ctime: posix_cases_test.py)"),
    "clock-times": (
        "a time taken from the clock during the run differs between the two runs by nature: "
        "times before the run began (the view's, and those utimensat set) are compared exactly, "
        "later ones only as 'new'"),
    "view-dir-rename": (
        "a directory holding entries of the view cannot be renamed (EXDEV): overlayfs without "
        "redirect_dir answers the same, so it is compared, not excused"),
    "view-xattrs": (
        "user.ucfs.* are the view's own attributes, read-only in ucfs (EPERM): no operation sets "
        "them and they are left out of listings (the fixture at its own size shows none)"),
    "wh-name-length": (
        "ucfs stores a name beginning with .wh. escaped, so such a name may be at most 245 bytes "
        "(ENAMETOOLONG past it; 255 elsewhere): no operation makes one that long "
        "(posix_cases_test.py checks the limit)"),
    "not-generated": (
        "O_TMPFILE (EOPNOTSUPP: libfuse 3.14 has no operation for it), opening device nodes "
        "(FUSE mounts are nodev), file locks (local to the kernel on FUSE), xattrs outside user.*"),
    "fuse-atime": (
        "a read the kernel serves from the mount's page cache never reaches ucfs, so it does not "
        "move the file's atime (FUSE leaves atimes to the file system), and when one does, the "
        "kernel learns of the atime it moved only once its cached attributes expire (1 s): a "
        "file's atime older in ucfs than overlayfs's 'new' is not compared"),
    "walk-reads-dirs": (
        "the tree walk reads every directory, which (relatime) may move a directory's atime: "
        "directories' atimes are not compared across the remount"),
}

# Divergences found that are ucfs's bugs, not intended: excused here, narrowly,
# so that the test guards everything else until they are fixed; --strict (or
# UCFS_POSIX_STRICT=1) fails on them. Remove an entry with its fix.
KNOWN_BUGS = {
    "copy-up-touches-parent": (
        "copying a file (or directory) up into DIR changes the mtime of the directory it is "
        "in (the copy is renamed into it), where overlayfs restores the parent's times: a chmod, "
        "chown, xattr, link or open for writing of a view file moves its directory's mtime; "
        "the kernel sees it once its cached attributes expire (1 s) or after a remount. "
        "Excused: a directory's mtime 'new' in ucfs where overlayfs keeps an older one, or "
        "older before a remount and 'new' after. Reproducer: chmod 600 "
        "global_step4/zero_pp_rank_0_mp_rank_00_model_states.pt; sleep 1.1; "
        "stat -c %y global_step4"),
    "merged-dir-nlink-undercount": (
        "the link count of a directory merged with the view's is its upper directory's: view "
        "subdirectories are not counted (the mount's root, listing the view's global_step4/, "
        "shows nlink 2), and it changes when a view directory is copied up "
        "without the kernel being told (stale for 1 s: before a remount 2, after 3). overlayfs "
        "shows such a directory with nlink 1 (unknown). Excused: a merged directory's nlink "
        "changing across a remount. Reproducer: stat -c %h .; truncate -s 8000 "
        "global_step4/zero_pp_rank_2_mp_rank_00_optim_states.pt; sleep 1.1; stat -c %h ."),
    "opendir-touches-atime": (
        "opening a directory moves its atime (ucfs lists the upper directory at opendir, and "
        "under relatime that is an access), where only reading it (getdents) should: overlayfs "
        "moves it at listdir, not at open. Excused: a directory's atime 'new' in ucfs where "
        "overlayfs keeps an older one. Reproducer: mkdir d; touch -a -d 2001-09-09 d; python3 -c "
        "'import os; os.close(os.open(\"d\", os.O_RDONLY | os.O_DIRECTORY))'; sleep 1.1; "
        "stat -c %x d"),
    "truncating-copy-up-atime": (
        "a view file copied up without its contents (open with O_TRUNC, truncate to 0) gets the "
        "time of the copy as its atime instead of the one it was shown with (its mtime is "
        "the truncation's, rightly), where overlayfs keeps the lower file's atime. Excused: a "
        "file's atime 'new' in ucfs where overlayfs keeps an older one. Reproducer: truncate -s 0 "
        "global_step4/zero_pp_rank_0_mp_rank_00_model_states.pt; sleep 1.1; stat -c %x "
        "global_step4/zero_pp_rank_0_mp_rank_00_model_states.pt (truncate -s 5 keeps it)"),
    "otrunc-keeps-setid": (
        "an open with O_TRUNC by a user without CAP_FSETID leaves a set-id file's bits set; "
        "truncate(2) and write(2) by that user clear them, as the kernel does on overlayfs and "
        "tmpfs for all three (ucfs asks for FUSE_CAP_ATOMIC_O_TRUNC: the truncation on open, "
        "and with it the mode change that would clear the bits, is then left to ucfs). "
        "Excused: a file's mode keeping set-id bits overlayfs cleared, in a sequence with such "
        "an open. Reproducer: as root, touch f; chmod 6777 f; then as another user, : > f; "
        "stat -c %a f (6777, not 777)"),
    "direct-write-keeps-setid": (
        "a write through a write-only fd opened before the file had set-id bits (an open, then "
        "chmod u+s or g+s, then write) leaves them set when the writer lacks CAP_FSETID: the "
        "handle was made direct (FOPEN_DIRECT_IO) at open, when the file was not set-id, and "
        "the kernel clears the bits only on buffered writes (f93321f decides at open only). "
        "Excused: a file's mode keeping set-id bits overlayfs cleared, in a sequence where a "
        "chmod to a set-id mode follows a write-only open by a user other than root. "
        "Reproducer: as alice, in a directory she may write: python3 -c 'import os; "
        "fd = os.open(\"f\", os.O_WRONLY | os.O_CREAT, 0o755); os.chmod(\"f\", 0o4755); os.write(fd, b\"x\"); print(oct(os.stat(\"f\").st_mode))' "
        "(0o104755, not 0o100755)"),
    "view-handle-after-copy-up": (
        "an fd opened read-only on a file of the view stays bound to the view's bytes and "
        "attributes after the file is copied up and changed through another fd or its name "
        "(written, truncated, renamed, unlinked): reads return the old bytes (or end early), "
        "fstat the old size and nlink 1, where overlayfs (since Linux 4.19) reads the copy. "
        "Excused: read, pread and fstat results through an fd opened read-only on a path of the "
        "view. Reproducer: exec 3<latest; truncate -s 4096 latest; wc -c <&3 (12, not 4096)"),
    "view-handle-poisons-page-cache": (
        "the same, seen through other fds: reads through a view file's read-only fd fill the "
        "mount's page cache (one per inode) with the view's bytes after the file was copied up, "
        "and a short read through it shrinks the kernel's size of the file, so reads through "
        "any other fd, even one opened afterwards, return the view's bytes and stop at the "
        "view's size (DIR holds the right bytes). Excused: read, pread and whole-file reads of "
        "a path an earlier fd took read-only as a view file. Reproducer, in global_step4: python3 -c "
        "'import os; F = \"zero_pp_rank_1_mp_rank_00_model_states.pt\"; r = os.open(F, "
        "os.O_RDONLY); w = os.open(F, os.O_RDWR); os.pwrite(w, b\"xx\", 0); os.pread(r, 100, "
        "4000); print(os.pread(w, 4, 0))' (b'PK\\x03\\x04', not b'xx')"),
    "replaced-view-dir-not-movable": (
        "a directory made or moved in place of a removed view directory (rm -r global_step4; "
        "mkdir global_step4) cannot be renamed (EXDEV) though it holds nothing of the view "
        "(it is opaque): overlayfs renames it. Excused: EXDEV from a rename of such a path, "
        "where overlayfs renames it (nothing after it is compared: the trees differ from then "
        "on). Reproducer: rm -r global_step4; mkdir global_step4; python3 -c 'import os; "
        "os.rename(\"global_step4\", \"moved\")' (EXDEV; mv(1) hides it by copying)"),
    "removed-dir-fd-stale": (
        "fstat (and fchmod, fchown, futimens) through an fd of a directory that was removed "
        "fails with ESTALE, where overlayfs and tmpfs answer (nlink 0 on tmpfs). Excused: ESTALE "
        "from these through an fd whose path was removed (rmdir, rm -r) after the open, where "
        "overlayfs answers. Reproducer: python3 -c 'import os; os.mkdir(\"d\"); fd = "
        "os.open(\"d\", os.O_RDONLY); os.rmdir(\"d\"); os.fstat(fd)' (ESTALE)"),
    "unlinked-view-file-setattr": (
        "fchmod, fchown and futimens through a read-only fd of a view file whose name is gone "
        "(unlinked, renamed over, removed with its directory) fail with ESTALE, where ucfs(1) "
        "says an open file stays usable (overlayfs succeeds if its fd's file was copied up "
        "before, else fails with ENOENT or EEXIST). Excused: ESTALE from these through an fd "
        "opened read-only on a path of the view. Reproducer: exec 3<latest; rm latest; "
        "python3 -c 'import os; os.fchmod(3, 0o600)' (ESTALE)"),
    "sgid-kept-for-non-member": (
        "a write by a user outside a file's group leaves S_ISGID set on a file without group "
        "execute, where the kernel (setattr_should_drop_sgid) clears it on overlayfs and tmpfs: "
        "the mode change the kernel's FUSE code makes for a file system that does not handle "
        "kill-priv itself (FUSE_HANDLE_KILLPRIV_V2) clears S_ISGID only with group execute. "
        "For the same reason chown(f, -1, -1) of such a file by a user who does not own it "
        "succeeds, where overlayfs and tmpfs refuse the mode change it implies (EPERM). "
        "Excused: a file's mode keeping S_ISGID only, without group execute; chown or fchown "
        "to -1, -1 by a user other than root that succeeds where overlayfs says EPERM. "
        "Reproducer: as root, touch f; chgrp 3000 f; chmod 2666 f; as a user outside group "
        "3000, echo x >> f; stat -c %a f (2666, not 666)"),
}

# --- The operations, as a worker runs them -------------------------------

FLAGS = {name: getattr(os, name) for name in (
    "O_RDONLY", "O_WRONLY", "O_RDWR", "O_CREAT", "O_EXCL", "O_TRUNC", "O_APPEND", "O_NOFOLLOW",
    "O_DIRECTORY")}
XATTR_FLAGS = {"XATTR_CREATE": os.XATTR_CREATE, "XATTR_REPLACE": os.XATTR_REPLACE}
RENAME_FLAGS = {"RENAME_NOREPLACE": pt.RENAME_NOREPLACE, "RENAME_EXCHANGE": pt.RENAME_EXCHANGE}
KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink",
         stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk"}
MKNOD_KINDS = {"fifo": stat.S_IFIFO, "sock": stat.S_IFSOCK, "reg": stat.S_IFREG}

RUN_START_NS = time.time_ns()
EXTRA_NAMES = set()  # view-extras: filled from posix_testing.Lower before any fork


def bits(table, names):
    v = 0
    for n in names:
        v |= table[n]
    return v


def data(n, seed):
    return bytes((seed * 131 + i * 7 + (i >> 8)) & 0xFF for i in range(n))


def when(ns):
    # clock-times
    return ns if ns < RUN_START_NS else "new"


def norm_stat(st):
    out = {"type": KINDS.get(stat.S_IFMT(st.st_mode), "?"), "mode": "%05o" % stat.S_IMODE(st.st_mode),
           "uid": st.st_uid, "gid": st.st_gid, "nlink": st.st_nlink,
           "mtime": when(st.st_mtime_ns), "atime": when(st.st_atime_ns)}
    if out["type"] != "dir":  # dir-size
        out["size"] = st.st_size
    return out


def user_xattrs(names):
    # view-xattrs
    return sorted(n for n in names if n.startswith("user.") and not n.startswith("user.ucfs."))


def fd_of(state, slot):
    return state["fds"].get(slot, -1)  # -1: EBADF, as an fd never opened


def op_open(state, path, flags, mode, slot):
    fd = os.open(path, bits(FLAGS, flags) | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    old = state["fds"].pop(slot, None)
    if old is not None:
        os.close(old)
    state["fds"][slot] = fd


def op_close(state, slot):
    os.close(state["fds"].pop(slot, -1))


def op_write(state, slot, n, seed):
    return os.write(fd_of(state, slot), data(n, seed))


def op_pwrite(state, slot, offset, n, seed):
    return os.pwrite(fd_of(state, slot), data(n, seed), offset)


def op_read(state, slot, n):
    return os.read(fd_of(state, slot), n)


def op_pread(state, slot, offset, n):
    return os.pread(fd_of(state, slot), n, offset)


def op_fstat(state, slot):
    return norm_stat(os.fstat(fd_of(state, slot)))


def op_ftruncate(state, slot, length):
    os.ftruncate(fd_of(state, slot), length)


def op_fchmod(state, slot, mode):
    os.fchmod(fd_of(state, slot), mode)


def op_fchown(state, slot, uid, gid):
    os.fchown(fd_of(state, slot), uid, gid)


def op_futimens(state, slot, atime, mtime):
    pt.futimens(fd_of(state, slot), atime, mtime)


def op_stat(state, path):
    return norm_stat(os.stat(path))


def op_lstat(state, path):
    return norm_stat(os.lstat(path))


def op_access(state, path, mode):
    if pt.libc.access(os.fsencode(path), mode) != 0:
        err = pt.ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def op_listdir(state, path):
    # view-extras: names no operation makes
    return sorted(n for n in os.listdir(path) if n not in EXTRA_NAMES)


def op_readfile(state, path, n):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.read(fd, n)
    finally:
        os.close(fd)


def op_writefile(state, path, flags, mode, n, seed):
    fd = os.open(path, bits(FLAGS, flags) | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        return os.write(fd, data(n, seed))
    finally:
        os.close(fd)


def op_mkdir(state, path, mode):
    os.mkdir(path, mode)


def op_rmdir(state, path):
    os.rmdir(path)


def op_unlink(state, path):
    os.unlink(path)


def op_rmtree(state, path):
    """rm -r, in name order, stopping at the first error: how many removed."""
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        os.unlink(path)
        return 1
    n = 0
    for name in sorted(os.listdir(path)):
        n += op_rmtree(state, os.path.join(path, name))
    os.rmdir(path)
    return n + 1


def op_chmod(state, path, mode):
    os.chmod(path, mode)


def op_chown(state, path, uid, gid, follow):
    os.chown(path, uid, gid, follow_symlinks=follow)


def op_link(state, src, dst):
    os.link(src, dst, follow_symlinks=False)


def op_symlink(state, target, path):
    os.symlink(target, path)


def op_readlink(state, path):
    return os.readlink(path)


def op_rename(state, src, dst, flags):
    pt.renameat2(src, dst, bits(RENAME_FLAGS, flags))


def op_truncate(state, path, length):
    os.truncate(path, length)


def op_setxattr(state, path, name, n, seed, flags, follow):
    os.setxattr(path, name, data(n, seed), bits(XATTR_FLAGS, flags), follow_symlinks=follow)


def op_getxattr(state, path, name, follow):
    return os.getxattr(path, name, follow_symlinks=follow)


def op_listxattr(state, path, follow):
    return user_xattrs(os.listxattr(path, follow_symlinks=follow))


def op_removexattr(state, path, name, follow):
    os.removexattr(path, name, follow_symlinks=follow)


def op_utimensat(state, path, atime, mtime, follow):
    pt.utimensat(path, atime, mtime, follow)


def op_mknod(state, path, kind, mode):
    os.mknod(path, mode | MKNOD_KINDS[kind])


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def handle(state, name, args):
    return OPS[name](state, *args)


# --- Sequences -----------------------------------------------------------

R0 = "zero_pp_rank_0_mp_rank_00_model_states.pt"
R1 = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
NAMES = ["x", "y", "a", "b", "l", "s", "g", "latest", "global_step4", R0, R1, ".wh.x", ".wh..opq"]
PARENTS = ["", "", "a", "a/b", "s", "g", "global_step4", "x"]
TOO_LONG = "n" * 256
MODES = [0o644, 0o600, 0o666, 0o755, 0o777, 0o700, 0o000, 0o444, 0o4755, 0o2755, 0o6777, 0o1777,
         0o2775, 0o2644, 0o4644, 0o3777]
UMASKS = [0o022, 0o002, 0o077, 0o000, 0o027]
USER_WEIGHTS = {"root": 30, "alice": 25, "bob": 20, "carol": 15, "nobody": 10}
UIDS = [-1, 0, 1001, 1002, 1003, 65534]
GIDS = [-1, 0, 1001, 1002, 3000, 3001, 65534]
TARGETS = ["x", "y", "a", "a/x", "latest", "global_step4", "global_step4/" + R0, "missing", "l",
           "s/x"]
XATTRS = ["user.a", "user.b", "user." + "k" * 40]
SENTINEL_SECONDS = [1000000000, 1234567890, 1500000000]
SENTINEL_NS = [0, 1, 123456789, 999999999]
SLOTS = ["h0", "h1", "h2"]
WEIGHTS = {
    "open": 9, "close": 3, "write": 6, "pwrite": 3, "read": 4, "pread": 2, "fstat": 3,
    "ftruncate": 2, "fchmod": 1, "fchown": 1, "futimens": 1, "stat": 3, "lstat": 2, "access": 2,
    "listdir": 3, "readfile": 4, "writefile": 6, "mkdir": 5, "rmdir": 3, "unlink": 5, "rmtree": 2,
    "chmod": 5, "chown": 4, "link": 4, "symlink": 3, "readlink": 2, "rename": 9, "truncate": 3,
    "setxattr": 4, "getxattr": 2, "listxattr": 2, "removexattr": 2, "utimensat": 4, "mknod": 2,
}
assert set(WEIGHTS) == set(OPS), set(WEIGHTS) ^ set(OPS)


def op(user, umask, name, *args):
    return {"user": user, "umask": umask, "op": name, "args": list(args)}


FD_OPS = {"close", "write", "pwrite", "read", "pread", "fstat", "ftruncate", "fchmod", "fchown",
          "futimens"}
FILE_OPS = {"open", "readfile", "writefile", "truncate", "link"}
DIR_OPS = {"rmdir", "listdir", "rmtree"}
MAKE_OPS = {"mkdir", "mknod", "symlink"}
WRITABLE_BY_ALL = ["a", "s", "g"]


class Generator:
    """Random operations over a small set of names, so that they meet. A
    rough model of what the sequence has made (kinds and owners, updated as
    if every operation succeeded) picks paths that exist more often than
    not, the right kind for the operation, and their owner, root or anyone
    as the user; new names go into directories the user can likely write."""

    def __init__(self, seed, lower_paths, lower_dirs):
        self.r = random.Random(seed)
        self.view_paths = sorted(lower_paths)
        self.view_dirs = sorted(lower_dirs)
        self.kind = {p: ("dir" if p in lower_dirs else "file") for p in lower_paths}
        self.owner = {p: "root" for p in lower_paths}
        self.open_slots = {u: set() for u in USER_WEIGHTS}

    def any_user(self):
        return self.r.choices(list(USER_WEIGHTS), weights=list(USER_WEIGHTS.values()))[0]

    def user_for(self, path):
        r = self.r.random()
        if path in self.owner and r < 0.5:
            return self.owner[path]
        return "root" if r < 0.7 else self.any_user()

    def random_path(self):
        r = self.r
        name = TOO_LONG if r.random() < 0.02 else r.choice(NAMES)
        return os.path.join(r.choice(PARENTS), name)

    def existing(self, kinds=None):
        """A path the model has, of one of these kinds, or any random one."""
        pool = sorted(p for p, k in self.kind.items() if kinds is None or k in kinds)
        if pool and self.r.random() < 0.8:
            return self.r.choice(pool)
        return self.random_path()

    def new_path(self, user):
        """A name in a directory `user` can likely write (often a new one)."""
        r = self.r
        if r.random() < 0.1:  # a name of the view, there or removed: whiteouts, opaque dirs
            return r.choice(self.view_paths)
        dirs = [d for d, k in self.kind.items() if k == "dir" and (
            user == "root" or d in WRITABLE_BY_ALL or self.owner.get(d) == user)]
        if r.random() < 0.15 or not dirs:
            return self.existing() if r.random() < 0.5 else self.random_path()
        parent = r.choice(sorted(dirs) + ([""] if user == "root" else []))
        return os.path.join(parent, TOO_LONG if r.random() < 0.02 else r.choice(NAMES))

    def time(self):
        r = self.r.random()
        if r < 0.25:
            return "now"
        if r < 0.4:
            return "omit"
        return [self.r.choice(SENTINEL_SECONDS), self.r.choice(SENTINEL_NS)]

    def made(self, path, kind, user):
        path = os.path.normpath(path)
        if path not in self.kind:
            self.kind[path] = kind
            self.owner[path] = user

    def gone(self, path):
        path = os.path.normpath(path)
        for p in [p for p in self.kind if p == path or p.startswith(path + "/")]:
            del self.kind[p]
            self.owner.pop(p, None)

    def moved(self, src, dst, exchange):
        src, dst = os.path.normpath(src), os.path.normpath(dst)
        if src not in self.kind or src == dst or dst.startswith(src + "/"):
            return
        a = {p[len(src):]: (self.kind[p], self.owner.get(p)) for p in self.kind
             if p == src or p.startswith(src + "/")}
        b = {p[len(dst):]: (self.kind[p], self.owner.get(p)) for p in self.kind
             if p == dst or p.startswith(dst + "/")}
        self.gone(src)
        self.gone(dst)
        for rest, (k, o) in a.items():
            self.kind[dst + rest], self.owner[dst + rest] = k, o
        if exchange:
            for rest, (k, o) in b.items():
                self.kind[src + rest], self.owner[src + rest] = k, o

    def sequence(self, n):
        ops = [
            # The prologue: a sticky directory anyone may write, a directory
            # anyone may write, a setgid one of alice's and bob's group.
            op("root", 0, "mkdir", "s", 0o1777),
            op("root", 0, "mkdir", "a", 0o777),
            op("root", 0, "mkdir", "g", 0o2777),
            op("root", 0o022, "chown", "g", 0, 3000, True),
        ]
        for p in ("s", "a", "g"):
            self.made(p, "dir", "root")
        while len(ops) < n:
            ops.append(self.one())
        return ops

    def one(self):
        r = self.r
        name = r.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        umask = r.choice(UMASKS)
        mode = r.choice(MODES) if r.random() < 0.85 else r.randrange(0o10000)
        if name in FD_OPS:
            return self.fd_op(name, umask, mode)
        if name in MAKE_OPS:
            user = self.any_user()
            path = self.new_path(user)
            if name == "mkdir":
                self.made(path, "dir", user)
                return op(user, umask, name, path, mode)
            if name == "mknod":
                kind = r.choice(["fifo", "fifo", "sock", "reg"])
                self.made(path, "file" if kind == "reg" else "special", user)
                return op(user, umask, name, path, kind, mode)
            self.made(path, "link", user)
            return op(user, umask, name, r.choice(TARGETS), path)
        if name in ("open", "writefile") and r.random() < 0.4:
            user = self.any_user()
            path = self.new_path(user)  # mostly a new file
            create = True
        else:
            path = self.existing({"file"} if name in FILE_OPS else {"dir"} if name in DIR_OPS
                                 else None)
            user = self.user_for(path)
            create = r.random() < 0.3
        if name == "open":
            flags = [r.choice(["O_RDONLY", "O_WRONLY", "O_RDWR"])]
            if create:
                flags.append("O_CREAT")
            for f, p in (("O_EXCL", 0.15), ("O_TRUNC", 0.2), ("O_APPEND", 0.2),
                         ("O_NOFOLLOW", 0.05), ("O_DIRECTORY", 0.03)):
                if r.random() < p:
                    flags.append(f)
            slot = r.choice(SLOTS)
            self.open_slots[user].add(slot)
            if create:
                self.made(path, "file", user)
            return op(user, umask, name, path, flags, mode, slot)
        if name == "writefile":
            flags = [r.choice(["O_WRONLY", "O_RDWR"])] + (["O_CREAT"] if create else [])
            for f, p in (("O_EXCL", 0.1), ("O_TRUNC", 0.4), ("O_APPEND", 0.3)):
                if r.random() < p:
                    flags.append(f)
            if create:
                self.made(path, "file", user)
            return op(user, umask, name, path, flags, mode, r.choice([0, 1, 12, 3000]),
                      r.randrange(256))
        if name in ("rmdir", "rmtree") and r.random() < 0.3:
            path = r.choice(self.view_dirs)  # so that directories come to replace it
        if name in ("rmdir", "unlink", "rmtree"):
            self.gone(path)
            return op(user, umask, name, path)
        if name == "chmod":
            return op(user, umask, name, path, mode)
        if name == "chown":
            uid = r.choice(UIDS)
            owner = [u for u, x in pt.USERS.items() if x.uid == uid]
            if owner and path in self.owner:
                self.owner[path] = owner[0]
            return op(user, umask, name, path, uid, r.choice(GIDS), r.random() < 0.8)
        if name == "link":
            dst = self.new_path(user)
            self.made(dst, "file", self.owner.get(path, user))
            return op(user, umask, name, path, dst)
        if name == "rename":
            dst = self.new_path(user) if r.random() < 0.6 else self.existing()
            if self.kind.get(os.path.normpath(path)) == "dir" and r.random() < 0.25:
                dst = r.choice(self.view_dirs)  # over (or in place of) the view's
            flags = r.choices([[], ["RENAME_NOREPLACE"], ["RENAME_EXCHANGE"]], weights=[6, 2, 3])[0]
            self.moved(path, dst, flags == ["RENAME_EXCHANGE"])
            return op(user, umask, name, path, dst, flags)
        if name == "truncate":
            return op(user, umask, name, path, r.choice([0, 1, 100, 4096, 7551, 8000, 20000]))
        if name == "access":
            return op(user, umask, name, path, r.choice([os.F_OK, os.R_OK, os.W_OK, os.X_OK,
                                                          os.R_OK | os.W_OK]))
        if name == "readfile":
            return op(user, umask, name, path, r.choice([16, 20000]))
        if name in ("setxattr", "getxattr", "removexattr", "listxattr"):
            follow = r.random() < 0.8
            if name == "listxattr":
                return op(user, umask, name, path, follow)
            xname = r.choice(XATTRS)
            if name == "setxattr":
                return op(user, umask, name, path, xname, r.choice([0, 1, 10, 300]),
                          r.randrange(256),
                          r.choice([[], [], ["XATTR_CREATE"], ["XATTR_REPLACE"]]), follow)
            return op(user, umask, name, path, xname, follow)
        if name == "utimensat":
            return op(user, umask, name, path, self.time(), self.time(), r.random() < 0.8)
        return op(user, umask, name, path)  # stat, lstat, listdir, readlink

    def fd_op(self, name, umask, mode):
        r = self.r
        holders = [u for u, s in self.open_slots.items() if s]
        if holders and r.random() < 0.95:
            user = r.choice(holders)
            slot = r.choice(sorted(self.open_slots[user]))
        else:
            user, slot = self.any_user(), r.choice(SLOTS)
        if name == "close":
            self.open_slots[user].discard(slot)
        args = {
            "close": lambda: [slot],
            "write": lambda: [slot, r.choice([0, 1, 10, 1000, 5000]), r.randrange(256)],
            "pwrite": lambda: [slot, r.choice([0, 5, 4096, 7600, 12000]),
                               r.choice([1, 10, 1000]), r.randrange(256)],
            "read": lambda: [slot, r.choice([1, 100, 4096, 20000])],
            "pread": lambda: [slot, r.choice([0, 1, 4000, 7600, 11600, 30000]),
                              r.choice([1, 100, 4096])],
            "fstat": lambda: [slot],
            "ftruncate": lambda: [slot, r.choice([0, 1, 100, 8000, 20000])],
            "fchmod": lambda: [slot, mode],
            "fchown": lambda: [slot, r.choice(UIDS), r.choice(GIDS)],
            "futimens": lambda: [slot, self.time(), self.time()],
        }[name]()
        return op(user, umask, name, *args)


# --- Running one sequence on both ----------------------------------------


def snapshot(root):
    """Every entry below root: what is compared of it (a dict by relative
    path, "" the root itself), and the sets of names that are one file."""
    entries, inodes = {}, {}

    def walk(rel):
        full = os.path.join(root, rel) if rel else root
        st = os.lstat(full)
        e = norm_stat(st)
        if stat.S_ISLNK(st.st_mode):
            e["target"] = os.readlink(full)
        e["xattrs"] = {n: os.getxattr(full, n, follow_symlinks=False)
                       for n in user_xattrs(os.listxattr(full, follow_symlinks=False))}
        entries[rel] = e
        if stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(full)):
                if rel == "" and name in EXTRA_NAMES:  # view-extras
                    continue
                walk(os.path.join(rel, name))
        else:
            inodes.setdefault(st.st_ino, []).append(rel)

    walk("")
    # Contents last, without touching atimes.
    for rel, e in entries.items():
        if e["type"] == "file":
            fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_NOATIME | os.O_NONBLOCK)
            try:
                chunks = []
                while True:
                    b = os.read(fd, 1 << 20)
                    if not b:
                        break
                    chunks.append(b)
                e["content"] = b"".join(chunks)
            finally:
                os.close(fd)
    links = sorted(sorted(g) for g in inodes.values() if len(g) > 1)
    return {"entries": entries, "links": links}


FIELDS = ["type", "mode", "uid", "gid", "size", "nlink", "mtime", "atime", "target", "xattrs",
          "content"]


class Context:
    """What an excuse may look at: the sequence and ucfs's results, the
    operation whose result is compared (None for the trees), the view's
    paths."""

    def __init__(self, ops, results, index, view_paths, view_dirs=()):
        self.ops, self.results, self.index, self.view_paths = ops, results, index, view_paths
        self.view_dirs = set(view_dirs)

    def at(self, index):
        return Context(self.ops, self.results, index, self.view_paths, self.view_dirs)

    def opens_by_others(self, flag):
        """Whether some open (or whole-file write) with this flag is made
        by a user other than root."""
        return any(o["op"] in ("open", "writefile") and flag in o["args"][1] and
                   o["user"] != "root" for o in self.ops)

    def setid_after_write_only_open(self):
        """Whether a chmod or fchmod to a set-id mode follows a write-only
        open by a user other than root."""
        opened = False
        for o in self.ops:
            if o["op"] == "open" and "O_WRONLY" in o["args"][1] and o["user"] != "root":
                opened = True
            elif opened and o["op"] in ("chmod", "fchmod") and o["args"][1] & 0o6000:
                return True
        return False

    def slot_opened(self):
        """The open that filled the slot the compared operation uses (the
        last one that succeeded), or None."""
        o = self.ops[self.index]
        for i in range(self.index - 1, -1, -1):
            prev = self.ops[i]
            if (prev["op"] == "open" and prev["user"] == o["user"] and
                    prev["args"][3] == o["args"][0] and self.results[i][0] == "ok"):
                return prev
        return None

    def is_view_handle(self, o):
        return (o is not None and "O_RDONLY" in o["args"][1] and "O_TRUNC" not in o["args"][1] and
                os.path.normpath(o["args"][0]) in self.view_paths)

    def through_view_handle(self):
        """Whether the compared operation goes through an fd opened
        read-only on a file of the view."""
        return (self.index is not None and self.ops[self.index]["op"] in FD_OPS and
                self.is_view_handle(self.slot_opened()))

    def view_handle_before(self):
        """Whether the compared operation reads (through an fd or by path) a
        path some earlier successful open took read-only as a view file."""
        o = self.ops[self.index]
        if o["op"] == "readfile":
            path = o["args"][0]
        else:
            opened = self.slot_opened()
            path = opened["args"][0] if opened else None
        return path is not None and any(
            p["op"] == "open" and self.results[i][0] == "ok" and self.is_view_handle(p) and
            os.path.normpath(p["args"][0]) == os.path.normpath(path)
            for i, p in enumerate(self.ops[:self.index]))


    def removed_after_open(self):
        """Whether the path the compared operation's fd was opened on was
        removed (rmdir, rm -r of it or a parent) after the open."""
        opened = self.slot_opened()
        if opened is None:
            return False
        path = os.path.normpath(opened["args"][0])
        start = self.ops.index(opened)
        return any(o["op"] in ("rmdir", "rmtree") and (
            path == os.path.normpath(o["args"][0]) or
            path.startswith(os.path.normpath(o["args"][0]) + "/"))
            for o in self.ops[start + 1:self.index])

    def replaced_view_dir(self, path):
        """Whether `path`, a directory of the view, was removed or renamed
        over before the compared operation."""
        path = os.path.normpath(path)
        return path in self.view_dirs and any(
            (o["op"] in ("rmdir", "rmtree") and os.path.normpath(o["args"][0]) == path) or
            (o["op"] == "rename" and os.path.normpath(o["args"][1]) == path)
            for o in self.ops[:self.index])


def kept_setid(kind, u, o):
    """Whether ucfs's mode u is overlayfs's o with set-id bits o lacks."""
    if kind != "file":
        return False
    u, o = int(u, 8), int(o, 8)
    return u & ~0o6000 == o & ~0o6000 and u & o == o and u != o


def excuse(field, kind, u, o, ctx):
    """The key of KNOWN_DIFFERENCES or KNOWN_BUGS that excuses ucfs's value
    u of a field where overlayfs has o, on an entry of this kind (in a stat
    result of the operation ctx.index, or in the trees), or None."""
    older = o != "new"
    if (field == "mode" and kept_setid(kind, u, o) and int(u, 8) ^ int(o, 8) == 0o2000 and
            not int(o, 8) & 0o010):
        return "sgid-kept-for-non-member"
    if field == "mode" and kept_setid(kind, u, o):
        if ctx.opens_by_others("O_TRUNC"):
            return "otrunc-keeps-setid"
        if ctx.setid_after_write_only_open():
            return "direct-write-keeps-setid"
    if ctx.through_view_handle() and ctx.ops[ctx.index]["op"] == "fstat":
        return "view-handle-after-copy-up"
    if kind == "dir":
        if field == "nlink" and o == 1:
            return "merged-dir-nlink"
        if field == "mtime" and u == "new" and older:
            return "copy-up-touches-parent"
        if field == "atime" and u == "new" and older:
            return "opendir-touches-atime"
    elif kind is not None and field == "atime":
        if u != "new" and o == "new":
            return "fuse-atime"
        if u == "new" and older:
            return "truncating-copy-up-atime"
    return None


def excuse_result(u, o, ctx):
    """The same for two results that are not stat results."""
    name = ctx.ops[ctx.index]["op"]
    if ctx.through_view_handle():
        if name in ("read", "pread") and u[0] == o[0] == "ok":
            return "view-handle-after-copy-up"
        if name in ("fchmod", "fchown", "futimens") and u == ("err", "ESTALE"):
            return "unlinked-view-file-setattr"
    if name in ("read", "pread", "readfile") and u[0] == o[0] == "ok" and ctx.view_handle_before():
        return "view-handle-poisons-page-cache"
    o_args = ctx.ops[ctx.index]["args"]
    if (name in ("chown", "fchown") and o_args[1:3] == [-1, -1] and u == ("ok", None) and
            o == ("err", "EPERM") and ctx.ops[ctx.index]["user"] != "root"):
        return "sgid-kept-for-non-member"
    if (name in ("fstat", "fchmod", "fchown", "futimens") and u == ("err", "ESTALE") and
            o[0] == "ok" and ctx.removed_after_open()):
        return "removed-dir-fd-stale"
    if (name == "rename" and u == ("err", "EXDEV") and o[0] == "ok" and
            (ctx.replaced_view_dir(ctx.ops[ctx.index]["args"][0]) or
             ("RENAME_EXCHANGE" in ctx.ops[ctx.index]["args"][2] and
              ctx.replaced_view_dir(ctx.ops[ctx.index]["args"][1])))):
        return "replaced-view-dir-not-movable"
    return None


# Excused differences after which the two trees differ for good: nothing
# after the operation is compared.
DIVERGING = {"replaced-view-dir-not-movable"}


def excuse_across_remount(field, kind, before, after, overlay):
    """The same for ucfs's value before a remount of the same DIR and after
    (overlay: overlayfs's entry of that path, or None)."""
    if kind == "dir":
        if field == "atime":
            return "walk-reads-dirs"
        if field == "mtime" and before != "new" and after == "new":
            return "copy-up-touches-parent"
        if field == "nlink" and overlay is not None and overlay.get("nlink") == 1:
            return "merged-dir-nlink-undercount"
    elif kind is not None and field == "atime" and before != "new" and after == "new":
        return "fuse-atime"
    return None


def stat_diffs(a, b, excuser):
    """[(field, a's, b's, key of what excuses it or None)] of two entries."""
    kind = a.get("type") if a.get("type") == b.get("type") else None
    return [(f, a.get(f), b.get(f), excuser(f, kind, a.get(f), b.get(f)))
            for f in FIELDS if a.get(f) != b.get(f)]


def result_diffs(u, o, ctx):
    """Differences of two operations' results, as stat_diffs lists them."""
    if u[0] == o[0] == "ok" and isinstance(u[1], dict) and isinstance(o[1], dict):
        return stat_diffs(u[1], o[1], lambda f, k, x, y: excuse(f, k, x, y, ctx))
    return [] if u == o else [("result", u, o, excuse_result(u, o, ctx))]


def diff_trees(a, b, excuser):
    """[(field, path, a's, b's, key or None)] for every difference of two
    snapshots; excuser(field, kind, a's, b's, path)."""
    out = []
    ae, be = a["entries"], b["entries"]
    for p in sorted(set(ae) | set(be)):
        if p not in ae or p not in be:
            out.append(("names", p, "present" if p in ae else "absent",
                        "present" if p in be else "absent", None))
            continue
        for f, x, y, key in stat_diffs(ae[p], be[p], lambda f, k, x, y: excuser(f, k, x, y, p)):
            out.append((f, p, x, y, key))
    common = set(ae) & set(be)
    la = sorted(g for g in (sorted(p for p in g if p in common) for g in a["links"]) if len(g) > 1)
    lb = sorted(g for g in (sorted(p for p in g if p in common) for g in b["links"]) if len(g) > 1)
    if la != lb:
        out.append(("links", "", la, lb, None))
    return out


class Outcome:
    def __init__(self):
        self.results = {}      # "ucfs"/"overlayfs" -> [result per op]
        self.problems = []     # (kind, text)
        self.excused = set()   # keys of KNOWN_DIFFERENCES and KNOWN_BUGS that excused some

    def signature(self):
        return self.problems[0][0] if self.problems else None


class Runner:
    def __init__(self, ucfs, lower, work, strict=False):
        self.ucfs, self.lower, self.work, self.strict = ucfs, lower, work, strict
        self.view_paths = set(lower.paths)
        self.runs = 0

    def run_ops(self, root, ops):
        workers, results = {}, []
        try:
            for o in ops:
                w = workers.get(o["user"])
                if w is None:
                    w = workers[o["user"]] = pt.Worker(root, pt.USERS[o["user"]], handle)
                try:
                    results.append(w.call(o["umask"], o["op"], o["args"]))
                except pt.WorkerDied as e:
                    results.append(("died", str(e)))
                    workers.pop(o["user"])
        finally:
            for w in workers.values():
                w.close()
        return results

    def run(self, ops):
        self.runs += 1
        out = Outcome()
        seq = os.path.join(self.work, f"seq{self.runs}")
        os.mkdir(seq)
        trees = {}
        try:
            upper = os.path.join(seq, "ucfs-upper")
            os.mkdir(upper)
            os.chmod(upper, 0o755)
            for kind in ("ucfs", "overlayfs"):
                mnt = os.path.join(seq, kind)
                if kind == "ucfs":
                    m = pt.UcfsMount(self.ucfs, self.lower.source, mnt, upper)
                else:
                    m = pt.OverlayMount(self.lower.dir, os.path.join(seq, "ovl-upper"),
                                        os.path.join(seq, "ovl-work"), mnt)
                try:
                    out.results[kind] = self.run_ops(mnt, ops)
                    trees[kind] = snapshot(mnt)
                finally:
                    try:
                        m.close()
                    except RuntimeError as e:
                        out.problems.append(("daemon", str(e)))
            # The same DIR mounted again shows the same tree.
            m = pt.UcfsMount(self.ucfs, self.lower.source, os.path.join(seq, "ucfs"), upper)
            try:
                trees["remount"] = snapshot(m.dir)
            finally:
                try:
                    m.close()
                except RuntimeError as e:
                    out.problems.append(("daemon", str(e)))
        finally:
            shutil.rmtree(seq, ignore_errors=True)
        ru, ro = out.results["ucfs"], out.results["overlayfs"]
        ctx = Context(ops, ru, None, self.view_paths, self.lower.dirs)
        diverged = False
        for i, (a, b) in enumerate(zip(ru, ro)):
            for f, x, y, key in result_diffs(a, b, ctx.at(i)):
                if key:
                    out.excused.add(key)
                    diverged = diverged or key in DIVERGING
                else:
                    out.problems.append((f"op:{ops[i]['op']}:{f}",
                                         f"op {i + 1} {show_op(ops[i])}: ucfs {show_result(a)}, "
                                         f"overlayfs {show_result(b)}"))
                    break
            if diverged:
                break
        # After a DIVERGING difference only ucfs against itself (the remount).
        for f, p, a, b, key in [] if diverged else diff_trees(
                trees["ucfs"], trees["overlayfs"], lambda f, k, x, y, p: excuse(f, k, x, y, ctx)):
            if key:
                out.excused.add(key)
            else:
                out.problems.append((f"tree:{f}", f"{p or '/'}: {f} ucfs {short(a)}, "
                                     f"overlayfs {short(b)}"))
        overlay = trees["overlayfs"]["entries"]
        for f, p, a, b, key in diff_trees(
                trees["ucfs"], trees["remount"],
                lambda f, k, x, y, p: excuse_across_remount(f, k, x, y, overlay.get(p))):
            if key:
                out.excused.add(key)
            else:
                out.problems.append((f"remount:{f}", f"{p or '/'}: {f} before the remount "
                                     f"{short(a)}, after {short(b)}"))
        if self.strict:
            out.problems += [(f"known:{k}", KNOWN_BUGS[k]) for k in sorted(out.excused)
                             if k in KNOWN_BUGS]
        out.trees = trees
        return out


# --- Shrinking and reporting ---------------------------------------------


def shrink(runner, ops, signature, deadline):
    """ddmin: the smallest sequence found (1-minimal if time allows) whose
    first divergence has the same signature."""
    def fails(candidate):
        return runner.run(candidate).signature() == signature

    n = 2
    while len(ops) >= 2 and time.time() < deadline:
        chunk = (len(ops) + n - 1) // n
        parts = [ops[i:i + chunk] for i in range(0, len(ops), chunk)]
        for i in range(len(parts)):
            rest = [o for j, p in enumerate(parts) if j != i for o in p]
            if rest and fails(rest):
                ops = rest
                n = max(n - 1, 2)
                break
        else:
            if n >= len(ops):
                break
            n = min(len(ops), n * 2)
    i = 0
    while i < len(ops) and time.time() < deadline:  # each op once more
        rest = ops[:i] + ops[i + 1:]
        if rest and fails(rest):
            ops = rest
        else:
            i += 1
    return ops


def short(v, limit=120):
    if isinstance(v, bytes):
        return f"<{len(v)} bytes {v[:12].hex()}...>" if len(v) > 12 else f"<bytes {v.hex()}>"
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + "..."


def show_result(r):
    if r[0] == "ok":
        return "ok" if r[1] is None else f"-> {short(r[1])}"
    return f"{r[0]} {r[1]}"


MODE_ARG = {"open": 2, "writefile": 2, "mkdir": 1, "chmod": 1, "fchmod": 1, "mknod": 2}


def show_op(o):
    def arg(i, a):
        if i == MODE_ARG.get(o["op"]):
            return "0o%04o" % a
        if o["op"] == "access" and i == 1:
            return "|".join(n for n in ("R_OK", "W_OK", "X_OK") if a & getattr(os, n)) or "F_OK"
        if isinstance(a, list) and all(isinstance(x, str) for x in a):
            return "|".join(a) or "0"
        return repr(a)
    args = ", ".join(arg(i, a) for i, a in enumerate(o["args"]))
    return f"{o['user']} umask={o['umask']:03o}: {o['op']}({args})"


def write_reproducer(ops, seed, signature):
    out_dir = os.environ.get("UCFS_POSIX_OUT", "/tmp")
    path = os.path.join(out_dir, f"ucfs_posix_repro_{seed}.json")
    with open(path, "w") as f:
        json.dump({"seed": seed, "signature": signature, "ops": ops}, f, indent=1)
    return path


def print_sequence(out, ops, view_paths, view_dirs):
    for i, o in enumerate(ops):
        a, b = out.results["ucfs"][i], out.results["overlayfs"][i]
        diffs = result_diffs(a, b, Context(ops, out.results["ucfs"], i, view_paths, view_dirs))
        mark = "!!" if any(k is None for *_, k in diffs) else "  "
        print(f"  {mark} {i + 1:3}. {show_op(o)}")
        if diffs:
            keys = sorted({k for *_, k in diffs if k})
            note = f" (excused: {', '.join(keys)})" if keys else ""
            print(f"             ucfs {show_result(a)}; overlayfs {show_result(b)}{note}")


def replay(runner, path):
    with open(path) as f:
        ops = json.load(f)["ops"]
    out = runner.run(ops)
    print_sequence(out, ops, runner.view_paths, runner.lower.dirs)
    for kind, text in out.problems:
        print(f"DIFFERENCE [{kind}] {text}")
    for key in sorted(out.excused):
        print(f"excused [{key}]: {'bug' if key in KNOWN_BUGS else 'known difference'}")
    print("no difference" if not out.problems else f"{len(out.problems)} differences")
    return 1 if out.problems else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ucfs", nargs="?")
    p.add_argument("fixtures", nargs="?")
    p.add_argument("--seed", type=int, default=int(os.environ.get("UCFS_POSIX_SEED", "1")))
    p.add_argument("--sequences", type=int,
                   default=int(os.environ.get("UCFS_POSIX_SEQUENCES", "250")))
    p.add_argument("--ops", type=int, default=int(os.environ.get("UCFS_POSIX_OPS", "80")))
    p.add_argument("--seconds", type=float,
                   default=float(os.environ.get("UCFS_POSIX_SECONDS", "120")))
    p.add_argument("--shrink-seconds", type=float, default=45)
    p.add_argument("--shrinks", type=int, default=2)
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--replay")
    p.add_argument("--known", action="store_true")
    p.add_argument("--stats", action="store_true", help="print each operation's answers counted")
    p.add_argument("--strict", action="store_true",
                   default=os.environ.get("UCFS_POSIX_STRICT") == "1")
    args = p.parse_args()
    if args.known:
        for k, v in KNOWN_DIFFERENCES.items():
            print(f"{k}: {v}")
        for k, v in KNOWN_BUGS.items():
            print(f"bug {k}: {v}")
        return 0
    if not args.ucfs or not args.fixtures:
        p.error("UCFS_BIN and FIXTURES_DIR are needed")
    ucfs = os.path.realpath(args.ucfs)
    work = pt.new_work_dir("ucfs_posix_diff_")
    started = time.time()
    try:
        lower = pt.Lower(ucfs, os.path.realpath(args.fixtures), work)
        EXTRA_NAMES.update(p.split("/")[0] for p in lower.extras)
        assert not EXTRA_NAMES & set(NAMES), EXTRA_NAMES
        assert not EXTRA_NAMES & {p.split("/")[0] for p in lower.paths}, EXTRA_NAMES
        print(f"lower: {len(lower.paths)} paths; only in ucfs, left out: {sorted(EXTRA_NAMES)}")
        runner = Runner(ucfs, lower, work, args.strict)
        # Both start from the same tree, or nothing below means anything.
        first = runner.run([])
        assert not first.problems, first.problems
        if args.replay:
            return replay(runner, args.replay)
        source_hash = tree_hash(lower.source)
        passed = failed = ops_run = 0
        excused, answers = {}, {}
        for i in range(args.sequences):
            if args.seconds and time.time() - started > args.seconds:
                print(f"stopping after {i} sequences: --seconds {args.seconds}")
                break
            seed = args.seed + i
            ops = Generator(seed, lower.paths, lower.dirs).sequence(args.ops)
            out = runner.run(ops)
            ops_run += len(ops)
            for o, r in zip(ops, out.results["ucfs"]):
                key = (o["op"], r[0] if r[0] != "err" else r[1])
                answers[key] = answers.get(key, 0) + 1
            for k in out.excused:
                excused[k] = excused.get(k, 0) + 1
            if not out.problems:
                passed += 1
                continue
            failed += 1
            sig = out.signature()
            print(f"FAILED: sequence seed={seed} ({len(ops)} ops) diverges [{sig}]: "
                  f"{out.problems[0][1]}")
            small = ops
            if sig == "daemon":  # a crash or hang: printed whole, not shrunk (it may be a race)
                print("\n".join(text for kind, text in out.problems if kind == "daemon"))
            elif not args.no_shrink and failed <= args.shrinks:
                t = time.time()
                small = shrink(runner, ops, sig, time.time() + args.shrink_seconds)
                print(f"  shrunk to {len(small)} ops in {time.time() - t:.1f} s")
            path = write_reproducer(small, seed, sig)
            if failed <= args.shrinks:
                report(runner.run(small), small, path, args, runner)
            else:
                print(f"  reproducer (not shrunk): {path}")
        assert tree_hash(lower.source) == source_hash, "the source changed"
        if args.stats:
            for name in sorted(WEIGHTS):
                counts = sorted(((n, k[1]) for k, n in answers.items() if k[0] == name), reverse=True)
                print(f"  {name}: " + ", ".join(f"{a} {n}" for n, a in counts))
        for k, n in sorted(excused.items()):
            what = "known bug" if k in KNOWN_BUGS else "known difference"
            print(f"{what} {k} excused a difference in {n} sequences")
        print(f"{ops_run} operations in {passed + failed} sequences, {time.time() - started:.1f} s")
        print(f"{passed} passed, {failed} failed")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(out, ops, path, args, runner):
    print("  the sequence:")
    print_sequence(out, ops, runner.view_paths, runner.lower.dirs)
    for kind, text in out.problems[:10]:
        print(f"  [{kind}] {text}")
    print(f"  reproducer: {path}")
    print(f"  replay: /usr/bin/python3 {os.path.join(HERE, 'differential_test.py')} "
          f"{os.path.realpath(args.ucfs)} {os.path.realpath(args.fixtures)} --replay {path}")
    print("  " + json.dumps({"ops": ops}))


def tree_hash(root):
    import hashlib
    h = hashlib.sha256()
    for rel in pt.walk_paths(root):
        full = os.path.join(root, rel)
        st = os.lstat(full)
        h.update(f"{rel} {st.st_mode} {st.st_size} {st.st_mtime_ns}".encode())
        if stat.S_ISREG(st.st_mode):
            with open(full, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
