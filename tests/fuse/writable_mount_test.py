#!/usr/bin/python3
"""The writable reshard view (`ucfs mount --world-size N --upper DIR`) through a real FUSE mount.

- A trainer's save sequence: a new tag dir written with torch.save, `latest`
  rewritten in place (open 'w', as DeepSpeed does) and by write-aside-and-rename,
  fsync; then unmount: DIR alone holds exactly what was written, the generated
  files are unchanged, and a remount over the same DIR shows it all again.
- Writing into, truncating and deleting generated files: copy-up keeps every
  other byte, deletions persist as whiteouts, ucfs's reserved names are refused,
  directories of the view cannot be renamed (EXDEV) while new ones can.
- 8 concurrent writers.
- kill -9 of the daemon in the middle of a large write: everything fsynced
  before is intact in DIR, the torn file holds a prefix of what was written,
  a remount over DIR works.
- The universal view with --upper takes a save as well.
- POSIX semantics of the same mount: writable_posix_test.py.
And the source tree's sha256 never changes.

usage: writable_mount_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import concurrent.futures
import ctypes
import errno
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results, read, tree_sha256, write_synced  # noqa: E402
import writable_setup  # noqa: E402
from writable_setup import N, TAG  # noqa: E402

deepspeed_stand_ins.install()
UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check

SOURCE = writable_setup.source_of(FIXTURES)


def Mount(upper, *extra):
    return writable_setup.mount(UCFS, SOURCE, upper, *extra)


def generated(mnt):
    tag_dir = os.path.join(mnt, TAG)
    return {name: read(os.path.join(tag_dir, name)) for name in sorted(os.listdir(tag_dir))}


def walk_names(root):
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        names += dirnames + filenames
    return names


source_sha = tree_sha256(SOURCE)
work = tempfile.mkdtemp(prefix="ucfs_writable_")


def trainer_sequence():
    upper = os.path.join(work, "trainer")
    m = Mount(upper)
    try:
        shown = generated(m.dir)
        assert len(shown) == 2 * N, sorted(shown)
        # DeepSpeed's save: the new tag's rank files, then `latest` in place.
        os.mkdir(os.path.join(m.dir, "global_step8"))
        saved = {}
        for s in range(N):
            obj = {"rank": s, "flat": torch.arange(1000 * (s + 1), dtype=torch.float32),
                   "step": torch.tensor(8.0)}
            path = os.path.join(m.dir, "global_step8", f"zero_pp_rank_{s}_mp_rank_00_optim_states.pt")
            torch.save(obj, path)
            saved[path] = obj
        with open(os.path.join(m.dir, "latest"), "w") as f:
            f.write("global_step8")
        assert read(os.path.join(m.dir, "latest")) == b"global_step8"
        # A tool that writes aside and renames into place.
        write_synced(os.path.join(m.dir, "latest.tmp"), b"global_step8")
        os.replace(os.path.join(m.dir, "latest.tmp"), os.path.join(m.dir, "latest"))
        assert read(os.path.join(m.dir, "latest")) == b"global_step8"
        assert not os.path.exists(os.path.join(m.dir, "latest.tmp"))
        for path, obj in saved.items():
            back = torch.load(path)
            assert back["rank"] == obj["rank"] and torch.equal(back["flat"], obj["flat"]), path
            assert os.stat(path).st_size == len(read(path))
        new_bytes = {os.path.relpath(p, m.dir): read(p) for p in saved}
        assert generated(m.dir) == shown, "generated files changed"
        assert not [n for n in walk_names(m.dir) if n.startswith(".wh.")], "whiteouts are visible"
    finally:
        m.close()
    # DIR alone: exactly what was written, nothing copied up; readable by all.
    assert read(os.path.join(upper, "latest")) == b"global_step8"
    assert os.stat(os.path.join(upper, "latest")).st_mode & 0o777 == 0o644
    for rel, data in new_bytes.items():
        assert read(os.path.join(upper, rel)) == data, rel
    assert sorted(os.listdir(upper)) == ["global_step8", "latest"], os.listdir(upper)
    # A remount over the same DIR shows it all again.
    m = Mount(upper)
    try:
        assert read(os.path.join(m.dir, "latest")) == b"global_step8"
        for rel, data in new_bytes.items():
            assert read(os.path.join(m.dir, rel)) == data, rel
        assert generated(m.dir) == shown
    finally:
        m.close()


check("a trainer's save sequence lands in DIR byte for byte and survives a remount", trainer_sequence)


def generated_files_are_copied_up():
    upper = os.path.join(work, "copyup")
    m = Mount(upper)
    try:
        shown = generated(m.dir)
        optim0 = "zero_pp_rank_0_mp_rank_00_optim_states.pt"
        path = os.path.join(m.dir, TAG, optim0)
        with open(path, "r+b") as f:
            f.seek(100)
            f.write(b"XYZ")
        want = shown[optim0][:100] + b"XYZ" + shown[optim0][103:]
        assert read(path) == want
        assert read(os.path.join(upper, TAG, optim0)) == want
        model1 = os.path.join(m.dir, TAG, "zero_pp_rank_1_mp_rank_00_model_states.pt")
        os.truncate(model1, 10)
        assert read(model1) == shown["zero_pp_rank_1_mp_rank_00_model_states.pt"][:10]
        gone = "zero_pp_rank_2_mp_rank_00_model_states.pt"
        os.unlink(os.path.join(m.dir, TAG, gone))
        assert gone not in os.listdir(os.path.join(m.dir, TAG))
        assert os.path.exists(os.path.join(upper, TAG, ".wh." + gone))
        # Names like whiteouts are ordinary names, stored escaped in DIR;
        # view directories cannot move.
        for name in (".wh.x", ".wh..opq"):
            write_synced(os.path.join(m.dir, name), name.encode())
            assert read(os.path.join(m.dir, name)) == name.encode()
            assert read(os.path.join(upper, ".wh..wh.e." + name)) == name.encode()
            os.unlink(os.path.join(m.dir, name))
        try:
            os.rename(os.path.join(m.dir, TAG), os.path.join(m.dir, "moved"))
            raise AssertionError("a view directory was renamed")
        except OSError as e:
            assert e.errno == errno.EXDEV, e
        os.mkdir(os.path.join(m.dir, "stage"))
        write_synced(os.path.join(m.dir, "stage", "w.pt"), b"weights")
        os.rename(os.path.join(m.dir, "stage"), os.path.join(m.dir, "global_step9"))
        assert read(os.path.join(m.dir, "global_step9", "w.pt")) == b"weights"
        os.utime(os.path.join(m.dir, "global_step9", "w.pt"), (1000, 2000))
        assert os.stat(os.path.join(m.dir, "global_step9", "w.pt")).st_mtime == 2000
        # The others are served from the view as before.
        rest = {k: v for k, v in generated(m.dir).items()}
        for name, data in shown.items():
            if name not in (optim0, "zero_pp_rank_1_mp_rank_00_model_states.pt", gone):
                assert rest[name] == data, name
    finally:
        m.close()
    m = Mount(upper)
    try:
        assert gone not in os.listdir(os.path.join(m.dir, TAG)), "a deletion did not persist"
        assert read(os.path.join(m.dir, TAG, optim0)) == want
        # Writing the deleted name again brings a file back.
        write_synced(os.path.join(m.dir, TAG, gone), b"again")
        assert read(os.path.join(m.dir, TAG, gone)) == b"again"
        assert not os.path.exists(os.path.join(upper, TAG, ".wh." + gone))
    finally:
        m.close()


check("writes into generated files copy them up; deletions persist as whiteouts", generated_files_are_copied_up)


def concurrent_writers():
    upper = os.path.join(work, "parallel")
    m = Mount(upper)
    try:
        os.mkdir(os.path.join(m.dir, "par"))
        blobs = [os.urandom(8 << 20) for _ in range(8)]

        def write(i):
            with open(os.path.join(m.dir, "par", f"f{i}"), "wb") as f:
                for at in range(0, len(blobs[i]), 1 << 20):
                    f.write(blobs[i][at:at + (1 << 20)])
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(write, range(8)))
        for i, blob in enumerate(blobs):
            assert read(os.path.join(m.dir, "par", f"f{i}")) == blob, i
    finally:
        m.close()
    for i, blob in enumerate(blobs):
        assert read(os.path.join(upper, "par", f"f{i}")) == blob, i


check("8 concurrent writers: every byte lands", concurrent_writers)


def resident_pages(fd, size):
    """How many of the file's pages are in the mount's page cache (mincore)."""
    import mmap
    libc_ = ctypes.CDLL(None, use_errno=True)
    libc_.mmap.restype = ctypes.c_void_p
    libc_.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                           ctypes.c_int, ctypes.c_long]
    libc_.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc_.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    address = libc_.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    try:
        vec = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
        assert libc_.mincore(address, size, vec) == 0, os.strerror(ctypes.get_errno())
        return sum(b & 1 for b in vec.raw)
    finally:
        libc_.munmap(address, size)


def direct_writes_stay_coherent():
    # Write-only opens bypass the mount's page cache (direct I/O): their
    # bytes never enter it, yet another handle's cached pages show them.
    upper = os.path.join(work, "direct")
    m = Mount(upper)
    try:
        path = os.path.join(m.dir, "log.txt")
        w = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        r = os.open(path, os.O_RDONLY)
        try:
            os.write(w, b"a" * 100)
            assert os.pread(r, 4096, 0) == b"a" * 100  # cached now
            os.write(w, b"b" * 100)                    # into the cached page
            assert os.pread(r, 4096, 0) == b"a" * 100 + b"b" * 100
            os.pwrite(w, b"c" * 10, 10)
            assert os.pread(r, 4096, 0)[:30] == b"a" * 10 + b"c" * 10 + b"a" * 10
            a = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.write(a, b"z" * 5)
            os.close(a)
            assert os.fstat(r).st_size == 205 and os.pread(r, 4096, 200) == b"z" * 5
            # 8 MiB in one write(2), unaligned: split into parallel requests, landing whole.
            blob = os.urandom((8 << 20) + 4097)
            assert os.pwrite(w, blob, 3) == len(blob)
            assert resident_pages(r, len(blob) + 3) <= 2, "direct writes filled the page cache"
            assert os.pread(r, len(blob) + 8, 0) == b"a" * 3 + blob
        finally:
            os.close(w)
            os.close(r)
        # A read-write handle is buffered: it may be mmap'd shared and written through it.
        import mmap
        rw = os.open(path, os.O_RDWR)
        try:
            with mmap.mmap(rw, 4096) as mapped:
                mapped[0:4] = b"MMAP"
                mapped.flush()
        finally:
            os.close(rw)
        expected = b"MMAP" + blob[1:]
        assert read(path) == expected
    finally:
        m.close()
    assert read(os.path.join(upper, "log.txt")) == expected


check("write-only opens bypass the page cache; readers see them, appends and mmap work",
      direct_writes_stay_coherent)

WRITER = r"""
import os, sys
path = sys.argv[1]
chunk = 1 << 20
with open(path, "wb") as f:
    for i in range(4096):
        f.write(bytes([i % 251]) * chunk)
        if i % 8 == 7:
            f.flush()
            os.fsync(f.fileno())
            print(i + 1, flush=True)
