#!/usr/bin/python3
"""FUSE passthrough through a real mount: which reads reach the daemon.

Every request the daemon receives is in libfuse's debug log (`-d`), with the
node it is for. A file that is one real file whole (a source file passed
through, an upper file of a writable mount) is, with passthrough, read and
written by the kernel from its backing file: the daemon sees its OPEN and
RELEASE and no READ or WRITE. A file the view assembles is read through the
daemon either way. The bytes are the source's in both cases, and a source
changed since the mount was made is never served: its next open falls back
to the daemon, whose reads of it fail with EIO.

With UCFS_EXPECT_PASSTHROUGH=1 (tests/fuse_next/run.sh: libfuse 3.18, kernel
>= 6.9, root) passthrough must be used; otherwise (the Debian 12 build,
libfuse 3.14) the mount must say why not and serve every read itself, as it
did before passthrough existed.

Usage: passthrough_test.py UCFS FIXTURES_DIR
"""
import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from mount_testing import Results  # noqa: E402

EXPECT = os.environ.get("UCFS_EXPECT_PASSTHROUGH") == "1"
FIXTURE = "z3_tricky_fp32_ws4"
TAG = "global_step4"
OPTIM0 = f"{TAG}/zero_pp_rank_0_mp_rank_00_optim_states.pt"


