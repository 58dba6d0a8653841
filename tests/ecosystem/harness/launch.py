#!/usr/bin/env python3
"""Starts N rank processes of a Python program on this machine, as torchrun would, without torchrun.

    python3 launch.py -n 2 [--timeout 600] [--port P] -- program.py [ARGS...]

Why not torchrun: Debian's torch is built without libuv, and torchrun's static rendezvous asks for a libuv TCPStore
("DistStoreError: use_libuv was requested ..."; USE_LIBUV=0 is not honoured there). The ranks themselves only need
the env:// variables, which this sets: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK=0, ROLE_RANK,
ROLE_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port unless --port), and USE_LIBUV=0: the env://
rendezvous of init_process_group asks for a libuv TCPStore too unless told not to (it reads USE_LIBUV; torchrun's
agent does not), and GLOO_SOCKET_IFNAME=lo. OMP_NUM_THREADS defaults to
cores // N (at least 1), as torchrun's default of 1 would starve a 2-core machine less than oversubscribing it.

Each rank's output goes to this process's stdout/stderr. Exits 0 when every rank exits 0. When a rank fails (or the
timeout passes, or this process gets SIGINT/SIGTERM) the other ranks are sent SIGTERM, then SIGKILL after a grace
period, and this exits with the first failing rank's code (124 on timeout).
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all(procs, grace=10.0):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--nproc", type=int, default=2, help="number of ranks (default 2)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before all ranks are killed (default 900)")
    ap.add_argument("--port", type=int, default=0, help="MASTER_PORT (default: a free port)")
    ap.add_argument("program", help="Python program each rank runs")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    if ns.args and ns.args[0] == "--":
        ns.args = ns.args[1:]
    n = ns.nproc
    port = ns.port or free_port()

    base = dict(os.environ)
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                ROLE_WORLD_SIZE=str(n), GROUP_RANK="0", PYTHONUNBUFFERED="1")
    base.setdefault("USE_LIBUV", "0")
    base.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the root's /etc/hosts does not resolve the host name
    base.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n)))

    procs = []
    stopping = {"signal": None}

    def on_signal(signum, _frame):
        stopping["signal"] = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for rank in range(n):
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), ROLE_RANK=str(rank))
            # Own process group: a failure kills the rank and anything it started.
            procs.append(subprocess.Popen([sys.executable, ns.program, *ns.args], env=env, start_new_session=True))
        deadline = time.monotonic() + ns.timeout
        rc = 0
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r, c = failed[0]
                print(f"launch.py: rank {r} exited with {c}; stopping the others", file=sys.stderr, flush=True)
                rc = c if c > 0 else 128 - c
                break
            if all(c == 0 for c in codes):
                break
            if stopping["signal"] is not None:
                print(f"launch.py: signal {stopping['signal']}; stopping the ranks", file=sys.stderr, flush=True)
                rc = 128 + stopping["signal"]
                break
            if time.monotonic() > deadline:
                print(f"launch.py: timeout after {ns.timeout:.0f}s; stopping the ranks", file=sys.stderr, flush=True)
                rc = 124
                break
            time.sleep(0.1)
        return rc
    finally:
        stop_all(procs)
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
