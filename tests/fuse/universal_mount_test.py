#!/usr/bin/python3
"""The universal view through a real FUSE mount, read by the real torch.load.

For every fixture: mount it with `ucfs mount -f`, then
  - torch.load every per-param file and compare it with DeepSpeed's own
    ds_to_universal output (or the fixture's expected/ folder): same dtype,
    exactly numel elements, requires_grad as DeepSpeed writes it, equal values
    (DeepSpeed's abs() bug pads a few of its files: there only the first numel
    elements are compared, and ours must have exactly numel);
  - optimizer_state.pt equals DeepSpeed's in structure and values;
  - the model-state copies are byte-identical to the source files;
  - `cp -r` of the mount loads the same; 8 concurrent readers at random
    offsets see the bytes of a sequential read; mmap sees them too;
  - writes fail with EROFS, xattrs describe the tensors;
  - the source tree's sha256 is unchanged afterwards.
The tuning switches (--no-prefetch, --no-splice, --drop-source-pages) serve
the same bytes; the connection keeps 32 readahead requests outstanding.
Then: a second mount is served from the index, a rank file rewritten while
mounted makes dependent reads fail with EIO, and a broken checkpoint is
refused with a message naming the file. At -v the daemon logs what it asked
of the source, at mount and at unmount, and UCFS_BENCH_METADATA_DELAY_MS
slows each of those questions.

usage: universal_mount_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import concurrent.futures
import errno
import hashlib
import mmap
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results, tree_sha256  # noqa: E402

deepspeed_stand_ins.install()

UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check


def Mount(ckpt, *extra):
    return mount_testing.Mount(UCFS, ckpt, "latest_universal", *extra)


def reference_dir(fixture):
    ds = os.path.join(FIXTURES, fixture, "checkpoint", "global_step4_universal")
    return ds if os.path.isdir(ds) else os.path.join(FIXTURES, fixture, "expected", "global_step4_universal")


def param_numel(fixture):
    """numel of every trainable param, from rank 0's param_shapes (read by torch)."""
    sd = torch.load(os.path.join(FIXTURES, fixture, "checkpoint", "global_step4",
                                 "zero_pp_rank_0_mp_rank_00_model_states.pt"), map_location="cpu")
    return {n: s.numel() for group in sd["param_shapes"] for n, s in group.items()}


