#!/usr/bin/python3
"""Runs every ucfs command and view over the hostile corpus.

Usage: run_hostile.py UCFS FIXTURES_DIR [--all] [--only SUBSTRING] [--jobs N] [--keep DIR]

Makes the corpus (make_hostile_corpus.py) in a temporary directory, then for
each case runs, each under a time and a memory bound:

  ucfs inspect, inspect --json, verify, verify --json, show (of rank 0's
  model states and rank 1's optimizer file), export (universal, at world
  size 3, --fp32) into a fresh directory;
  and for the mount subset (every case with --all; in CI a representative
  subset: every fourth case of each category), ucfs mount of the universal
  view and of the reshard view at world sizes 1 and 3, with every file of
  the mount (universal, reshard and consolidated trees) read whole, then
  unmounted. The `index` category (index_cases.py: shared indexes made by
  `ucfs index` and then broken) is made here, with the binary, and every
  case of it is mounted.

and asserts, for every command: it ends by itself within the time bound (no
hang), by exit() and not a signal (no crash, no sanitizer abort, not killed
for memory), with status 0, or with a non-zero status and a stderr that names
a file of the case (its path, `latest`, the tag directory or a rank file
name) and says what is wrong; nothing it prints holds a raw control
character (names from files are escaped). A mount must come up or fail the
same clean way; every read must return the file's bytes or an error (EIO)
with a log line naming the file; the daemon must stay alive until the
unmount and then exit 0.

Bounds, per command: 10 s of wall time (the fixtures take 0.05 s; the
slowest legitimate case, a 1 GiB-claiming zip bomb refused, well under a
second), 20 s under the sanitizers, which run 2-5x slower; 1 GiB of address
space (RLIMIT_AS; a fixture needs under 100 MB, so anything near 1 GiB is
an input the bounds failed to stop), or under AddressSanitizer, whose shadow
memory makes RLIMIT_AS unusable, a 2 GiB RSS limit (hard_rss_limit_mb: ASan's
redzones and quarantine roughly double the footprint).
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from index_cases import make_index_cases

HERE = os.path.dirname(os.path.abspath(__file__))
TAG = "global_step4"
TIME_LIMIT = 10
MEMORY_LIMIT = 1 << 30
ASAN_RSS_LIMIT_MB = 2048
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def sanitized():
    return "ASAN_OPTIONS" in os.environ or "UBSAN_OPTIONS" in os.environ


def limits():
    if not sanitized():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def env():
    e = dict(os.environ)
    if "ASAN_OPTIONS" in e:
        e["ASAN_OPTIONS"] += f":hard_rss_limit_mb={ASAN_RSS_LIMIT_MB}"
    e["XDG_CACHE_HOME"] = tempfile.gettempdir() + "/ucfs-hostile-cache"
    return e


def time_limit():
    return TIME_LIMIT * (2 if sanitized() else 1)


class Failure(Exception):
    pass


def names_of(case_root):
    """What a clean error may name: the case's paths and file names."""
    out = {case_root, "latest", TAG}
    tag = os.path.join(case_root, TAG)
    if os.path.isdir(tag):
        out.update(f for f in os.listdir(tag))
    return out


def check_output(what, data):
    m = CONTROL.search(data)
    if m:
        i = m.start()
        raise Failure(f"{what}: a raw control character {data[i:i + 2]!r} at byte {i}: "
                      f"...{data[max(0, i - 60):i + 20]!r}")


def check_clean(what, proc, case_root, out, err, allow_success=True):
    if proc.returncode < 0:
        raise Failure(f"{what}: killed by signal {-proc.returncode}: {err[-2000:]!r}")
    if proc.returncode == 0 and allow_success:
        return
    if proc.returncode not in (1, 2):
        raise Failure(f"{what}: exit status {proc.returncode}: {err[-2000:]!r}")
    # verify reports its problems on stdout; everything else on stderr.
    text = (err + b"\n" + out).decode("utf-8", "replace")
    if not text.strip():
        raise Failure(f"{what}: exit status {proc.returncode} with nothing on stderr")
    if not any(n and n in text for n in names_of(case_root)):
        raise Failure(f"{what}: the error names no file of the case: {text[-1000:]!r}")
    named = [line for line in text.splitlines() if any(n and n in line for n in names_of(case_root))]
    if not any(len(line) > 40 for line in named):
        raise Failure(f"{what}: the error does not say what is wrong: {named[:3]!r}")


