#!/usr/bin/python3
"""The helper of many_nodes.sh: one round of NODES `ucfs mount` daemons started at once, or the table.

  many_nodes.py round --ucfs BIN --source DIR --work DIR --label TEXT [--nodes 16] [--delay-ms D]
                      [--timeout S] [--cache none|cold] [--upper] [--list REL | --first REL] -- MOUNT_ARGS...
  many_nodes.py table RESULTS

`round` starts the daemons (`ucfs mount -f -v`, each on WORK/mnt<i> with its log in WORK/log<i>, its own
--cache-dir WORK/cache<i> or --no-cache, with --upper WORK/upper<i>) one right after the other with
UCFS_BENCH_METADATA_DELAY_MS=D, waits until every mount point is a mount (TIMEOUT seconds at most), and as soon as
a node's mount is up does its node's client step in a thread of its own:
  --list REL   os.listdir(MNT/REL): the "first listing";
  --first REL  os.listdir(MNT/REL), then the first 4 KiB of its *zero_pp_rank_0_mp_rank_00_optim_states.pt: the
               "first bytes".
Then it unmounts every node (fusermount3 -u), waits for each daemon and reads from its log the source
operations "until mounted" and "until unmounted" and the daemon's own mount time "(X ms". Prints one JSON line (a
summary to stderr); the daemons' logs of a failed round are kept in WORK/failed.<label>.<i>.log, their pids in
WORK/pid<i> while they run (for the script's cleanup when a round is interrupted).

`table` prints the medians of the rounds of each case of RESULTS (one JSON line a round) as a Markdown table.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

COUNTS = re.compile(r"source operations until (mounted|unmounted): (\d+) opens, (\d+) stats \((\d+) of open files\), "
                    r"(\d+) listings, (\d+) path walks, (\d+) reads \(([\d.]+) (B|kB|MB)\)")
MOUNTED = re.compile(r" mounted on .*\((\d+(?:\.\d+)?) ms")
UNIT = {"B": 1, "kB": 1e3, "MB": 1e6}


def parse_log(path):
    """{'mounted': {...}, 'unmounted': {...}, 'daemon_ms': X} from one daemon's log; missing keys when absent."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = COUNTS.search(line)
            if m:
                opens, stats, fstats, listings, walks, reads = (int(x) for x in m.group(2, 3, 4, 5, 6, 7))
                out[m.group(1)] = {
                    "opens": opens, "stats": stats, "fstats": fstats, "listings": listings, "walks": walks,
                    "reads": reads, "bytes": float(m.group(8)) * UNIT[m.group(9)],
                    "metadata": opens + stats + listings + walks,
                }
                continue
            m = MOUNTED.search(line)
            if m:
                out["daemon_ms"] = float(m.group(1))
    return out


def client_step(mnt, args):
    """The node's first look at its mount; raises on failure."""
    if args.list is not None:
        os.listdir(os.path.join(mnt, args.list))
    elif args.first is not None:
        d = os.path.join(mnt, args.first)
        names = [n for n in os.listdir(d) if n.endswith("zero_pp_rank_0_mp_rank_00_optim_states.pt")]
        if not names:
            raise RuntimeError(f"no rank 0 optimizer file in {d}")
        with open(os.path.join(d, min(names, key=len)), "rb") as f:
            if len(f.read(4096)) != 4096:
                raise RuntimeError("short read")