def assert_same(a, b, where):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape, b.shape)
        assert a.requires_grad == b.requires_grad, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a.keys()) == list(b.keys()), (where, list(a), list(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        assert type(a) is type(b) and vars(a) == vars(b), where
    else:
        assert a == b, (where, a, b)


def assert_per_param_files_are_deepspeeds(mnt, numel, ref):
    """Every per-param file under the mount `mnt` loads with torch.load and
    equals DeepSpeed's in `ref` (its first numel elements: the abs() bug pads
    some of DeepSpeed's files)."""
    uni = os.path.join(mnt, "global_step4_universal")
    with open(os.path.join(mnt, "latest_universal")) as f:
        assert f.read() == "global_step4_universal"
    assert sorted(os.listdir(os.path.join(uni, "zero"))) == sorted(list(numel) + ["optimizer_state.pt"])
    for name, n in numel.items():
        for state in ("fp32", "exp_avg", "exp_avg_sq"):
            ours = torch.load(os.path.join(uni, "zero", name, state + ".pt"))
            theirs = torch.load(os.path.join(ref, "zero", name, state + ".pt"))
            assert ours.dtype == theirs.dtype == torch.float32, (name, state)
            assert tuple(ours.shape) == (n,), (name, state, ours.shape)
            assert ours.requires_grad == (state == "fp32") == theirs.requires_grad, (name, state)
            assert theirs.numel() >= n
            assert torch.equal(ours.detach(), theirs.detach()[:n]), (name, state)


def file_digests(root):
    """{path relative to root: sha256 of the file} for every file under root."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_fixture(fixture):
    ckpt = os.path.join(FIXTURES, fixture, "checkpoint")
    before = tree_sha256(os.path.join(FIXTURES, fixture))
    numel = param_numel(fixture)
    ref = reference_dir(fixture)
    m = Mount(ckpt, "--cache-dir", CACHE)
    try:
        uni = os.path.join(m.dir, "global_step4_universal")

        def per_param_files():
            assert_per_param_files_are_deepspeeds(m.dir, numel, ref)
        check(f"{fixture}: every per-param file loads with torch.load and equals DeepSpeed's", per_param_files)

        def optimizer_state():
            ours = torch.load(os.path.join(uni, "zero", "optimizer_state.pt"))
            theirs = torch.load(os.path.join(ref, "zero", "optimizer_state.pt"))
            assert_same(ours, theirs, "optimizer_state")
            assert "param_groups" in ours and ours["partition_count"] == theirs["partition_count"]
        check(f"{fixture}: optimizer_state.pt equals ds_to_universal's", optimizer_state)

        def model_states():
            src = os.path.join(ckpt, "global_step4")
            for f in os.listdir(src):
                if f.endswith("model_states.pt"):
                    with open(os.path.join(uni, f), "rb") as a, open(os.path.join(src, f), "rb") as b:
                        assert a.read() == b.read(), f
        check(f"{fixture}: model-state files are the source's", model_states)

        def copy_tree():
            dest = tempfile.mkdtemp(prefix="ucfs_cp_")
            try:
                subprocess.run(["cp", "-r", uni, dest], check=True)
                for name, n in numel.items():
                    a = torch.load(os.path.join(dest, "global_step4_universal", "zero", name, "exp_avg.pt"))
                    b = torch.load(os.path.join(uni, "zero", name, "exp_avg.pt"))
                    assert torch.equal(a, b) and a.numel() == n
            finally:
                shutil.rmtree(dest)
        check(f"{fixture}: cp -r of the mount loads the same", copy_tree)

        def concurrent_readers():
            path = os.path.join(uni, "zero", "optimizer_state.pt")
            with open(path, "rb") as f:
                whole = f.read()
            assert len(whole) == os.stat(path).st_size

            def reader(seed):
                rng = random.Random(seed)
                with open(path, "rb") as f:
                    for _ in range(200):
                        off = rng.randrange(len(whole))
                        n = rng.randrange(1, 4096)
                        f.seek(off)
                        assert f.read(n) == whole[off:off + n]
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(reader, range(8)))
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
                assert mm[:] == whole
        check(f"{fixture}: 8 concurrent random readers and mmap see the sequential bytes", concurrent_readers)

        def read_only():
            first = next(iter(numel))
            for path in (os.path.join(uni, "zero", first, "fp32.pt"), os.path.join(m.dir, "latest")):
                try:
                    open(path, "r+b")
                    raise AssertionError("opened for writing: " + path)
                except OSError as e:
                    assert e.errno == errno.EROFS, e
            try:
                open(os.path.join(m.dir, "new_file"), "w")
                raise AssertionError("created a file")
            except OSError as e:
                assert e.errno == errno.EROFS, e
        check(f"{fixture}: the mount is read-only (EROFS)", read_only)

        def xattrs():
            name, n = next(iter(numel.items()))
            path = os.path.join(uni, "zero", name, "fp32.pt")
            assert os.getxattr(path, "user.ucfs.numel").decode() == str(n)
            assert os.getxattr(path, "user.ucfs.dtype").decode() == "float32"
            assert "user.ucfs.shape" in os.listxattr(path)
        check(f"{fixture}: xattrs describe the tensors", xattrs)
    finally:
        m.close()
    def unchanged():
        assert tree_sha256(os.path.join(FIXTURES, fixture)) == before, "source tree changed"
    check(f"{fixture}: the source is unchanged", unchanged)


def test_tuning_switches(fixture):
    """The tuning switches change how bytes travel (no read-ahead in the
    sources, a copy through user space instead of splice, source pages dropped
    once served), never which bytes: each mount serves DeepSpeed's tensors and
    the very files the default mount serves."""
    ckpt = os.path.join(FIXTURES, fixture, "checkpoint")
    numel = param_numel(fixture)
    m = Mount(ckpt, "--cache-dir", CACHE)
    try:
        default = file_digests(m.dir)
    finally:
        m.close()
    for switch in ("--no-prefetch", "--no-splice", "--drop-source-pages"):
        def same_bytes():
            m = Mount(ckpt, "--cache-dir", CACHE, switch)
            try:
                assert_per_param_files_are_deepspeeds(m.dir, numel, reference_dir(fixture))
                assert file_digests(m.dir) == default
            finally:
                m.close()
        check(f"{fixture}: {switch} serves the default mount's bytes, DeepSpeed's tensors", same_bytes)


def test_index_and_changes():
    work = tempfile.mkdtemp(prefix="ucfs_src_")
    try:
        ckpt = os.path.join(work, "ckpt")
        shutil.copytree(os.path.join(FIXTURES, "z3_fp32_ws3", "checkpoint"), ckpt)
        cache = os.path.join(work, "cache")
        Mount(ckpt, "--cache-dir", cache).close()
        m = Mount(ckpt, "--cache-dir", cache)
        try:
            def from_index():
                assert "4 rank files from the index, 0 read" in m.log_text(), m.log_text()
            check("second mount: every rank file from the index", from_index)
            uni = os.path.join(m.dir, "global_step4_universal", "zero")
            # Rewrite rank 1's optimizer file in place: reads that need it fail.
            shard = os.path.join(ckpt, "global_step4", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
            with open(shard, "ab") as f:
                f.write(b"\0")

            def eio():
                try:
                    with open(os.path.join(uni, "embed.weight", "fp32.pt"), "rb") as f:
                        f.read()
                    raise AssertionError("read a file whose shard changed")
                except OSError as e:
                    assert e.errno == errno.EIO, e
                # optimizer_state.pt needs rank 0's file only: still served.
                torch.load(os.path.join(uni, "optimizer_state.pt"))
                assert "zero_pp_rank_1_mp_rank_00_optim_states.pt: changed since the checkpoint " \
                    "was read" in m.log_text(), m.log_text()
            check("a rewritten shard makes dependent reads fail with EIO, others still work", eio)
        finally:
            m.close()

        # Changes that keep size and mtime: an in-place edit with the mtime
        # put back, and a replacement by rename with both kept. Neither may
        # be served, nor reused from the index.
        def same_size_and_mtime(change):
            shutil.rmtree(ckpt)
            shutil.copytree(os.path.join(FIXTURES, "z3_fp32_ws3", "checkpoint"), ckpt)
            Mount(ckpt, "--cache-dir", cache).close()
            m = Mount(ckpt, "--cache-dir", cache)
            try:
                path = os.path.join(m.dir, "global_step4_universal", "zero", "embed.weight",
                                    "fp32.pt")
                shard = os.path.join(ckpt, "global_step4",
                                     "zero_pp_rank_2_mp_rank_00_optim_states.pt")
                st = os.stat(shard)
                change(shard)
                os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
                after = os.stat(shard)
                assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
                try:
                    with open(path, "rb") as f:
                        f.read()
                    raise AssertionError("served a shard that changed with size and mtime kept")
                except OSError as e:
                    assert e.errno == errno.EIO, e
            finally:
                m.close()
            again = Mount(ckpt, "--cache-dir", cache)
            try:
                assert "3 rank files from the index, 1 read" in again.log_text(), again.log_text()
            finally:
                again.close()

        def edit_in_place(shard):
            with open(shard, "r+b") as f:
                f.seek(-8, os.SEEK_END)
                f.write(b"\x01" * 8)

        def replace_by_rename(shard):
            with open(shard, "rb") as f:
                data = bytearray(f.read())
            data[-8:] = b"\x01" * 8
            with open(shard + ".new", "wb") as f:
                f.write(data)
            os.rename(shard + ".new", shard)

        check("an in-place edit that restores the mtime is caught, and not taken from the index",
              lambda: same_size_and_mtime(edit_in_place))
        check("a replacement by rename keeping size and mtime is caught",
              lambda: same_size_and_mtime(replace_by_rename))

        def killed():
            # kill -9 the daemon: the mount is dead ("transport endpoint is not
            # connected"), `ucfs umount` still cleans it up, the source is intact.
            before = tree_sha256(ckpt)
            m2 = Mount(ckpt, "--no-cache")
            m2.proc.kill()
            m2.proc.wait(timeout=10)
            try:
                os.listdir(m2.dir)
                raise AssertionError("a dead mount answered")
            except OSError as e:
                assert e.errno == errno.ENOTCONN, e
            r = subprocess.run([UCFS, "umount", m2.dir], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert not os.path.ismount(m2.dir)
            os.rmdir(m2.dir)
            assert tree_sha256(ckpt) == before
        check("kill -9 of the daemon: ucfs umount cleans up, the source is intact", killed)

        def broken():
            os.remove(os.path.join(ckpt, "global_step4", "zero_pp_rank_2_mp_rank_00_optim_states.pt"))
            mnt = tempfile.mkdtemp(prefix="ucfs_mnt_")
            try:
                r = subprocess.run([UCFS, "mount", "-f", ckpt, mnt], capture_output=True, text=True, timeout=30)
                assert r.returncode == 1, r
                assert "zero_pp_rank_2_mp_rank_00_optim_states.pt: missing" in r.stderr, r.stderr
                assert not os.path.ismount(mnt)
            finally:
                os.rmdir(mnt)
        check("a checkpoint with a missing rank is refused, naming the file", broken)
    finally:
        shutil.rmtree(work)


def source_counts(log, when):
    """{'opens': n, ...} from the -v line `... source operations until <when>: ...`."""
    m = re.search(r"source operations until " + when + r": (\d+) opens, (\d+) stats \(\d+ of open files\), (\d+) listings, "
                  r"(\d+) path walks, (\d+) reads", log)
    assert m, log
    return dict(zip(("opens", "stats", "listings", "walks", "reads"), map(int, m.groups())))


def test_source_counts():
    work = tempfile.mkdtemp(prefix="ucfs_src_")
    try:
        ckpt = os.path.join(work, "ckpt")
        shutil.copytree(os.path.join(FIXTURES, "z3_fp32_ws3", "checkpoint"), ckpt)
        cache = os.path.join(work, "cache")
        cold = Mount(ckpt, "--cache-dir", cache)
        cold.close()
        m = Mount(ckpt, "--cache-dir", cache)
        try:
            with open(os.path.join(m.dir, "global_step4_universal", "zero", "embed.weight", "fp32.pt"),
                      "rb") as f:
                f.read()
        finally:
            m.close()

        def counted():
            first = source_counts(cold.log_text(), "mounted")
            # The cold mount opened and read every optimizer file; the warm one
            # (the LMDB index) none of them.
            assert first["opens"] >= 3 and first["reads"] >= 3, first
            mounted = source_counts(m.log_text(), "mounted")
            unmounted = source_counts(m.log_text(), "unmounted")
            assert mounted["opens"] < first["opens"], (mounted, first)
            # embed.weight is cut over the 3 ranks: its read opened those 3.
            assert unmounted["opens"] - mounted["opens"] == 3, (mounted, unmounted)
        check("-v: the daemon logs the source operations at mount and at unmount", counted)

        def delayed():
            os.environ["UCFS_BENCH_METADATA_DELAY_MS"] = "20"
            try:
                slow = Mount(ckpt, "--cache-dir", cache)
            finally:
                del os.environ["UCFS_BENCH_METADATA_DELAY_MS"]
            slow.close()
            log = slow.log_text()
            assert "delayed by 20 ms (a benchmark knob)" in log, log
            # Each question waited 20 ms: the plan's time says so.
            took = float(re.search(r"\(([0-9.]+) ms, ", log).group(1))
            questions = source_counts(log, "mounted")
            assert took >= 20 * (questions["opens"] + questions["stats"]), (took, questions)
            mnt = tempfile.mkdtemp(prefix="ucfs_mnt_")
            try:
                r = subprocess.run([UCFS, "mount", "-f", ckpt, mnt], capture_output=True, text=True,
                                   timeout=30, env=dict(os.environ, UCFS_BENCH_METADATA_DELAY_MS="1ms"))
                assert r.returncode == 2 and "UCFS_BENCH_METADATA_DELAY_MS=1ms" in r.stderr, r
            finally:
                os.rmdir(mnt)
        check("UCFS_BENCH_METADATA_DELAY_MS delays each source question; a bad value is refused", delayed)
    finally:
        shutil.rmtree(work)


def test_connection_limits(fixture):
    """The connection asks the kernel to keep 32 readahead requests outstanding (its default is 12):
    what fusectl shows of the mount's connection (fusectl mounted for the check where it is not, as root, and
    unmounted after)."""
    def limits():
        top = "/sys/fs/fuse/connections"
        mounted_here = not os.path.ismount(top)
        if mounted_here:
            subprocess.run(["mount", "-t", "fusectl", "fusectl", top], check=True)
        m = Mount(os.path.join(FIXTURES, fixture, "checkpoint"), "--cache-dir", CACHE)
        try:
            conn = os.path.join(top, str(os.minor(os.stat(m.dir).st_dev)))
            with open(os.path.join(conn, "max_background")) as f:
                background = int(f.read())
            with open(os.path.join(conn, "congestion_threshold")) as f:
                congestion = int(f.read())
            assert (background, congestion) == (32, 24), (background, congestion)
        finally:
            m.close()
            if mounted_here:
                subprocess.run(["umount", top], check=True)
    check("the FUSE connection keeps 32 background requests (congestion at 24)", limits)


CACHE = tempfile.mkdtemp(prefix="ucfs_cache_")
try:
    # ZeRO-1/2 fixtures: flat_group_mount_test.py.
    for fixture in mount_testing.fixtures_of_stage(FIXTURES, stage3=True):
        test_fixture(fixture)
    test_tuning_switches("z3_tricky_fp32_ws4")  # several sub-groups, frozen, tied
    test_connection_limits("z3_fp32_ws2")
    test_index_and_changes()
    test_source_counts()
finally:
    shutil.rmtree(CACHE)
sys.exit(results.finish())
