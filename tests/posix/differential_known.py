"""What differential_test.py does not hold against ucfs, and why:
KNOWN_DIFFERENCES (intended: ucfs(1), THE WRITABLE MOUNT), KNOWN_BUGS
(divergences found and not fixed), and the excuses that apply them where
the comparison is made, as narrowly as it can tell them (look for a key to
see where it applies).
"""
import os

from differential_generator import FD_OPS

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
    "unnamed-view-copy": (
        "fchmod, fchown and futimens through a read-only fd of a view file whose names are all "
        "gone (unlinked, renamed over, removed with its directory) and that was never copied "
        "up: ucfs copies it to a file of no name and changes that one, which the fd reads and "
        "fstats from then on (ucfs(1): an open file stays usable, as on tmpfs), where overlayfs "
        "cannot copy up a file that has no name and fails (ENOENT, or EEXIST). Excused: these "
        "succeeding in ucfs where overlayfs so fails, through an fd opened read-only on a path "
        "of the view; and then the mode, owner, times and link count (0: the copy has no name) "
        "fstat shows through that fd"),
}

# Divergences found that are ucfs's bugs, not intended: excused here, narrowly,
# so that the test guards everything else until they are fixed; --strict (or
# UCFS_POSIX_STRICT=1) fails on them. Remove an entry with its fix; one that
# cannot be fixed says why (and ucfs(1), THE WRITABLE MOUNT, says so too).
KNOWN_BUGS = {
    "setgid-chown-nothing": (
        "chown(f, -1, -1) of a file with S_ISGID and no group execute, by a user who neither "
        "owns it nor is of its group, succeeds where overlayfs and tmpfs refuse it (EPERM: "
        "such a chown clears S_ISGID, which is the owner's to change). Not fixable in ucfs: "
        "the kernel's FUSE code drops that mode change (fuse_setattr recomputes the set-id "
        "bits to clear and keeps S_ISGID without group execute), so the chown reaches ucfs as "
        "an empty SETATTR, the very request that a write by the same user sends before its "
        "WRITE (file_remove_privs) and that must succeed; FUSE_HANDLE_KILLPRIV_V2 would not "
        "tell them apart either, and libfuse 3.14 cannot ask for it. Excused: chown or fchown "
        "to -1, -1 by a user other than root that succeeds where overlayfs says EPERM. "
        "Reproducer: as root, touch f; chgrp 3000 f; chmod 2666 f; as a user outside group "
        "3000, chown -- -1:-1 f (succeeds; EPERM on tmpfs)"),
}

# --- Where each applies ------------------------------------------------------


class Context:
    """What an excuse may look at: the sequence, ucfs's results and
    overlayfs's (`other`, or None), the operation whose result is compared
    (None for the trees), the view's paths."""

    def __init__(self, ops, results, index, view_paths, view_dirs=(), other=None):
        self.ops, self.results, self.index, self.view_paths = ops, results, index, view_paths
        self.view_dirs = set(view_dirs)
        self.other = other

    def at(self, index):
        return Context(self.ops, self.results, index, self.view_paths, self.view_dirs, self.other)

    def slot_opened(self, index=None):
        """The open that filled the slot the operation `index` (by default
        the compared one) uses (the last one that succeeded), or None."""
        index = self.index if index is None else index
        o = self.ops[index]
        for i in range(index - 1, -1, -1):
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

    def copied_unnamed(self, i):
        """Whether operation i changed a nameless view file through its
        read-only fd where overlayfs failed (unnamed-view-copy)."""
        return (self.ops[i]["op"] in ("fchmod", "fchown", "futimens") and
                self.results[i] == ("ok", None) and self.other is not None and
                self.other[i] in (("err", "ENOENT"), ("err", "EEXIST")))

    def after_unnamed_copy(self):
        """Whether the compared operation goes through an fd an earlier
        operation so changed (unnamed-view-copy)."""
        if not self.through_view_handle():
            return False
        opened = self.slot_opened()
        o = self.ops[self.index]
        return any(self.copied_unnamed(i) and p["user"] == o["user"] and
                   p["args"][0] == o["args"][0] and self.slot_opened(i) is opened
                   for i, p in enumerate(self.ops[:self.index]))


def excuse(field, kind, u, o, ctx):
    """The key of KNOWN_DIFFERENCES or KNOWN_BUGS that excuses ucfs's value
    u of a field where overlayfs has o, on an entry of this kind (in a stat
    result of the operation ctx.index, or in the trees), or None."""
    if (ctx.index is not None and ctx.ops[ctx.index]["op"] == "fstat" and
            field in ("mode", "uid", "gid", "atime", "mtime", "nlink") and
            ctx.after_unnamed_copy()):
        return "unnamed-view-copy"
    if kind not in (None, "dir") and field == "atime" and u != "new" and o == "new":
        return "fuse-atime"
    return None


def excuse_result(u, o, ctx):
    """The same for two results that are not stat results."""
    name, args = ctx.ops[ctx.index]["op"], ctx.ops[ctx.index]["args"]
    if ctx.through_view_handle() and ctx.copied_unnamed(ctx.index):
        return "unnamed-view-copy"
    if (name in ("chown", "fchown") and args[1:3] == [-1, -1] and u == ("ok", None) and
            o == ("err", "EPERM") and ctx.ops[ctx.index]["user"] != "root"):
        return "setgid-chown-nothing"
    return None


# Excused differences after which the two trees differ for good: nothing
# after the operation is compared.
DIVERGING = set()


def excuse_across_remount(field, kind, before, after, overlay):
    """The same for ucfs's value before a remount of the same DIR and after
    (overlay: overlayfs's entry of that path, or None)."""
    if kind == "dir" and field == "atime":
        return "walk-reads-dirs"
    if kind not in (None, "dir") and field == "atime" and before != "new" and after == "new":
        return "fuse-atime"
    return None