class DebugMount:
    """`ucfs mount -d SRC MNT EXTRA...` with libfuse's request log in a file."""

    def __init__(self, ucfs, src, *extra):
        self.ucfs = ucfs
        self.dir = tempfile.mkdtemp(prefix="ucfs_pt_mnt_")
        self.log = self.dir + ".log"
        self.requests = self.dir + ".requests"
        with open(self.requests, "w") as err:
            self.proc = subprocess.Popen(
                [ucfs, "mount", "-d", src, self.dir, "--log-file", self.log, "-v", *extra],
                stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.time() + 20
        while not os.path.exists(os.path.join(self.dir, "latest")):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ucfs mount exited {self.proc.returncode}: {self.request_text()[-2000:]}")
            if time.time() > deadline:
                raise RuntimeError("mount did not appear")
            time.sleep(0.05)

    def request_text(self):
        with open(self.requests, errors="replace") as f:
            return f.read()

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def ops_for(self, path):
        """The opcodes the daemon received for the node of `path`."""
        node = os.stat(path).st_ino
        return re.findall(rf"opcode: ([A-Z_]+) \(\d+\), nodeid: {node},", self.request_text())

    def close(self):
        subprocess.run([self.ucfs, "umount", self.dir], check=False)
        try:
            self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
        os.rmdir(self.dir)
        for f in (self.log, self.requests):
            os.unlink(f)
        if self.proc.returncode != 0:
            raise RuntimeError(f"ucfs mount exited with {self.proc.returncode}")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    ucfs, fixtures = sys.argv[1], sys.argv[2]
    results = Results()
    work = tempfile.mkdtemp(prefix="ucfs_pt_")
    ckpt = os.path.join(work, "ckpt")
    shutil.copytree(os.path.join(fixtures, FIXTURE, "checkpoint"), ckpt)
    shutil.copytree(ckpt, os.path.join(work, "ckpt2"))
    try:
        m = DebugMount(ucfs, ckpt)
        try:
            def says_whether_it_is_used():
                text = m.log_text()
                if EXPECT:
                    assert "FUSE passthrough: on" in text, text[-2000:]
                else:
                    assert "FUSE passthrough: on" not in text, text[-2000:]
                    assert "FUSE passthrough: not used (" in text, text[-2000:]
            results.check("the log says whether passthrough is used", says_whether_it_is_used)

            def source_files_are_the_kernels_to_read():
                path = os.path.join(m.dir, OPTIM0)
                want = read(os.path.join(ckpt, OPTIM0))
                assert read(path) == want
                assert read(path) == want  # opened again
                ops = m.ops_for(path)
                if EXPECT:
                    assert "READ" not in ops and ops.count("OPEN") == 2, ops
                else:
                    assert "READ" in ops, ops
            results.check("a source file passed through is read by the kernel, bytes the source's",
                          source_files_are_the_kernels_to_read)

            def universal_model_states_too():
                path = os.path.join(m.dir, f"{TAG}_universal", "zero_pp_rank_0_mp_rank_00_model_states.pt")
                if not os.path.exists(path):
                    path = os.path.join(m.dir, f"{TAG}_universal", "mp_rank_00_model_states.pt")
                want = read(os.path.join(ckpt, TAG, "zero_pp_rank_0_mp_rank_00_model_states.pt"))
                assert read(path) == want
                assert ("READ" in m.ops_for(path)) != EXPECT, m.ops_for(path)
            results.check("the universal view's model states (a source, whole) likewise",
                          universal_model_states_too)

            def assembled_files_reach_the_daemon():
                zero = os.path.join(m.dir, f"{TAG}_universal", "zero")
                param = sorted(os.listdir(zero))[0]
                path = os.path.join(zero, param, "fp32.pt")
                assert len(read(path)) > 0
                assert "READ" in m.ops_for(path), m.ops_for(path)
            results.check("files the view assembles are read through the daemon", assembled_files_reach_the_daemon)

            def a_changed_source_is_not_served():
                src = os.path.join(ckpt, OPTIM0)
                st = os.stat(src)
                original = read(src)
                data = bytearray(original)
                data[-100] ^= 0xFF  # in place, same size, the mtime put back
                with open(src, "r+b") as f:
                    f.write(bytes(data))
                os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
                try:
                    read(os.path.join(m.dir, OPTIM0))
                except OSError as e:
                    assert e.errno == errno.EIO, e
                else:
                    raise AssertionError("a changed source was read through the mount")
                finally:
                    with open(src, "r+b") as f:
                        f.write(original)
            # Without passthrough the kernel keeps the pages it read before
            # (FOPEN_KEEP_CACHE, no OPEN at all): re-reads never ask, as
            # bench/README.md says; with it, every open checks the source.
            if EXPECT:
                results.check("a source changed in place is refused (EIO) at its next open, not served stale",
                              a_changed_source_is_not_served)
        finally:
            m.close()

        def off_with_no_passthrough():
            off = DebugMount(ucfs, os.path.join(work, "ckpt2"), "--no-passthrough")
            try:
                assert "FUSE passthrough: on" not in off.log_text()
                path = os.path.join(off.dir, OPTIM0)
                assert read(path) == read(os.path.join(ckpt, OPTIM0))
                assert "READ" in off.ops_for(path)
            finally:
                off.close()
        results.check("--no-passthrough: every read reaches the daemon", off_with_no_passthrough)

        def upper_files_are_the_kernels_to_read_and_write():
            upper = os.path.join(work, "upper")
            w = DebugMount(ucfs, os.path.join(work, "ckpt3"), "--upper", upper)
            try:
                data = os.urandom(3 << 20)
                path = os.path.join(w.dir, "saved.bin")
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                assert read(path) == data
                with open(path, "r+b") as f:  # read and write through one handle
                    f.seek(1000)
                    f.write(b"rewritten")
                    f.seek(0)
                    got = f.read()
                want = data[:1000] + b"rewritten" + data[1009:]
                assert got == want
                assert read(os.path.join(upper, "saved.bin")) == want
                ops = w.ops_for(path)
                if EXPECT:
                    assert "READ" not in ops and "WRITE" not in ops, ops
                else:
                    assert "READ" in ops and "WRITE" in ops, ops
                # A view file open to read (the daemon serves it) while the
                # same file is copied up and written: both opens work, as the
                # kernel allows one way per inode at a time.
                view_file = os.path.join(w.dir, TAG, "zero_pp_rank_2_mp_rank_00_optim_states.pt")
                with open(view_file, "rb") as reader:
                    first = reader.read(10)
                    with open(view_file, "r+b") as writer:
                        writer.write(b"X")
                    assert len(first) == 10
                assert read(view_file)[:1] == b"X"
                assert read(os.path.join(upper, TAG, "zero_pp_rank_2_mp_rank_00_optim_states.pt"))[:1] == b"X"
            finally:
                w.close()
        shutil.copytree(os.path.join(fixtures, FIXTURE, "checkpoint"), os.path.join(work, "ckpt3"))
        results.check("--upper: an upper file is read and written by the kernel, bytes the file's",
                      upper_files_are_the_kernels_to_read_and_write)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
