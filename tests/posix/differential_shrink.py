"""differential_test.py's shrinking of a divergent sequence (ddmin) and
its reports: the sequence with each answer, and a reproducer to replay.
"""
import json
import os
import stat
import time

import posix_testing as pt
from differential_compare import result_diffs
from differential_known import Context

HERE = os.path.dirname(os.path.abspath(__file__))



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
        diffs = result_diffs(a, b, Context(ops, out.results["ucfs"], i, view_paths, view_dirs,
                                            out.results["overlayfs"]))
        mark = "!!" if any(k is None for *_, k in diffs) else "  "
        print(f"  {mark} {i + 1:3}. {show_op(o)}")
        if diffs:
            keys = sorted({k for *_, k in diffs if k})
            note = f" (excused: {', '.join(keys)})" if keys else ""
            print(f"             ucfs {show_result(a)}; overlayfs {show_result(b)}{note}")


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
