"""Hostile cases of the torch.save container: truncated files, patched zip directories (ZIP64, EOCD,
central entries), deflated and lying records, missing and extra records.

Registered with corpus_support.case; make_hostile_corpus.py writes them.
"""

import struct
import zlib

from corpus_support import (
    case, load, model, optim, read, set_records, tz, write)


# ------------------------------------------------------------------ zip records

def truncated(frac):
    def fn(tag, root):
        p = optim(tag, 1)
        data = read(p)
        write(p, data[:int(len(data) * frac)])
    return fn


for _frac in (0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999):
    case("zip", f"truncated_{_frac}", f"rank 1's optimizer file cut at {_frac:.1%}")(truncated(_frac))


@case("zip", "truncated_last_byte", "the last byte of rank 0's model states cut")
def _(tag, root):
    write(model(tag), read(model(tag))[:-1])


@case("zip", "empty_file", "an empty optimizer file")
def _(tag, root):
    write(optim(tag, 1), b"")


@case("zip", "garbage", "random bytes for an optimizer file")
def _(tag, root):
    write(optim(tag, 1), bytes((i * 7919 + 13) % 256 for i in range(5000)))


@case("zip", "text_file", "a text file as the model states")
def _(tag, root):
    write(model(tag), b"not a checkpoint\n" * 10)


@case("zip", "legacy_magic_garbage", "torch's legacy magic then garbage")
def _(tag, root):
    write(optim(tag, 1), b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19." + b"\xff" * 100)


def patch(path, offset, data):
    b = bytearray(read(path))
    b[offset:offset + len(data)] = data
    write(path, bytes(b))


def eocd(data):
    return data.rindex(b"PK\x05\x06")


def z64(data):
    return data.rindex(b"PK\x06\x06")


def central(data):
    return data.index(b"PK\x01\x02")


ZIP_PATCHES = {
    # (description, function(data) -> [(offset, bytes)])
    "eocd_entries_65535": lambda d: [(eocd(d) + 8, struct.pack("<HH", 65535, 65535))],
    "eocd_cd_offset_huge": lambda d: [(eocd(d) + 16, struct.pack("<I", 0xFFFFFFF0))],
    "eocd_multi_disk": lambda d: [(eocd(d) + 4, struct.pack("<H", 3))],
    "z64_entries_2_pow_40": lambda d: [(z64(d) + 24, struct.pack("<QQ", 2 ** 40, 2 ** 40))],
    "z64_cd_size_huge": lambda d: [(z64(d) + 40, struct.pack("<Q", 2 ** 63))],
    "z64_cd_offset_huge": lambda d: [(z64(d) + 48, struct.pack("<Q", 2 ** 64 - 8))],
    "z64_locator_past_end": lambda d: [(eocd(d) - 12, struct.pack("<Q", 2 ** 62))],
    "cd_signature_broken": lambda d: [(central(d), b"PK\x01\x03")],
    "cd_name_length_huge": lambda d: [(central(d) + 28, struct.pack("<H", 65535))],
    "cd_extra_length_huge": lambda d: [(central(d) + 30, struct.pack("<H", 65535))],
    "cd_method_deflate_stored_data": lambda d: [(central(d) + 10, struct.pack("<H", 8))],
    "cd_method_bzip2": lambda d: [(central(d) + 10, struct.pack("<H", 12))],
    "cd_encrypted": lambda d: [(central(d) + 8, struct.pack("<H", 0x0809))],
    "cd_size_4gib": lambda d: [(central(d) + 20, struct.pack("<II", 0xFFFFFFFE, 0xFFFFFFFE))],
    "cd_sizes_differ": lambda d: [(central(d) + 24, struct.pack("<I", 5))],
    "cd_header_offset_past_cd": lambda d: [(central(d) + 42, struct.pack("<I", 0x7FFFFFFF))],
    "cd_header_offset_misaligned": lambda d: [(central(d) + 42, struct.pack("<I", 3))],
    "local_signature_broken": lambda d: [(0, b"PK\x03\x05")],
    "local_name_length_differs": lambda d: [(26, struct.pack("<H", 3))],
    "local_extra_length_huge": lambda d: [(28, struct.pack("<H", 65535))],
}
for _key, _fn in ZIP_PATCHES.items():
    def _make(fn):
        def apply(tag, root):
            p = optim(tag, 1)
            for off, data in fn(read(p)):
                patch(p, off, data)
        return apply
    case("zip", _key, f"rank 1's optimizer file: {_key}")(_make(_fn))


@case("zip", "zip64_extra_sizes_huge", "a zip64 extra claiming 2^62-byte records")
def _(tag, root):
    p = optim(tag, 1)
    d = bytearray(read(p))
    c = central(d)
    name_len = struct.unpack_from("<H", d, c + 28)[0]
    # Sizes 0xffffffff in the header, then a zip64 extra where the name ends:
    # rebuild the directory entry with one.
    extra = struct.pack("<HHQQ", 1, 16, 2 ** 62, 2 ** 62)
    d[c + 20:c + 28] = struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFFF)
    old_extra = struct.unpack_from("<H", d, c + 30)[0]
    d[c + 30:c + 32] = struct.pack("<H", len(extra))
    start = c + 46 + name_len
    d[start:start + old_extra] = extra
    write(p, bytes(d))


