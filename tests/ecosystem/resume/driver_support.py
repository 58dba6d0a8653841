"""What every resume check of driver.py shares (host side): the context (temp dir, fixture copies, counts), mounting
and unmounting, running rank programs on a mount, and turning what they recorded into a verdict."""

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ECO = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(ECO))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
sys.path.insert(0, HERE)
import mount_testing  # noqa: E402

MODERN = os.path.join(REPO, "tests", "data", "modern")
RUN_SH = os.path.join(ECO, "run.sh")
LAUNCH = os.path.join(ECO, "harness", "launch.py")


class Failed(Exception):
    """A check's verdict: the message is its one-line reason; `details` are printed below it."""

    def __init__(self, msg, details=()):
        super().__init__(msg)
        self.details = list(details)


class Ctx:
    def __init__(self, ucfs, keep):
        self.ucfs = ucfs
        self.keep = keep
        self.tmp = tempfile.mkdtemp(prefix="ucfs_resume_", dir="/tmp")
        self.copies = {}
        self.passed = self.failed = 0
        self.n = 0

    def fixture(self, name):
        """A private copy of tests/data/modern/NAME (the checks never write into tests/data)."""
        if name not in self.copies:
            dst = os.path.join(self.tmp, "fixtures", name)
            shutil.copytree(os.path.join(MODERN, name), dst, symlinks=True)
            self.copies[name] = dst
        return self.copies[name]

    def scratch(self, label):
        self.n += 1
        d = os.path.join(self.tmp, f"{self.n:02d}_" + re.sub(r"[^A-Za-z0-9_.=-]+", "_", label))
        os.makedirs(d)
        return d

    def run_ranks(self, n, program, spec, mounts, scratch, timeout=600):
        """Runs `program` on n ranks in the modern root; returns (rc, seconds, log path, command string)."""
        spec_path = os.path.join(scratch, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        log = os.path.join(scratch, "ranks.log")
        cmd = [RUN_SH, "python3", LAUNCH, "-n", str(n), "--timeout", str(timeout), "--",
               os.path.join(HERE, program), "--spec", spec_path]
        env = dict(os.environ, UCFS_ECOSYSTEM_MOUNTS=" ".join(m.dir for m in mounts))
        env.setdefault("HF_HUB_OFFLINE", "1")
        t0 = time.time()
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout + 120).returncode
        shown = f"UCFS_ECOSYSTEM_MOUNTS={shlex.quote(env['UCFS_ECOSYSTEM_MOUNTS'])} " + " ".join(
            shlex.quote(c if not c.startswith(REPO + "/") else os.path.relpath(c, REPO)) for c in cmd)
        return rc, time.time() - t0, log, shown

    def check(self, name, fn):
        t0 = time.time()
        try:
            detail = fn()
            self.passed += 1
            print(f"ok: {name} :: {detail} [{time.time() - t0:.0f} s]", flush=True)
        except Failed as e:
            self.failed += 1
            print(f"FAILED: {name} :: {e} [{time.time() - t0:.0f} s]", flush=True)
            for d in e.details:
                print(f"    {d}", flush=True)
        except Exception as e:  # noqa: BLE001 - the harness's own error: report and go on
            self.failed += 1
            print(f"FAILED: {name} :: harness error {type(e).__name__}: {e} [{time.time() - t0:.0f} s]", flush=True)
            traceback.print_exc(file=sys.stdout)


def error_lines(log, n=3):
    """The most telling lines of a failed run's log: the last exception lines."""
    try:
        lines = open(log, errors="replace").read().splitlines()
    except OSError:
        return []
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln).strip() for ln in lines]
    exc = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", ln)]
    return (exc or [ln for ln in lines if ln])[-n:]


def snapshot(top):
    """Every path below top with its size, mtime and content digest: the source copy must come out unchanged."""
    out = {}
    for d, dirs, files in os.walk(top):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            h = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, top)] = (st.st_size, st.st_mtime_ns, st.st_mode, h)
    return out


