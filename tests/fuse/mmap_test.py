#!/usr/bin/python3
"""Every file of a mount, mapped with mmap, holds the bytes read() gives.

torch.load(mmap=True) (torch >= 2.1, and the newest zero_to_fp32.py, which
loads rank files so) maps the whole file and takes each storage at the data
offset its record's local header gives. torch 1.13 has no mmap=True, so this
test does what it does: for every file of the universal and reshard views
(and <tag>_fp32) of a fixture and of the fixture re-written as torch 2.7
would with 4096-byte alignment, it maps the file through the FUSE mount,
compares the mapping with read(), and for torch.save files slices every
record at its local header's data offset from the mapping and compares it
with the record as Python's zipfile reads it.

usage: mmap_test.py UCFS_BIN REPO_ROOT
Ends with the line "N passed, M failed".
"""
import mmap
import os
import struct
import sys
import tempfile
import zipfile

UCFS, REPO = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
import mount_testing  # noqa: E402
import torch_variants as tv  # noqa: E402
from mount_testing import Results  # noqa: E402

# ucfs writes CRC 0 (as torch with compute_crc32 off); torch.load never checks.
zipfile.ZipExtFile._update_crc = lambda self, data: None
FIXTURES = os.path.join(REPO, "tests", "data", "fixtures")
results = Results()


def check_file(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == size, f"{path}: read {len(data)} of {size} bytes"
    if size == 0:
        return
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        assert m[:] == data, f"{path}: the mapping differs from read()"
        if data[:4] != b"PK\x03\x04":
            return
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                # torch's getRecordOffset: header + 30 + name + extra, from the local header.
                h = info.header_offset
                name_len, extra_len = struct.unpack("<HH", m[h + 26:h + 30])
                start = h + 30 + name_len + extra_len
                assert m[start:start + info.file_size] == z.read(info), f"{path}: {info.filename}"


def check_tree(root):
    count = 0
    for d, _, files in os.walk(root):
        for f in files:
            check_file(os.path.join(d, f))
            count += 1
    assert count > 0, f"no files under {root}"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"z3_tricky_fp32_ws4": os.path.join(FIXTURES, "z3_tricky_fp32_ws4", "checkpoint")}
        aligned = os.path.join(tmp, "z3_bf16_ws3_torch2.7_align4096")
        tv.rewrite_tree(os.path.join(FIXTURES, "z3_bf16_ws3", "checkpoint"), aligned,
                        tv.Variant(torch="2.7", alignment=4096))
        sources["z3_bf16_ws3 as torch 2.7, 4096-aligned"] = aligned
        for name, src in sources.items():
            for extra, ready in (([], "latest_universal"), (["--world-size", "5"], "latest")):
                def run(src=src, extra=extra, ready=ready):
                    m = mount_testing.Mount(UCFS, src, ready, *extra)
                    try:
                        check_tree(m.dir)
                    finally:
                        m.close()
                results.check(f"{name} {' '.join(extra) or 'universal'}: mmap equals read", run)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
