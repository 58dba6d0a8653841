#!/usr/bin/python3
"""How many of a file's cached pages are parts of large folios (needs root).

    page_folios.py FILE...

Maps the first 64 MiB of each file, touches every page (so reads of an
uncached file fill the cache first), and looks each page up in
/proc/self/pagemap and /proc/kpageflags. bench/README.md uses it to show
that the kernel's FUSE page cache holds 4 KiB folios where ext4's holds
large ones, which is why re-reads through any FUSE mount are slower.
"""
import mmap
import os
import struct
import sys

KPF_COMPOUND_HEAD = 1 << 15
KPF_COMPOUND_TAIL = 1 << 16
PAGE = os.sysconf("SC_PAGE_SIZE")


def mapping_start(path):
    """The address of this process's mapping of `path`."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].rstrip("\n") == real:
                return int(fields[0].split("-")[0], 16)
    raise RuntimeError(f"{path}: no mapping found")


def count(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        size = min(os.fstat(fd).st_size, 64 << 20) // PAGE * PAGE
        view = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    for offset in range(0, size, PAGE):
        view[offset]  # fault the page in
    start = mapping_start(path)
    present = large = 0
    with open("/proc/self/pagemap", "rb") as pagemap, open("/proc/kpageflags", "rb") as kflags:
        for i in range(size // PAGE):
            pagemap.seek((start // PAGE + i) * 8)
            entry = struct.unpack("Q", pagemap.read(8))[0]
            if not entry >> 63:
                continue
            kflags.seek((entry & ((1 << 55) - 1)) * 8)
            flags = struct.unpack("Q", kflags.read(8))[0]
            present += 1
            large += bool(flags & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL))
    view.close()
    return present, large


for p in sys.argv[1:]:
    n, big = count(p)
    print(f"{p}: {n} pages cached, {big} of them in large folios")