def deflated(names, level=9):
    def fn(records):
        out = []
        for n, b in records:
            out.append((n, b))
        return out
    return fn


def write_deflated_zip(path, top, records, claim=None):
    """A zip like Python's zipfile writes: the given records deflated (method 8)."""
    out, cd = bytearray(), bytearray()
    for name, data, method in records:
        full = f"{top}/{name}".encode()
        if method == 8:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            comp = c.compress(data) + c.flush()
        else:
            comp = data
        size = claim if (claim is not None and name == "data.pkl") else len(data)
        crc = zlib.crc32(data)
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(comp), size, len(full), 0)
        out += full + comp
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, len(comp), size,
                          len(full), 0, 0, 0, 0, 0, off)
        cd += full
    cdo = len(out)
    out += cd
    n = len(records)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(cd), cdo, 0)
    write(path, bytes(out))


@case("zip", "deflated_bomb_1gib", "a 1 MB rank file whose data.pkl inflates to 1 GiB")
def _(tag, root):
    p = optim(tag, 1)
    _, records, top = load(p)
    bomb = b"N" * (1 << 30)  # 1 GiB of NONE opcodes: 1 MB deflated
    write_deflated_zip(p, top, [(n, bomb if n == "data.pkl" else b, 8 if n == "data.pkl" else 0)
                                for n, b in records])


@case("zip", "deflated_bomb_claims_2gib", "a deflated data.pkl claiming 2 GiB")
def _(tag, root):
    p = optim(tag, 1)
    _, records, top = load(p)
    write_deflated_zip(p, top, [(n, b, 8 if n == "data.pkl" else 0) for n, b in records], claim=(2 << 30) - 1)


@case("zip", "deflated_everything", "every record deflated (Python's zipfile)")
def _(tag, root):
    for r in range(2):
        p = optim(tag, r)
        _, records, top = load(p)
        write_deflated_zip(p, top, [(n, b, 8) for n, b in records])


@case("zip", "deflated_pickle_only", "data.pkl deflated, storages stored")
def _(tag, root):
    p = optim(tag, 1)
    _, records, top = load(p)
    write_deflated_zip(p, top, [(n, b, 8 if n == "data.pkl" else 0) for n, b in records])


@case("zip", "deflated_corrupt_stream", "a deflated data.pkl whose stream is garbage")
def _(tag, root):
    p = optim(tag, 1)
    _, records, top = load(p)
    write_deflated_zip(p, top, [(n, b, 8 if n == "data.pkl" else 0) for n, b in records])
    d = bytearray(read(p))
    i = d.index(b"data.pkl") + len("data.pkl")
    for k in range(i + 2, i + 40):
        d[k] ^= 0x5A
    write(p, bytes(d))


RECORDS = {
    "version_999": lambda rs: [(n, b"999\n" if n == "version" else b) for n, b in rs],
    "version_0": lambda rs: [(n, b"0\n" if n == "version" else b) for n, b in rs],
    "version_garbage": lambda rs: [(n, b"\x1b[2Jthree" if n == "version" else b) for n, b in rs],
    "version_huge_number": lambda rs: [(n, b"99999999999999999999999\n" if n == "version" else b) for n, b in rs],
    "version_missing": lambda rs: [(n, b) for n, b in rs if n != "version"],
    "version_big_record": lambda rs: [(n, b"3" + b" " * 100000 if n == "version" else b) for n, b in rs],
    "data_version_999": lambda rs: rs + [(".data/version", b"999\n")],
    "byteorder_big": lambda rs: rs[:1] + [("byteorder", b"big")] + rs[1:],
    "byteorder_garbage": lambda rs: rs[:1] + [("byteorder", b"\x00" * 300)] + rs[1:],
    "no_data_pkl": lambda rs: [(n, b) for n, b in rs if n != "data.pkl"],
    "data_pkl_twice": lambda rs: rs[:1] + rs,
    "duplicate_storage_record": lambda rs: rs + [rs[1]],
    "storage_alignment_huge": lambda rs: rs + [(".format_version", b"1"), (".storage_alignment", b"99999999")],
    "many_records": lambda rs: rs + [(f"junk/{i}", b"") for i in range(20000)],
    "record_name_control": lambda rs: rs + [("\x1b[2J\x00evil", b"x")],
}
for _key, _fn in RECORDS.items():
    case("zip", _key, f"rank 1's model states: {_key}")(
        lambda tag, root, fn=_fn: set_records(model(tag, 1), fn))
    case("zip", _key + "_optim0", f"rank 0's optimizer file: {_key}")(
        lambda tag, root, fn=_fn: set_records(optim(tag, 0), fn))


@case("zip", "record_outside_top_folder", "a record in another top folder")
def _(tag, root):
    p = optim(tag, 1)
    _, records, top = load(p)
    blob = tz.write_zip(records, top)
    blob = blob.replace(f"{top}/version".encode(), f"{top[:-1]}X/version".encode())
    write(p, blob)


@case("zip", "no_top_folder", "records without a top folder")
def _(tag, root):
    p = optim(tag, 1)
    _, records, top = load(p)
    write(p, tz.write_zip(records, "x").replace(b"x/", b"__"))
