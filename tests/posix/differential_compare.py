"""differential_test.py's comparisons: a tree snapshot (what is compared of
every entry below a mount), and the differences of two results or two
trees, each with the key of what excuses it (differential_known) or None.
"""
import os
import stat

from differential_known import excuse, excuse_result
from differential_ops import EXTRA_NAMES, norm_stat, user_xattrs


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