"""


def killed_while_writing():
    upper = os.path.join(work, "killed")
    m = Mount(upper)
    try:
        write_synced(os.path.join(m.dir, "latest"), "global_step8", "w")
        os.mkdir(os.path.join(m.dir, "global_step8"))
        done = os.urandom(3 << 20)
        write_synced(os.path.join(m.dir, "global_step8", "done.pt"), done)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, os.path.join(m.dir, "global_step8", "torn.pt")],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        synced = 0
        while synced < 64:
            line = writer.stdout.readline()
            assert line, "the writer stopped early"
            synced = int(line)
        m.proc.kill()
        m.proc.wait(timeout=10)
        writer.wait(timeout=30)
        assert writer.returncode != 0, "the writer did not notice the dead mount"
    finally:
        m.close()
    torn = read(os.path.join(upper, "global_step8", "torn.pt"))
    assert len(torn) >= synced << 20, (len(torn), synced)
    for i in range(0, len(torn), 1 << 20):
        piece = torn[i:i + (1 << 20)]
        assert piece == bytes([(i >> 20) % 251]) * len(piece), f"chunk {i >> 20} is not what was written"
    assert read(os.path.join(upper, "global_step8", "done.pt")) == done
    assert read(os.path.join(upper, "latest")) == b"global_step8"
    assert not [n for n in walk_names(upper) if n.startswith(".wh..wh.")], "temporaries left"
    m = Mount(upper)
    try:
        assert read(os.path.join(m.dir, "latest")) == b"global_step8"
        assert read(os.path.join(m.dir, "global_step8", "done.pt")) == done
        assert os.stat(os.path.join(m.dir, "global_step8", "torn.pt")).st_size == len(torn)
        assert len(os.listdir(os.path.join(m.dir, TAG))) == 2 * N
    finally:
        m.close()


check("kill -9 in the middle of a write: DIR keeps what was synced, a remount works", killed_while_writing)


def universal_view_writable():
    # DeepSpeed resuming with load_universal and saving into the same mount.
    upper = os.path.join(work, "universal")
    m = mount_testing.Mount(UCFS, SOURCE, "latest_universal", "--no-cache", "--upper", upper)
    try:
        fp32 = os.path.join(m.dir, TAG + "_universal", "zero", "fc1.weight", "fp32.pt")
        before = read(fp32)
        assert os.getxattr(fp32, "user.ucfs.param") == b"fc1.weight"
        os.mkdir(os.path.join(m.dir, "global_step6"))
        torch.save({"x": torch.ones(3)}, os.path.join(m.dir, "global_step6", "mp_rank_00_model_states.pt"))
        with open(os.path.join(m.dir, "latest"), "w") as f:  # the source's own `latest`
            f.write("global_step6")
        assert read(os.path.join(m.dir, "latest")) == b"global_step6"
        assert read(fp32) == before
    finally:
        m.close()
    assert read(os.path.join(upper, "latest")) == b"global_step6"
    assert read(os.path.join(SOURCE, "latest")) == TAG.encode()


check("the universal view with --upper takes a save too; the source's latest is untouched",
      universal_view_writable)


def no_extra_views_unless_asked():
    # Trainers parse what a writable mount shows (open-instruct's
    # int(name[len("global_step"):]) over every global_step* entry): a root
    # mounted alone shows the checkpoint at N and nothing more, in both views;
    # --views brings <tag>_fp32 back. A new upper root is the shown root
    # copied up: the source's mtime, not the mount's.
    for view, extra in (("latest", ("--world-size", str(N))), ("latest_universal", ())):
        upper = os.path.join(work, "no_views_" + view)
        m = mount_testing.Mount(UCFS, SOURCE, view, "--no-cache", "--upper", upper, *extra)
        try:
            names = sorted(os.listdir(m.dir))
            # The source's own entries (this one holds its converter's
            # output too), and the universal view's product in that view.
            shown = set(os.listdir(SOURCE))
            if view == "latest_universal":
                shown |= {TAG + "_universal", "latest_universal"}
            assert names == sorted(shown), (names, sorted(shown))
            assert os.stat(m.dir).st_mtime_ns == os.stat(SOURCE).st_mtime_ns
        finally:
            m.close()
    m = Mount(os.path.join(work, "views_asked"), "--views")
    try:
        assert TAG + "_fp32" in os.listdir(m.dir)
    finally:
        m.close()


check("a writable root shows no extra view unless --views; its root keeps the source's mtime",
      no_extra_views_unless_asked)


def shows_its_source():
    # mount(8) and findmnt name the checkpoint; df gives the space a write
    # would use (the upper directory's), not "100% full".
    upper = os.path.join(work, "df")
    m = Mount(upper)
    try:
        with open("/proc/self/mountinfo") as f:
            line = next(l for l in f if l.split()[4] == m.dir)
        assert line.split(" - ")[1].split()[1] == os.path.abspath(SOURCE), line
        got, want = os.statvfs(m.dir), os.statvfs(upper)
        assert got.f_blocks == want.f_blocks and got.f_bavail > 0, (got, want)
    finally:
        m.close()


check("mount(8) names the checkpoint as the source; df shows the upper directory's space",
      shows_its_source)


def source_untouched():
    assert tree_sha256(SOURCE) == source_sha, "the source checkpoint changed"


check("the source checkpoint's sha256 is unchanged", source_untouched)
shutil.rmtree(work, ignore_errors=True)
sys.exit(results.finish())