def unchanged(before, after, what):
    if before != after:
        diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        raise Failed(f"the source {what} changed during the run: {diff[:5]}")


def batch_split(gb, micro0, n):
    """(micro, gas) at n ranks keeping the global batch gb: the saved micro batch with more accumulation where that
    divides (ucfs's advice), else micro gb/n with no accumulation."""
    if gb % (micro0 * n) == 0:
        return micro0, gb // (micro0 * n)
    if gb % n == 0:
        return gb // n, 1
    raise ValueError(f"no split of the global batch {gb} over {n} ranks")


def advice(mount):
    """ucfs's batch warning printed by the mount (read after it ended), shortened."""
    text = ""
    try:
        text += mount.proc.stderr.read() if mount.proc.stderr else ""
    except (OSError, ValueError):
        pass
    try:
        text += mount.log_text()
    except OSError:
        pass
    m = re.search(r"at \d+ ranks set gradient_accumulation_steps to (\d+)", text)
    if m:
        return f"gradient_accumulation_steps {m.group(1)}"
    if re.search(r"at \d+ ranks no gradient accumulation keeps", text):
        return "no accumulation keeps the micro batch: change it"
    return None


def close_all(mounts, scratch=None):
    """Unmounts; keeps each mount's batch advice in m.advice and its log (-v) in scratch/ (else removes it)."""
    errs = []
    for m in mounts:
        try:
            m.close()
        except Exception as e:  # noqa: BLE001
            errs.append(f"{m.dir}: {e}")
        m.advice = advice(m)
        try:
            if scratch:
                shutil.move(m.log, os.path.join(scratch, "ucfs-" + os.path.basename(m.log)))
            else:
                os.unlink(m.log)
        except OSError:
            pass
    if errs:
        raise Failed("a ucfs daemon did not exit cleanly after the unmount", errs)


def mounted(ctx, src, ready, *args):
    return mount_testing.Mount(ctx.ucfs, src, ready, "--no-cache", *args)


def facts_of(fx):
    with open(os.path.join(fx, "MODERN.json")) as f:
        return json.load(f)


def load_result(path):
    with open(path) as f:
        return json.load(f)


def reproducer(ucfs_cmd, run_cmd):
    mnt = ucfs_cmd.split()[-1] if ucfs_cmd.startswith("/") else None
    pre = f"mkdir -p {mnt} && " if mnt else ""
    return [f"reproduce: {pre}{ucfs_cmd}  (as root, on the host)", f"           {run_cmd}",
            "           then: ucfs umount MNT"]


def ranks_on_mount(ctx, n, program, spec, m, scratch, timeout=600):
    """Runs `program` on n ranks reading the mount m, then unmounts it whatever happened (m.advice then holds ucfs's
    batch advice). Returns (rc, log path, command string)."""
    try:
        rc, _, log, cmd = ctx.run_ranks(n, program, spec, [m], scratch, timeout=timeout)
    finally:
        close_all([m], scratch)
    return rc, log, cmd


def result_of(spec, rc, log, repro=()):
    """What the program recorded (spec["result"]); Failed, with its last error lines, its log and the reproducer
    lines `repro`, when it did not end well."""
    if rc != 0 or not os.path.exists(spec["result"]):
        raise Failed(f"the run failed (rc {rc}): " + " | ".join(error_lines(log)), [f"log: {log}"] + list(repro))
    return load_result(spec["result"])


def advised(summary, advice):
    """The check's summary with ucfs's batch advice, when the mount gave one."""
    return summary + f"; ucfs advised: {advice}" if advice else summary


def verdict(bad, summary, log, repro):
    """A check's outcome: its summary when nothing is `bad`, else Failed on the first mismatch (the first 12 listed
    below it, with the log and the reproducer lines `repro`)."""
    if bad:
        raise Failed(f"{len(bad)} mismatches: {bad[0]}; " + summary, bad[:12] + [f"log: {log}"] + repro)
    return summary