def run(what, argv, case_root, check=True):
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limits,
                                env=env(), start_new_session=True)
        out, err = proc.communicate(timeout=time_limit())
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise Failure(f"{what}: still running after {time_limit()} s (hang)")
    check_output(what + " stdout", out if b"--json" not in [a.encode() for a in argv] else b"")
    check_output(what + " stderr", err)
    if check:
        check_clean(what, proc, case_root, out, err)
    return proc, out, err


READER = r"""
import os, sys, errno
root = sys.argv[1]
errors = []
files = 0

def failed_listing(e):
    errors.append(f"{os.path.relpath(e.filename, root)}: listing: {e.errno}")
for dirpath, dirnames, filenames in os.walk(root, onerror=failed_listing):
    for f in filenames:
        p = os.path.join(dirpath, f)
        files += 1
        try:
            with open(p, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        except OSError as e:
            errors.append(f"{os.path.relpath(p, root)}: {e.errno}")
print(files)
for e in errors:
    print(e)
"""


def mount_and_read(ucfs, case_root, extra, label):
    mnt = tempfile.mkdtemp(prefix="ucfs_hostile_mnt_")
    log = mnt + ".log"
    what = f"mount {label}"
    proc = subprocess.Popen([ucfs, "mount", "-f", "--no-cache", case_root, mnt, "--log-file", log, "-v", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limits, env=env(),
                            start_new_session=True)
    try:
        deadline = time.time() + time_limit()
        while not os.path.ismount(mnt):
            if proc.poll() is not None:
                out, err = proc.communicate()
                check_output(what + " stderr", err)
                check_clean(what, proc, case_root, out, err, allow_success=False)
                return "refused"
            if time.time() > deadline:
                raise Failure(f"{what}: neither mounted nor failed after {time_limit()} s (hang)")
            time.sleep(0.02)
        try:
            r = subprocess.run([sys.executable, "-c", READER, mnt], capture_output=True, timeout=time_limit() * 3)
        except subprocess.TimeoutExpired:
            raise Failure(f"{what}: reading every file took more than {time_limit() * 3} s (hang)")
        if r.returncode != 0:
            raise Failure(f"{what}: the reader failed: {r.stderr[-2000:]!r}")
        lines = r.stdout.decode().splitlines()
        errors = lines[1:]
        if proc.poll() is not None:
            raise Failure(f"{what}: the daemon died under its mount (status {proc.returncode}) after "
                          f"{lines[0]} files: {proc.stderr.read()[-2000:]!r}")
        if errors:
            with open(log, "rb") as f:
                logged = f.read()
            check_output(what + " log", logged)
            for e in errors:
                name = e.rsplit(":", 1)[0]
                if os.path.basename(name).encode() not in logged and TAG.encode() not in logged:
                    raise Failure(f"{what}: reading {e} failed with nothing in the log naming it")
        return f"{lines[0]} files, {len(errors)} read errors"
    finally:
        if os.path.ismount(mnt):
            subprocess.run([ucfs, "umount", mnt], capture_output=True, timeout=30)
        try:
            proc.wait(timeout=time_limit())
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise Failure(f"{what}: the daemon did not exit after the unmount")
        if proc.returncode < 0 or (proc.returncode != 0 and os.path.exists(log) and os.path.getsize(log) > 0
                                   and proc.returncode not in (1, 2)):
            raise Failure(f"{what}: the daemon ended with status {proc.returncode}")
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        try:
            os.rmdir(mnt)
        except OSError:
            pass
        for f in (log,):
            if os.path.exists(f):
                os.remove(f)


def tree_bytes(top):
    files = {}
    for d, _, names in os.walk(top):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                files[os.path.relpath(p, top)] = f.read()
    return files


def same_as_without_index(ucfs, root, out):
    """A shared index refused whole changes nothing: the universal export made
    with it equals the one made from a copy of the root without it."""
    bare = os.path.join(out, "bare_root")
    shutil.copytree(root, bare, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n.endswith(".ucfs-index")])
    dst = os.path.join(out, "universal_without_index")
    run("export without the index", [ucfs, "export", "--no-cache", "--no-sync", "-j", "2", bare, dst], bare)
    with_index, without = tree_bytes(os.path.join(out, "universal")), tree_bytes(dst)
    if with_index != without:
        differ = sorted(set(with_index) ^ set(without)) or \
            sorted(k for k in with_index if with_index[k] != without.get(k))
        raise Failure(f"the export with a refused index differs from the one without it: {differ[:5]}")


