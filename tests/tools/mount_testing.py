"""Helpers for the tests that go through a real `ucfs mount`."""
import hashlib
import json
import os
import signal
import subprocess
import tempfile
import time
import traceback


def fixtures_of_stage(fixtures_dir, stage3):
    """The fixtures whose ORACLE.json names ZeRO stage 3 (stage3) or 1-2 (not stage3), sorted."""
    out = []
    for name in sorted(os.listdir(fixtures_dir)):
        path = os.path.join(fixtures_dir, name, "ORACLE.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            stage = json.load(f).get("zero_stage", 3)
        if (stage == 3) == stage3:
            out.append(name)
    return out


def read(path):
    """A file's bytes."""
    with open(path, "rb") as f:
        return f.read()


def write_synced(path, data, mode="wb"):
    """Writes `data` and fsyncs it: what a test then finds must have reached the upper directory."""
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def tree_sha256(root):
    """One hash over every path and file content under `root`."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            h.update(p.encode())
            with open(p, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def files_below(root):
    """The files below `root`, relative to it, sorted."""
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def same_files(a, b):
    """Every file below directories a and b: the same relative names, the same bytes."""
    import filecmp
    names_a = files_below(a)
    names_b = files_below(b)
    assert names_a == names_b, (names_a, names_b)
    assert names_a, f"{a} is empty"
    _, mismatch, errors = filecmp.cmpfiles(a, b, names_a, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


class Results:
    """Counts checks; a failing check is reported and the run goes on."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, fn):
        try:
            fn()
            self.passed += 1
            print(f"ok: {name}")
        except Exception:  # noqa: BLE001 - report and go on
            self.failed += 1
            print(f"FAILED: {name}")
            traceback.print_exc()

    def finish(self):
        """Prints the closing line and returns the exit status."""
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


class Mount:
    """`ucfs mount -f SRC <tmpdir> EXTRA...`, ready once `ready` exists in it."""

    def __init__(self, ucfs, src, ready, *extra):
        self.ucfs = ucfs
        self.dir = tempfile.mkdtemp(prefix="ucfs_mnt_")
        self.log = self.dir + ".log"
        self.proc = subprocess.Popen([ucfs, "mount", "-f", src, self.dir, "--log-file", self.log, "-v", *extra],
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while not os.path.exists(os.path.join(self.dir, ready)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ucfs mount exited {self.proc.returncode}: {self.proc.stderr.read()}")
            if time.time() > deadline:
                raise RuntimeError("mount did not appear")
            time.sleep(0.05)

    def close(self):
        """Unmounts, and raises unless the daemon then exited with status 0 (or
        had been killed with SIGKILL by the test): a daemon that crashed, or
        aborted on a sanitizer report (a leak at its exit, say), fails the test
        even when every read it served was right."""
        subprocess.run([self.ucfs, "umount", self.dir], check=False)
        try:
            self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        os.rmdir(self.dir)
        status = self.proc.returncode
        if status not in (0, -signal.SIGKILL):
            raise RuntimeError(f"ucfs mount exited with {status} after the unmount: {self.proc.stderr.read()}")

    def log_text(self):
        with open(self.log) as f:
            return f.read()