def run_round(args):
    n = args.nodes
    env = dict(os.environ, UCFS_BENCH_METADATA_DELAY_MS=str(args.delay_ms))
    mnts = [os.path.join(args.work, f"mnt{i}") for i in range(n)]
    logs = [os.path.join(args.work, f"log{i}") for i in range(n)]
    cmds = []
    for i in range(n):
        os.makedirs(mnts[i], exist_ok=True)
        for d in (f"cache{i}", f"upper{i}"):
            shutil.rmtree(os.path.join(args.work, d), ignore_errors=True)
        cmd = [args.ucfs, "mount", "-f", "-v"]
        cmd += ["--no-cache"] if args.cache == "none" else ["--cache-dir", os.path.join(args.work, f"cache{i}")]
        if args.upper:
            cmd += ["--upper", os.path.join(args.work, f"upper{i}")]
        cmds.append(cmd + args.mount_args + [args.source, mnts[i]])

    procs, started = [None] * n, [0.0] * n
    mounted_at, step_at, errors = [None] * n, [None] * n, [None] * n
    threads = []

    def step(i):
        try:
            client_step(mnts[i], args)
            step_at[i] = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            errors[i] = f"client step: {e}"

    try:
        t0 = time.monotonic()
        for i in range(n):
            with open(logs[i], "w") as log:
                started[i] = time.monotonic()
                procs[i] = subprocess.Popen(cmds[i], stderr=log, stdout=subprocess.DEVNULL, env=env)
            with open(os.path.join(args.work, f"pid{i}"), "w") as f:  # for the script's cleanup
                f.write(f"{procs[i].pid}\n")
        pending = set(range(n))
        deadline = t0 + args.timeout
        while pending and time.monotonic() < deadline:
            for i in sorted(pending):
                if os.path.ismount(mnts[i]):
                    mounted_at[i] = time.monotonic()
                    pending.discard(i)
                    if args.list is not None or args.first is not None:
                        t = threading.Thread(target=step, args=(i,), daemon=True)
                        t.start()
                        threads.append(t)
                elif procs[i].poll() is not None:
                    errors[i] = f"daemon exited with {procs[i].returncode} before its mount was up"
                    pending.discard(i)
            time.sleep(0.005)
        for i in pending:
            errors[i] = f"not mounted within {args.timeout} s"
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for i, t in enumerate(threads):
            if t.is_alive():
                errors[i] = errors[i] or "client step still running at the timeout"
    finally:
        for i, p in enumerate(procs):  # not up (timed out, or the round interrupted): stopped, not waited for
            if p is not None and mounted_at[i] is None and p.poll() is None:
                p.terminate()
        for i in range(n):
            if os.path.ismount(mnts[i]):
                r = subprocess.run(["fusermount3", "-u", mnts[i]], capture_output=True, text=True)
                if r.returncode != 0:  # a client step still in the mount: detach it
                    subprocess.run(["fusermount3", "-u", "-z", mnts[i]], capture_output=True)
        for i, p in enumerate(procs):
            if p is None:
                continue
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                errors[i] = errors[i] or "daemon still running 30 s after its unmount: killed"
            if p.returncode not in (0, None) and errors[i] is None:
                errors[i] = f"daemon exited with {p.returncode}"
            os.unlink(os.path.join(args.work, f"pid{i}"))

    nodes = []
    for i in range(n):
        info = parse_log(logs[i])
        for key in ("mounted", "unmounted"):
            if key not in info and errors[i] is None:
                errors[i] = f"no 'until {key}' line in its log"
        if errors[i] is not None:
            shutil.copy(logs[i], os.path.join(args.work, f"failed.{args.label}.{i}.log".replace(" ", "_")))
        nodes.append({
            "mounted": info.get("mounted"), "unmounted": info.get("unmounted"), "daemon_ms": info.get("daemon_ms"),
            "mount_s": None if mounted_at[i] is None else mounted_at[i] - started[i],
            "step_s": None if step_at[i] is None else step_at[i] - started[i],
            "error": errors[i],
        })
    print(json.dumps({"label": args.label, "launch_s": started[-1] - started[0], "nodes": nodes}), flush=True)
    done = [x for x in nodes if x["mount_s"] is not None]
    steps = [x["step_s"] for x in nodes if x["step_s"] is not None]
    print(f"  {args.label}: {len(done)}/{n} mounted, slowest {max((x['mount_s'] for x in done), default=0):.2f} s"
          + (f", slowest client step {max(steps):.2f} s" if steps else "")
          + "".join(f"\n  node {i}: {x['error']}" for i, x in enumerate(nodes) if x["error"]), file=sys.stderr)
    return 0 if all(x["error"] is None for x in nodes) else 1