def run_case(ucfs, corpus, case, mount):
    root = os.path.join(corpus, case["case"])
    tag = os.path.join(root, TAG)
    notes = []
    run("inspect", [ucfs, "inspect", root], root)
    run("inspect --json", [ucfs, "inspect", "--json", root], root)
    run("verify", [ucfs, "verify", "-j", "2", root], root)
    run("verify --json", [ucfs, "verify", "-j", "2", "--json", root], root)
    for f in ("zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"):
        p = os.path.join(tag, f)
        if os.path.isfile(p) and not os.path.islink(p):
            run(f"show {f}", [ucfs, "show", p], root)
    out = tempfile.mkdtemp(prefix="ucfs_hostile_out_")
    try:
        for extra in ([], ["--world-size", "3"], ["--fp32"]):
            dst = os.path.join(out, "x".join(extra) or "universal")
            run("export " + " ".join(extra), [ucfs, "export", "--no-cache", "--no-sync", "-j", "2", *extra, root, dst],
                root)
        if case.get("passed_over"):
            same_as_without_index(ucfs, root, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if mount:
        for extra, label in (([], "universal"), (["--world-size", "1"], "reshard N=1"),
                             (["--world-size", "3"], "reshard N=3")):
            notes.append(f"{label}: {mount_and_read(ucfs, root, extra, label)}")
    return notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ucfs")
    ap.add_argument("fixtures")
    ap.add_argument("--all", action="store_true", help="mount every case (CI mounts a subset)")
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", help="make the corpus here and keep it")
    a = ap.parse_args()
    ucfs = os.path.abspath(a.ucfs)
    corpus = a.keep or tempfile.mkdtemp(prefix="ucfs_hostile_")
    subprocess.run([sys.executable, os.path.join(HERE, "make_hostile_corpus.py"), a.fixtures, corpus], check=True)
    with open(os.path.join(corpus, "cases.json")) as f:
        cases = json.load(f)
    cases += make_index_cases(ucfs, a.fixtures, corpus)
    cases = [c for c in cases if a.only in c["case"]]
    per_category = {}
    plan = []
    for c in cases:
        i = per_category.get(c["category"], 0)
        per_category[c["category"]] = i + 1
        # A shared index is only read by a mount (and export): every such
        # case is mounted.
        plan.append((c, a.all or i % 4 == 0 or c["category"] == "index"))
    lock = threading.Lock()
    results = {"passed": 0, "failed": []}
    start = time.time()

    def one(item):
        c, mount = item
        t0 = time.time()
        try:
            notes = run_case(ucfs, corpus, c, mount)
            with lock:
                results["passed"] += 1
                print(f"ok: {c['case']} ({time.time() - t0:.1f} s{'; ' if notes else ''}{'; '.join(notes)})",
                      flush=True)
        except Failure as e:
            with lock:
                results["failed"].append(c["case"])
                print(f"FAILED: {c['case']} ({c['description']}): {e}", flush=True)
        except Exception:  # noqa: BLE001 - a runner bug is a failure too
            with lock:
                results["failed"].append(c["case"])
                print(f"FAILED: {c['case']}: runner error", flush=True)
                traceback.print_exc()

    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(one, plan))
    if not a.keep:
        shutil.rmtree(corpus, ignore_errors=True)
    mounted = sum(1 for _, m in plan if m)
    print(f"{results['passed']} passed, {len(results['failed'])} failed, of {len(plan)} cases "
          f"({mounted} mounted) in {time.time() - start:.0f} s")
    for f in results["failed"]:
        print(f"  failed: {f}")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
