"""What the POSIX tests of the writable mount share (tests/posix).

- The three file systems they run on, each over the same tree: a writable
  ucfs mount (`ucfs mount --world-size 4 --upper DIR -o allow_other`) of the
  fixture, kernel overlayfs with that tree as its lower directory, and tmpfs
  holding a copy of it (`Lower` makes the tree, `UcfsMount`, `OverlayMount`,
  `TmpfsMount` the mounts).
- The users the tests act as (`USERS`: uids and gids other than 0, with
  supplementary groups) and `Worker`, a forked process that has become one
  of them and runs file operations for the test, holding the fds it opens
  across calls (so one user can keep a file open while another unlinks it).
- ctypes wrappers for what os lacks: renameat2, utimensat with UTIME_OMIT.

Why the lower tree is not the source itself: ucfs lays a checkpoint's rank
files out anew even at the world size they were saved at (their pickles, so
their bytes, sizes and mtimes differ from the source's), so overlayfs and
tmpfs get the tree as a read-only ucfs mount at that size shows it: the
paths the source has, with the bytes, modes, owners and times ucfs shows.
Paths only ucfs shows (<tag>_fp32 and the like) are `Lower.extras`: the
tests neither touch nor compare them.
"""
import ctypes
import errno
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import traceback
from multiprocessing.connection import Connection

FIXTURE = "z3_tricky_fp32_ws4"
WORLD_SIZE = 4

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
MNT_DETACH = 2


class User:
    def __init__(self, name, uid, gid, groups):
        self.name, self.uid, self.gid, self.groups = name, uid, gid, groups

    def become(self):
        """In a child process: this user's ids, and only them."""
        os.setgroups(self.groups)
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)


# Group 3000 is shared by alice and bob; carol's only group is 3001.
USERS = {
    "root": User("root", 0, 0, []),
    "alice": User("alice", 1001, 1001, [1001, 3000]),
    "bob": User("bob", 1002, 1002, [1002, 3000]),
    "carol": User("carol", 1003, 3001, [3001]),
    "nobody": User("nobody", 65534, 65534, []),
}


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), what)


def renameat2(src, dst, flags):
    _check(libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst),
                          ctypes.c_uint(flags)), dst)


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _timespecs(atime, mtime):
    """Each of atime, mtime: "now", "omit" or (seconds, nanoseconds)."""
    def one(t):
        if t == "now":
            return Timespec(0, UTIME_NOW)
        if t == "omit":
            return Timespec(0, UTIME_OMIT)
        return Timespec(t[0], t[1])
    return (Timespec * 2)(one(atime), one(mtime))


def utimensat(path, atime, mtime, follow=True):
    """utimensat(2) on a path; None as a path is not allowed."""
    _check(libc.utimensat(AT_FDCWD, os.fsencode(path), _timespecs(atime, mtime),
                          0 if follow else AT_SYMLINK_NOFOLLOW), path)


def futimens(fd, atime, mtime):
    _check(libc.futimens(fd, _timespecs(atime, mtime)), f"fd {fd}")


def mount_fs(source, target, fstype, options):
    _check(libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(0),
                      options.encode()), target)


def umount(target, flags=0):
    _check(libc.umount2(target.encode(), flags), target)


def unmount(target):
    """umount(2), retried for 10 s while the mount is busy (another process
    may be walking /tmp), then detached: whether it was unmounted at once."""
    for _ in range(100):
        try:
            umount(target)
            return True
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            time.sleep(0.1)
    umount(target, MNT_DETACH)
    return False


class Lower:
    """The tree every file system starts from (the module's docstring):
    made once in `dir` from a read-only ucfs mount of the fixture at its
    own world size. `paths`: every relative path of it; `extras`: the
    paths a ucfs mount shows beyond it; `dirs`: which of `paths` are
    directories."""

    def __init__(self, ucfs, fixtures, work):
        self.source = os.path.join(fixtures, FIXTURE, "checkpoint")
        self.dir = os.path.join(work, "lower")
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o755)
        view = UcfsMount(ucfs, self.source, os.path.join(work, "lower-view"), upper=None)
        try:
            source_paths = set(walk_paths(self.source))
            view_paths = set(walk_paths(view.dir))
            self.paths = sorted(source_paths & view_paths)
            self.dirs = {p for p in self.paths if os.path.isdir(os.path.join(view.dir, p))}
            self.extras = sorted(view_paths - source_paths)
            dirs = []
            for rel in self.paths:
                src, dst = os.path.join(view.dir, rel), os.path.join(self.dir, rel)
                st = os.lstat(src)
                if stat.S_ISDIR(st.st_mode):
                    os.mkdir(dst)
                    dirs.append((dst, st))
                elif stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(src), dst)
                else:
                    shutil.copyfile(src, dst)
                if not stat.S_ISDIR(st.st_mode):
                    set_attrs(dst, st)
            for dst, st in reversed(dirs):  # children first: their making changes mtimes
                set_attrs(dst, st)
        finally:
            view.close()


