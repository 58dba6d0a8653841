"""What the named cases of posix_cases_test.py share: the fixture's names,
where a case runs (EVERYWHERE, MERGING, UCFS_ONLY), the registry (`case`,
CASES) and Target, one file system a case runs on, with the helpers the
cases call.
"""
import errno
import os
import shutil
import stat
import time

import posix_testing as pt

TAG = "global_step4"
R0 = f"{TAG}/zero_pp_rank_0_mp_rank_00_model_states.pt"
R1 = f"{TAG}/zero_pp_rank_1_mp_rank_00_model_states.pt"
EVERYWHERE = ("ucfs", "overlayfs", "tmpfs")
MERGING = ("ucfs", "overlayfs")  # what needs a lower layer
UCFS_ONLY = ("ucfs",)

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
