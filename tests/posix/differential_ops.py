"""differential_test.py's operations, as a worker runs them: each op_NAME
(state, *args) is the operation NAME of a sequence, in a worker forked for
its user (posix_testing.Worker; `state["fds"]` its fd slots), and returns
what is compared of its result (stat results as norm_stat makes them).
"""
import os
import stat
import time

import posix_testing as pt

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