def set_attrs(path, st):
    os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(path, stat.S_IMODE(st.st_mode))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def walk_paths(root):
    """Every path below root, relative, parents before children."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        for name in dirnames + sorted(filenames):
            out.append(name if rel == "." else os.path.join(rel, name))
    return out


class UcfsMount:
    """`ucfs mount -f --world-size 4 [--upper UPPER -o allow_other] SOURCE DIR`,
    its daemon started with umask 077 (ucfs must undo its own umask), ready
    once DIR is a mount point. `close()` unmounts and raises unless the daemon
    then exits with status 0."""

    def __init__(self, ucfs, source, dir, upper, extra=()):
        self.dir = dir
        os.makedirs(dir, exist_ok=True)
        self.log = dir + ".log"
        args = [ucfs, "mount", "-f", "--no-cache", "--world-size", str(WORLD_SIZE), "--log-file",
                self.log]
        if upper is not None:
            args += ["--upper", upper, "-o", "allow_other"]
        args += [*extra, source, dir]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, preexec_fn=lambda: os.umask(0o077))
        deadline = time.time() + 30
        while not os.path.ismount(dir):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ucfs mount exited {self.proc.returncode}: "
                                   f"{self.proc.stderr.read().decode(errors='replace')}")
            if time.time() > deadline:
                raise RuntimeError("the ucfs mount did not appear")
            time.sleep(0.002)

    def close(self):
        at_once = unmount(self.dir)
        hung = ""
        try:
            self.proc.wait(timeout=30 if at_once else 120)
        except subprocess.TimeoutExpired:
            hung = self.threads()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stderr.close()
        if hung:
            how = "" if at_once else " (detached: the mount was busy for 10 s)"
            raise RuntimeError(f"ucfs mount did not exit after the unmount{how}; its threads:\n"
                               f"{hung}{err}{self.log_text()}")
        if self.proc.returncode != 0:
            raise RuntimeError(f"ucfs mount exited with {self.proc.returncode} after the unmount: "
                               f"{err}{self.log_text()}")

    def threads(self):
        """Where each of the daemon's threads waits (its kernel stack), and
        their user-space stacks if gdb is there."""
        out = []
        task = f"/proc/{self.proc.pid}/task"
        for tid in sorted(os.listdir(task), key=int):
            def read(name):
                try:
                    with open(f"{task}/{tid}/{name}") as f:
                        return f.read().strip()
                except OSError as e:
                    return str(e)
            out.append(f"thread {tid} {read('comm')} wchan={read('wchan')} syscall={read('syscall')}\n"
                       f"{read('stack')}")
        gdb = shutil.which("gdb")
        if gdb:
            p = subprocess.run([gdb, "-p", str(self.proc.pid), "-batch", "-ex",
                                "thread apply all bt"], capture_output=True, text=True,
                               timeout=120)
            out.append(p.stdout)
        return "\n".join(out) + "\n"

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


# As close to ucfs's overlay as overlayfs gets: directories holding lower
# entries cannot be renamed (no redirect_dir), hard links are not indexed,
# copy-up copies data, inode numbers are the real ones.
OVERLAY_OPTIONS = "redirect_dir=off,index=off,metacopy=off,xino=off"


class OverlayMount:
    def __init__(self, lower, upper, work, dir):
        self.dir = dir
        for d in (upper, work, dir):
            os.makedirs(d, exist_ok=True)
        os.chmod(upper, 0o755)
        mount_fs("overlay", dir, "overlay",
                 f"lowerdir={lower},upperdir={upper},workdir={work},{OVERLAY_OPTIONS}")

    def close(self):
        unmount(self.dir)


class TmpfsMount:
    """tmpfs with a copy of the lower tree (owners, modes and times kept)."""

    def __init__(self, lower, dir):
        self.dir = dir
        os.makedirs(dir, exist_ok=True)
        mount_fs("tmpfs", dir, "tmpfs", "mode=0755,size=64m")
        for rel in lower.paths:
            src, dst = os.path.join(lower.dir, rel), os.path.join(dir, rel)
            st = os.lstat(src)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(dst)
            else:
                shutil.copyfile(src, dst)
        for rel in reversed(lower.paths):
            set_attrs(os.path.join(dir, rel), os.lstat(os.path.join(lower.dir, rel)))

    def close(self):
        unmount(self.dir)


class WorkerDied(Exception):
    pass


class Worker:
    """A forked child that became `user` (setgroups/setresgid/setresuid) with
    its cwd at `root`, serving `handler(state, *message)` for each message
    `call` sends: state is a dict that lives as long as the worker (the fds
    it holds). `call(umask, *message)` sets the umask, and returns ("ok",
    value) or ("err", errno name)."""

    def __init__(self, root, user, handler):
        a, b = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:
            code = 0
            try:
                a.close()
                os.chdir(root)
                user.become()
                conn = Connection(b.detach())
                state = {"fds": {}}
                while True:
                    msg = conn.recv()
                    if msg is None:
                        break
                    os.umask(msg[0])
                    try:
                        conn.send(("ok", handler(state, *msg[1:])))
                    except OSError as e:
                        conn.send(("err", errno.errorcode.get(e.errno, str(e.errno))))
            except BaseException:  # noqa: BLE001 - a worker reports and exits
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        b.close()
        self.conn = Connection(a.detach())

    def call(self, umask, *message, timeout=20):
        try:
            self.conn.send((umask, *message))
            if not self.conn.poll(timeout):
                self.kill()
                raise WorkerDied(f"no answer in {timeout} s")
            return self.conn.recv()
        except (EOFError, OSError) as e:
            raise WorkerDied(str(e)) from e

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self):
        try:
            self.conn.send(None)
        except OSError:
            self.kill()
        self.conn.close()
        _, status = os.waitpid(self.pid, 0)
        return status


def run_as(root, user, fn, *args, umask=0o022):
    """fn(*args) in a child forked for this call that became `user` (a name
    of USERS) with its cwd at root: its value, or the OSError it raised
    (raised here again with the same errno). fn may be any callable (the
    child is forked, nothing of it is pickled but its value)."""
    w = Worker(root, USERS[user], lambda state, _: fn(*args))
    try:
        kind, value = w.call(umask, None)
    finally:
        w.close()
    if kind == "err":
        code = getattr(errno, value)
        raise OSError(code, os.strerror(code))
    return value


def new_work_dir(prefix):
    work = tempfile.mkdtemp(prefix=prefix)
    os.chmod(work, 0o755)
    return work
