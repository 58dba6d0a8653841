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
- POSIX: a mount shared with other users (their files theirs, their umask
  once, modes enforced), symlinks, hard links, FIFOs, sockets, devices,
  open-unlinked files, RENAME_EXCHANGE/NOREPLACE, xattrs, paths past
  PATH_MAX, copy-up keeping mtimes, <tag>_fp32 read-only, view entries
  named like whiteouts.
And the source tree's sha256 never changes.

usage: writable_mount_test.py UCFS_BIN FIXTURES_DIR
Ends with the line "N passed, M failed".
"""
import concurrent.futures
import ctypes
import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import deepspeed_stand_ins  # noqa: E402
import mount_testing  # noqa: E402
from mount_testing import Results, tree_sha256  # noqa: E402

deepspeed_stand_ins.install()
UCFS, FIXTURES = sys.argv[1], sys.argv[2]
results = Results()
check = results.check

FIXTURE = "z3_fp32_ws2"
N = 3
SOURCE = os.path.join(FIXTURES, FIXTURE, "checkpoint")
TAG = "global_step4"


def Mount(upper, *extra):
    return mount_testing.Mount(UCFS, SOURCE, "latest", "--no-cache", "--world-size", str(N),
                               "--upper", upper, *extra)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def generated(mnt):
    tag_dir = os.path.join(mnt, TAG)
    return {name: read(os.path.join(tag_dir, name)) for name in sorted(os.listdir(tag_dir))}


def walk_names(root):
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        names += dirnames + filenames
    return names


def write_synced(path, data, mode="wb"):
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


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
        optim0 = f"zero_pp_rank_0_mp_rank_00_optim_states.pt"
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


def expect_errno(err, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        assert e.errno == err, (fn.__name__, args, e)
        return
    raise AssertionError(f"{fn.__name__}{args} did not fail with {errno.errorcode[err]}")


def as_user(uid, script, cwd):
    """Runs `sh -c script` as `uid` (group `uid` too); returns its stdout."""
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    out = subprocess.run(["/bin/sh", "-c", script], cwd=cwd, preexec_fn=drop, capture_output=True,
                         text=True)
    assert out.returncode == 0, (script, out.stdout, out.stderr)
    return out.stdout


libc = ctypes.CDLL(None, use_errno=True)


def renameat2(src, dst, flags):
    if libc.renameat2(-100, src.encode(), -100, dst.encode(), ctypes.c_uint(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)


def shared_mount_posix():
    # A mount shared with other users: what they make is theirs, with their
    # umask applied once; they are held to the modes shown.
    upper = os.path.join(work, "shared")
    m = mount_testing.Mount(UCFS, SOURCE, "latest", "--no-cache", "--world-size", str(N), "--upper",
                            upper, "-o", "allow_other", "--views")
    try:
        pub = os.path.join(m.dir, "pub")
        os.mkdir(pub)
        os.chmod(pub, 0o1777)
        out = as_user(65534, "umask 002; echo x > f; chmod 600 f; echo y > f; mkdir d; "
                      "echo global_step8 > latest; echo global_step9 > latest; cat f latest; "
                      "stat -c '%u %g %a' f d latest", pub)
        assert out.split("\n")[:5] == ["y", "global_step9", "65534 65534 600", "65534 65534 775",
                                        "65534 65534 664"], out
        st = os.stat(os.path.join(upper, "pub", "f"))
        assert (st.st_uid, st.st_mode & 0o7777) == (65534, 0o600), st
        # Root's umask, once.
        old = os.umask(0o002)
        try:
            open(os.path.join(m.dir, "made"), "w").close()
            os.mkdir(os.path.join(m.dir, "made.d"))
        finally:
            os.umask(old)
        assert os.stat(os.path.join(m.dir, "made")).st_mode & 0o777 == 0o664
        assert os.stat(os.path.join(m.dir, "made.d")).st_mode & 0o777 == 0o775
        # Other users are held to the modes shown: root's view files and
        # the consolidated weights are not theirs to write.
        for script in ("echo x >> ../latest", f"touch ../{TAG}_fp32/new"):
            def drop():
                os.setgid(65534)
                os.setuid(65534)
            r = subprocess.run(["/bin/sh", "-c", script], cwd=pub, preexec_fn=drop,
                               capture_output=True, text=True)
            assert r.returncode != 0 and "Permission denied" in r.stderr, (script, r.stderr)
    finally:
        m.close()


check("a shared mount: other users' files are theirs, their umask applies once, modes hold",
      shared_mount_posix)


def posix_operations():
    upper = os.path.join(work, "posix")
    m = Mount(upper, "--views")
    try:
        d = m.dir
        tag = os.path.join(d, TAG)
        rank0 = os.path.join(tag, "zero_pp_rank_0_mp_rank_00_model_states.pt")
        shown = read(rank0)
        # Copy-up keeps the file as shown: an open for writing that writes
        # nothing, a chmod, a rename change no mtime.
        before = os.stat(rank0)
        open(rank0, "r+b").close()
        os.chmod(rank0, 0o640)
        after = os.stat(rank0)
        assert after.st_mtime_ns == before.st_mtime_ns, (before, after)
        assert after.st_mode & 0o777 == 0o640
        rank1 = os.path.join(tag, "zero_pp_rank_1_mp_rank_00_model_states.pt")
        mtime1 = os.stat(rank1).st_mtime_ns
        os.rename(rank1, rank1 + ".moved")
        assert os.stat(rank1 + ".moved").st_mtime_ns == mtime1
        os.rename(rank1 + ".moved", rank1)
        # Hard links to a shown file: copied up, one inode.
        os.link(rank0, os.path.join(d, "hard"))
        assert os.stat(rank0).st_ino == os.stat(os.path.join(d, "hard")).st_ino
        assert os.stat(rank0).st_nlink == 2
        assert read(os.path.join(d, "hard")) == shown
        # Symbolic links, FIFOs, sockets, regular files and devices by mknod.
        os.symlink("latest", os.path.join(d, "cur"))
        assert os.readlink(os.path.join(d, "cur")) == "latest"
        assert read(os.path.join(d, "cur")) == read(os.path.join(d, "latest"))
        os.mkfifo(os.path.join(d, "fifo"))
        os.mknod(os.path.join(d, "sock"), 0o600 | stat.S_IFSOCK)
        os.mknod(os.path.join(d, "plain"), 0o600 | stat.S_IFREG)
        os.mknod(os.path.join(d, "null"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        kinds = {n: stat.S_IFMT(os.lstat(os.path.join(d, n)).st_mode)
                 for n in ("cur", "fifo", "sock", "plain", "null")}
        assert kinds == {"cur": stat.S_IFLNK, "fifo": stat.S_IFIFO, "sock": stat.S_IFSOCK,
                         "plain": stat.S_IFREG, "null": stat.S_IFCHR}, kinds
        assert os.stat(os.path.join(d, "null")).st_rdev == os.makedev(1, 3)
        # An open file outlives its name.
        fd = os.open(os.path.join(d, "plain"), os.O_RDWR)
        try:
            os.write(fd, b"abc")
            os.unlink(os.path.join(d, "plain"))
            os.ftruncate(fd, 2)
            os.fchmod(fd, 0o604)
            os.utime(fd, (100, 200))
            st = os.fstat(fd)
            assert (st.st_size, st.st_mode & 0o777, st.st_mtime) == (2, 0o604, 200), st
        finally:
            os.close(fd)
        # RENAME_EXCHANGE and RENAME_NOREPLACE (an atomic save of `latest`).
        write_synced(os.path.join(d, "latest.new"), b"global_step9")
        renameat2(os.path.join(d, "latest.new"), os.path.join(d, "latest"), 2)
        assert read(os.path.join(d, "latest")) == b"global_step9"
        assert read(os.path.join(d, "latest.new")) == TAG.encode()
        expect_errno(errno.EEXIST, renameat2, os.path.join(d, "latest.new"), os.path.join(d, "latest"), 1)
        # Extended attributes: set on a shown file copies it up; the view's
        # own are read-only.
        model2 = os.path.join(tag, "zero_pp_rank_2_mp_rank_00_model_states.pt")
        expect_errno(errno.EPERM, os.setxattr, model2, "user.ucfs.param", b"x")
        os.setxattr(model2, "user.note", b"kept")
        assert os.getxattr(model2, "user.note") == b"kept"
        assert "user.note" in os.listxattr(model2)
        os.removexattr(model2, "user.note")
        expect_errno(errno.ENODATA, os.getxattr, model2, "user.note")
        # NAME_MAX, and paths past PATH_MAX (made relative to directory fds).
        expect_errno(errno.ENAMETOOLONG, os.stat, os.path.join(d, "n" * 256))
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        for i in range(24):
            os.mkdir("x" * 200, dir_fd=dfd)
            nfd = os.open("x" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        f = os.open("deep", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)
        os.write(f, b"deep")
        os.close(f)
        os.close(dfd)
        # The consolidated weights are read-only in every way.
        fp32 = os.path.join(d, TAG + "_fp32")
        bin_ = os.path.join(fp32, "pytorch_model.bin")
        expect_errno(errno.EROFS, open, os.path.join(fp32, "new"), "w")
        expect_errno(errno.EROFS, open, bin_, "r+b")
        expect_errno(errno.EROFS, os.unlink, bin_)
        expect_errno(errno.EROFS, os.rename, bin_, os.path.join(d, "out.bin"))
        expect_errno(errno.EROFS, os.rename, os.path.join(d, "latest.new"), os.path.join(fp32, "in"))
        expect_errno(errno.EROFS, os.link, bin_, os.path.join(d, "linked.bin"))
        expect_errno(errno.EROFS, os.link, os.path.join(d, "latest.new"), os.path.join(fp32, "in"))
        expect_errno(errno.EROFS, os.chmod, bin_, 0o600)
        expect_errno(errno.EROFS, os.mkdir, os.path.join(fp32, "sub"))
        expect_errno(errno.EROFS, os.rmdir, fp32)
        assert os.stat(fp32).st_mode & 0o222 == 0
        assert not os.path.exists(os.path.join(upper, TAG + "_fp32"))
    finally:
        m.close()
    # DIR holds them as they are.
    assert os.path.islink(os.path.join(upper, "cur"))
    assert stat.S_ISFIFO(os.lstat(os.path.join(upper, "fifo")).st_mode)
    assert os.stat(os.path.join(upper, "hard")).st_nlink == 2


check("symlinks, hard links, special files, open-unlinked files, RENAME_EXCHANGE, xattrs, "
      "long paths; copy-up keeps mtimes; <tag>_fp32 is read-only", posix_operations)


def tar_extracts_everything():
    # `tar --xattrs -x` (mknod of a regular file, hard links, symlinks,
    # FIFOs, xattrs, mtimes): the archive comes back whole.
    src = os.path.join(work, "tar_src")
    os.makedirs(os.path.join(src, "d"))
    with open(os.path.join(src, "d", "f"), "w") as f:
        f.write("hi")
    os.setxattr(os.path.join(src, "d", "f"), "user.k", b"v")
    os.utime(os.path.join(src, "d", "f"), (1577836800, 1577836800))
    os.link(os.path.join(src, "d", "f"), os.path.join(src, "d", "hard"))
    os.symlink("f", os.path.join(src, "d", "sym"))
    os.mkfifo(os.path.join(src, "d", "fifo"))
    archive = os.path.join(work, "t.tar")
    subprocess.run(["tar", "--xattrs", "-cf", archive, "-C", src, "d"], check=True)
    m = Mount(os.path.join(work, "tar_upper"))
    try:
        subprocess.run(["tar", "--xattrs", "--xattrs-include=user.*", "-xf", archive, "-C", m.dir],
                       check=True)
        d = os.path.join(m.dir, "d")
        assert sorted(os.listdir(d)) == ["f", "fifo", "hard", "sym"], os.listdir(d)
        st = os.stat(os.path.join(d, "f"))
        assert (st.st_nlink, st.st_mtime, read(os.path.join(d, "hard"))) == (2, 1577836800, b"hi"), st
        assert os.getxattr(os.path.join(d, "f"), "user.k") == b"v"
        assert os.readlink(os.path.join(d, "sym")) == "f"
        assert stat.S_ISFIFO(os.lstat(os.path.join(d, "fifo")).st_mode)
    finally:
        m.close()


check("tar --xattrs -x into the mount extracts every entry, link, xattr and mtime", tar_extracts_everything)


def whiteout_like_names_in_the_view():
    # A source root holding entries named like whiteouts: they show, and
    # deleting one hides it alone.
    src = os.path.join(work, "wh_source")
    shutil.copytree(SOURCE, src)
    for name in (".wh.notes", ".wh..opq"):
        with open(os.path.join(src, name), "w") as f:
            f.write(name)
    upper = os.path.join(work, "wh_upper")
    m = mount_testing.Mount(UCFS, src, "latest", "--no-cache", "--world-size", str(N), "--upper", upper)
    try:
        names = os.listdir(m.dir)
        assert ".wh.notes" in names and ".wh..opq" in names, names
        assert read(os.path.join(m.dir, ".wh.notes")) == b".wh.notes"
        os.unlink(os.path.join(m.dir, ".wh.notes"))
        names = os.listdir(m.dir)
        assert ".wh.notes" not in names and ".wh..opq" in names and "latest" in names, names
        assert os.path.exists(os.path.join(upper, ".wh..wh.w..wh.notes"))
    finally:
        m.close()
    m = mount_testing.Mount(UCFS, src, "latest", "--no-cache", "--world-size", str(N), "--upper", upper)
    try:
        names = os.listdir(m.dir)
        assert ".wh.notes" not in names and ".wh..opq" in names and TAG in names, names
    finally:
        m.close()


check("view entries named .wh.* show in a writable mount; their whiteouts never collide",
      whiteout_like_names_in_the_view)


def source_untouched():
    assert tree_sha256(SOURCE) == source_sha, "the source checkpoint changed"


check("the source checkpoint's sha256 is unchanged", source_untouched)
shutil.rmtree(work, ignore_errors=True)
sys.exit(results.finish())
