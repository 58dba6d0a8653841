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
KNOWN_DIFFERENCES; the divergences this test found that are ucfs's bugs,
until they are fixed, KNOWN_BUGS (each with its reproducer), both in
differential_known.py. Each is excused where the comparison is made, as
narrowly as the comparison can tell it, and counted in the summary;
--known lists them, --strict fails on the bugs.

This file runs sequences (Runner) and reports; the rest is in its
neighbours: differential_ops.py (the operations, as a worker runs them),
differential_generator.py (the random sequences), differential_known.py
(what is excused, and where), differential_compare.py (tree snapshots,
the differences of results and trees), differential_shrink.py (shrinking
a divergent sequence, printing and writing reproducers).

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
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import posix_testing as pt  # noqa: E402
from differential_compare import diff_trees, result_diffs, snapshot  # noqa: E402
from differential_generator import NAMES, WEIGHTS, Generator  # noqa: E402
from differential_known import (DIVERGING, KNOWN_BUGS, KNOWN_DIFFERENCES, Context,  # noqa: E402
                                excuse, excuse_across_remount)
from differential_ops import EXTRA_NAMES, handle  # noqa: E402
from differential_shrink import (print_sequence, report, short, show_op, show_result,  # noqa: E402
                                 shrink, tree_hash, write_reproducer)


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
        ctx = Context(ops, ru, None, self.view_paths, self.lower.dirs, ro)
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


if __name__ == "__main__":
    sys.exit(main())