def fmt_int(x):
    return f"{round(x):,}"


def summarize(rounds):
    """The medians over the rounds of one case of the per-round figures."""
    def per_round(fn):
        vals = [fn(r) for r in rounds]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    def total(key, field):
        def fn(r):
            xs = [nd[key][field] for nd in r["nodes"] if nd[key]]
            return sum(xs) if len(xs) == len(r["nodes"]) else None
        return fn

    def span(key, field):  # per daemon: "x" when every daemon asked the same, else "min–max" over all rounds
        xs = [nd[key][field] for r in rounds for nd in r["nodes"] if nd[key]]
        if not xs:
            return "–"
        lo, hi = min(xs), max(xs)
        return fmt_int(lo) if lo == hi else f"{fmt_int(lo)}–{fmt_int(hi)}"

    def slowest(field):
        def fn(r):
            xs = [nd[field] for nd in r["nodes"]]
            return None if any(x is None for x in xs) else max(xs)
        return fn

    failures = sum(1 for r in rounds for nd in r["nodes"] if nd["error"])
    s = {
        "md_mount": per_round(total("mounted", "metadata")), "md_mount_each": span("mounted", "metadata"),
        "md_unmount": per_round(total("unmounted", "metadata")), "md_unmount_each": span("unmounted", "metadata"),
        "mb_each": per_round(lambda r: max((nd["mounted"] or {}).get("bytes", 0) for nd in r["nodes"]) / 1e6),
        "mb_each_end": per_round(lambda r: max((nd["unmounted"] or {}).get("bytes", 0) for nd in r["nodes"]) / 1e6),
        "daemon_ms": per_round(slowest("daemon_ms")), "mount_s": per_round(slowest("mount_s")),
        "step_s": per_round(slowest("step_s")), "failures": failures, "rounds": len(rounds),
    }
    return s


def table(path):
    cases = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                cases.setdefault((r["label"], len(r["nodes"])), []).append(r)
    print("| case | nodes | index | delay | metadata ops at mount: all nodes (each) "
          "| until unmounted: all nodes (each) | MB read at mount / until unmounted (each) "
          "| slowest mount, daemon's own (ms) | slowest mount, launch to mount point (s) "
          "| slowest first listing / first bytes (s) | rounds (failed daemons) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for (label, nodes), rounds in cases.items():
        s = summarize(rounds)
        case, index, delay = label.split("|")

        def num(x, f):
            return "–" if x is None else format(x, f)
        md_m = "–" if s["md_mount"] is None else fmt_int(s["md_mount"])
        md_u = "–" if s["md_unmount"] is None else fmt_int(s["md_unmount"])
        print(f"| {case} | {nodes} | {index} | {delay} | {md_m} ({s['md_mount_each']}) "
              f"| {md_u} ({s['md_unmount_each']}) "
              f"| {num(s['mb_each'], '.1f')} / {num(s['mb_each_end'], '.1f')} | {num(s['daemon_ms'], '.0f')} "
              f"| {num(s['mount_s'], '.2f')} "
              f"| {num(s['step_s'], '.2f')} | {s['rounds']} ({s['failures']}) |")


def main():
    # The script stops an interrupted round with SIGTERM: unmount and stop the daemons on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("round")
    r.add_argument("--ucfs", required=True)
    r.add_argument("--source", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--nodes", type=int, default=16)
    r.add_argument("--delay-ms", type=int, default=0)
    r.add_argument("--timeout", type=float, default=180)
    r.add_argument("--cache", choices=("none", "cold"), default="none")
    r.add_argument("--upper", action="store_true")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--list")
    g.add_argument("--first")
    r.add_argument("mount_args", nargs="*")
    t = sub.add_parser("table")
    t.add_argument("results")
    args = p.parse_args()
    if args.cmd == "round":
        return run_round(args)
    table(args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
