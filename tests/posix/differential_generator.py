"""differential_test.py's sequences: random operations (their names and
arguments, as differential_ops runs them) over a small set of names, so
that they meet; Generator says how.
"""
import os
import random

import posix_testing as pt
from differential_ops import OPS

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
