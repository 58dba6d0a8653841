"""Hostile shared indexes: the `index` category of the hostile corpus.

A shared index (`ucfs index`, <root>/<tag>.ucfs-index) lies beside the
checkpoint, where anyone who can write the checkpoint can write it too; every
node's mount reads it instead of the tag. Each case here is a copy of a
fixture's root with an index made by the real `ucfs index` and then broken:
cut short, emptied, bytes flipped (the checksum refuses them), bytes of the
deflated entries flipped with the checksum made again (zlib refuses them), the
entries' length claimed otherwise, bytes of the entries flipped and packed
again as a writer would (the decoder's bounds and the mount's checks meet the
fields themselves), another tag's index under this tag's name, a rank file
rewritten after the index was made, and an index that is no regular file (a
directory, a FIFO, a symlink out of the root, a sparse file of 2 GiB).

run_hostile.py runs its commands and mounts on each, with the same promise as
for any hostile checkpoint: output or a clear error naming a file, never a
hang, a crash or memory beyond the bound. An index that decodes but lies is a
checkpoint that lies: served or refused cleanly, never read past.
"""

import os
import shutil
import struct
import subprocess
import zlib

TAG = "global_step4"
FIXTURE = "z3_fp32_ws2"
RESEALED_FLIPS = 24  # flips spread over the body, each with the checksum remade


def _reseal(data):
    body = data[:-4]
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def _flip(data, at):
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


# The file (tag_snapshot.cc, format version 2): magic (8), version (u64), the
# entries' length (u64), the entries deflated (zlib), a CRC-32 of all before.
HEADER = 24


def _entries(data):
    """The entries of an index `ucfs index` wrote, inflated."""
    return zlib.decompress(data[HEADER:-4])


def _packed(entries, data):
    """`entries` deflated into a file with `data`'s header, sealed: what a writer that meant it would make."""
    head = data[:16] + struct.pack("<Q", len(entries))
    return _reseal(head + zlib.compress(entries, 6) + b"crc!")


def _fresh_root(fixtures, dest):
    """A copy of the fixture's root as DeepSpeed leaves it (no converter output)."""
    src = os.path.join(fixtures, FIXTURE, "checkpoint")
    shutil.copytree(src, dest, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n.endswith("_universal")])
    return dest


def _index(ucfs, root):
    r = subprocess.run([ucfs, "index", root], capture_output=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"ucfs index {root} failed: {r.stderr!r}")
    path = os.path.join(root, TAG + ".ucfs-index")
    with open(path, "rb") as f:
        return path, f.read()


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def make_index_cases(ucfs, fixtures, corpus):
    """Writes the cases under corpus/index/ and returns their cases.json entries."""
    cases = []

    def add(name, description, mutate, passed_over=True):
        # passed_over: the index is refused whole (it does not decode, is of
        # another tag, or is no regular file), so every view must be
        # exactly the one made without it (run_hostile.py compares them).
        key = os.path.join("index", name)
        root = _fresh_root(fixtures, os.path.join(corpus, key))
        index, good = _index(ucfs, root)
        mutate(root, index, good)
        cases.append({"case": key, "category": "index", "description": description, "fixture": FIXTURE,
                      "passed_over": passed_over})

    add("truncated_half", "the index cut in half", lambda r, i, g: _write(i, g[: len(g) // 2]))
    add("truncated_header", "only the index's first 12 bytes", lambda r, i, g: _write(i, g[:12]))
    add("empty", "an empty index file", lambda r, i, g: _write(i, b""))
    add("checksum_flip", "a byte of the body flipped, the checksum left", lambda r, i, g: _write(i, _flip(g, len(g) // 2)))
    add("version", "another format version, resealed", lambda r, i, g: _write(i, _reseal(_flip(g, 8))))
    for k in range(RESEALED_FLIPS):
        def flipped(r, i, g, k=k):
            entries = _entries(g)
            _write(i, _packed(_flip(entries, len(entries) * k // RESEALED_FLIPS), g))
        add(f"resealed_flip_{k:02d}", f"byte {k} of {RESEALED_FLIPS} along the entries flipped, deflated and sealed again",
            flipped, passed_over=False)
    for k in range(4):
        def deflate_flipped(r, i, g, k=k):
            _write(i, _reseal(_flip(g, HEADER + (len(g) - 4 - HEADER) * k // 4)))
        add(f"deflate_flip_{k}", f"byte {k} of 4 along the deflated entries flipped, the checksum remade",
            deflate_flipped)
    for value in (2**64 - 1, 2**40, 1):
        def claimed(r, i, g, value=value):
            _write(i, _reseal(g[:16] + struct.pack("<Q", value) + g[24:]))
        add(f"entries_length_{value:x}", f"the entries' length claimed as {value:#x}, resealed", claimed)
    # The entries' fields: the tag (u64 length, bytes), its directory's
    # identity (4 u64), the entry count (u64), then each entry: kind, path
    # length, path, payload length.
    n = len(TAG)
    fields = {"tag_length": 0, "entry_count": 40 + n, "first_kind": 48 + n, "first_path_length": 56 + n}
    for field, at in fields.items():
        for value in (2**64 - 1, 2**40, 2**31):
            def huge(r, i, g, at=at, value=value):
                e = _entries(g)
                _write(i, _packed(e[:at] + struct.pack("<Q", value) + e[at + 8:], g))
            add(f"huge_{field}_{value:x}", f"the index's {field.replace('_', ' ')} set to {value:#x}, packed again",
                huge)

    def other_tag(r, i, g):
        os.rename(os.path.join(r, TAG), os.path.join(r, "global_step8"))
        _write(os.path.join(r, "latest"), b"global_step8")
        other, _ = _index(ucfs, r)
        os.rename(os.path.join(r, "global_step8"), os.path.join(r, TAG))
        _write(os.path.join(r, "latest"), TAG.encode())
        os.replace(other, i)
    add("other_tag", "another tag's index under this tag's name", other_tag)

    def rewritten(r, i, g):
        # Same size and directory, other bytes and times: the tag's identity
        # holds, the rank file's does not.
        path = os.path.join(r, TAG, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            data[-100] ^= 0xFF
            f.seek(0)
            f.write(data)
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    add("rank_file_rewritten", "a rank file rewritten in place after the index was made", rewritten,
        passed_over=False)

    def directory(r, i, g):
        os.remove(i)
        os.mkdir(i)
    add("a_directory", "the index is a directory", directory)

    def fifo(r, i, g):
        os.remove(i)
        os.mkfifo(i)
    add("a_fifo", "the index is a FIFO (no writer)", fifo)

    def escaping(r, i, g):
        outside = os.path.join(os.path.dirname(os.path.dirname(r)), "outside-" + os.path.basename(r) + ".ucfs-index")
        _write(outside, g)
        os.remove(i)
        os.symlink(outside, i)
    add("escaping_symlink", "the index is a symlink out of the root (to a good index)", escaping)

    def sparse(r, i, g):
        with open(i, "r+b") as f:
            f.truncate(2 << 30)
    add("sparse_2gib", "the index grown to a sparse 2 GiB", sparse)
    return cases
