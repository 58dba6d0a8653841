"""The torch.save zip container as each torch writes it (caffe2's PyTorchStreamWriter on miniz): `write_zip`.

Container (`--torch`; torch/serialization.py `_save`, caffe2/serialize/inline_container.cc
PyTorchStreamWriter::writeRecord / writeEndOfFile / writeSerializationId / detail::getPadding,
third_party/miniz-2.1.0/miniz.c mz_zip_writer_add_mem_ex_v2, mz_zip_writer_finalize_archive):
  1.6-2.0  data.pkl, data/<key> in string order (`sorted(serialized_storages)`: 0, 1, 10, 2), version.
  2.1-2.6  data.pkl, byteorder ("little", written by `_save` after data.pkl), data/<key> in string order,
           version, .data/serialization_id (PRs #100994, #101964 of May 2023).
  >= 2.7   data.pkl, .format_version ("1"), .storage_alignment ("64", or --alignment: 2.7's
           torch.utils.serialization.config.save.storage_alignment, PR #147788), byteorder, data/<key> in
           numeric = pickling order (PR #143879), version, .data/serialization_id.
  A record: local header (version 0, flags 0x0808 = data descriptor + UTF-8, 0x0800 when empty; method,
  time, date, CRC, sizes 0), `<top>/<record>`, [zip64 extra if size or header offset >= 0xFFFFFFFF:
  uncompressed size, compressed size 0, offset], extra field `FB` + length + that many 'Z' so that the data
  starts at a multiple of the alignment, the data, then for non-empty records a descriptor (CRC, sizes;
  8-byte sizes with zip64). The central directory has no padding field; a zip64 end record and locator
  always precede the end record (MZ_ZIP_FLAG_WRITE_ZIP64). --no-crc: CRC fields 0 (torch >= 2.6
  `set_crc32_options(False)`, PR #137735). <top> is the file name without its last extension, or `archive`
  (--archive-prefix: torch.save into a file object, e.g. DeepSpeed >= 0.17.1's FastCheckpointEngine).
  serialization_id: 20 digits of c10::hash_combine over std::hash<std::string> of the record names written
  so far, in std::unordered_set iteration order, then 20 digits of hash_combine over the CRC fields of the
  data descriptors written (ostream_write_func sniffs writes starting with PK\7\8). Emulated as built
  with libstdc++ (Linux wheels): _Hash_bytes (hash_bytes.cc), _Hashtable insertion and rehash with
  _Prime_rehash_policy (hashtable_policy.h, hashtable_c++0x.cc, hashtable-aux.cc).
"""
import bisect
import struct
import zlib


# ---------------------------------------------------------------- serialization_id (libstdc++ emulation)

M64 = (1 << 64) - 1
MURMUR_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
PRIMES = [  # libstdc++ src/shared/hashtable-aux.cc __prime_list, as far as a checkpoint can need
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109,
    113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409,
    439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613,
    1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953,
    6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183,
    20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557,
    62233, 67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871,
    172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787, 410857,
    444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369, 1056323]
FAST_BKT = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13]


def std_hash(s):
    """std::hash<std::string> of 64-bit libstdc++: _Hash_bytes(data, len, 0xc70f6907)."""
    b = s.encode()
    h = (0xC70F6907 ^ (len(b) * MURMUR_MUL)) & M64
    shift_mix = lambda v: v ^ (v >> 47)  # noqa: E731
    end = len(b) & ~7
    for i in range(0, end, 8):
        h = ((h ^ (shift_mix(int.from_bytes(b[i:i + 8], "little") * MURMUR_MUL & M64) * MURMUR_MUL & M64))
             * MURMUR_MUL) & M64
    if len(b) & 7:
        h = ((h ^ int.from_bytes(b[end:], "little")) * MURMUR_MUL) & M64
    return shift_mix(shift_mix(h) * MURMUR_MUL & M64)


def hash_combine(seed, value):
    """c10::hash_combine."""
    return (seed ^ ((value + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & M64)) & M64


def unordered_set_order(names):
    """Iteration order of a std::unordered_set<std::string> after inserting `names` in order: a singly
    linked list from _M_before_begin (None here), buckets[b] = the node before bucket b's first node
    (_Hashtable::_M_insert_unique_node, _M_insert_bucket_begin, _M_rehash_aux; _Prime_rehash_policy)."""
    nxt, before, code = {None: None}, {}, {}
    n_bkt, next_resize = 1, 0
    for count, name in enumerate(names):
        code[name] = std_hash(name)
        if count + 1 > next_resize:  # _M_need_rehash(n_bkt, count, 1)
            min_bkts = max(count + 1, 0 if next_resize else 11)
            if min_bkts < n_bkt:
                next_resize = n_bkt
            else:
                want = max(min_bkts + 1, n_bkt * 2)  # _M_next_bkt
                n_bkt = FAST_BKT[want] if want < len(FAST_BKT) else PRIMES[bisect.bisect_left(PRIMES, want, 6)]
                next_resize = n_bkt
                p, nxt[None], before, bbegin = nxt[None], None, {}, 0
                while p is not None:
                    q, b = nxt[p], code[p] % n_bkt
                    if b in before:  # after the node before its bucket
                        nxt[p], nxt[before[b]] = nxt[before[b]], p
                    else:  # to the front; the bucket that was first now follows p
                        nxt[p], nxt[None], before[b] = nxt[None], p, None
                        if nxt[p] is not None:
                            before[bbegin] = p
                        bbegin = b
                    p = q
        b = code[name] % n_bkt
        if b in before:
            nxt[name], nxt[before[b]] = nxt[before[b]], name
        else:
            nxt[name], nxt[None], before[b] = nxt[None], name, None
            if nxt[name] is not None:
                before[code[nxt[name]] % n_bkt] = name
    order, p = [], nxt[None]
    while p is not None:
        order.append(p)
        p = nxt[p]
    return order


def serialization_id(names, crc_combined):
    name_hash = 0
    for name in unordered_set_order(names):
        name_hash = hash_combine(name_hash, std_hash(name))
    return f"{name_hash:020d}{crc_combined:020d}"


# ---------------------------------------------------------------- containers

U32 = 0xFFFFFFFF


def zip64_extra(size, comp_size, offset, big_size, big_offset):
    fields = (struct.pack("<QQ", size, comp_size) if big_size else b"") + \
        (struct.pack("<Q", offset) if big_offset else b"")
    return struct.pack("<HH", 1, len(fields)) + fields if big_size or big_offset else b""


def write_zip(records, top, alignment=64, crc=True, with_serialization_id=False):
    """PyTorchStreamWriter + miniz: `records` is [(name, bytes)] in write order."""
    out, central, written, crc_combined = bytearray(), bytearray(), [], 0

    def add(name, data):
        nonlocal crc_combined
        full = f"{top}/{name}".encode()
        offset, size = len(out), len(data)
        big_size, big_offset = size >= U32, offset >= U32
        extra = zip64_extra(size, 0, offset, big_size, big_offset)
        start = offset + 30 + len(full) + len(extra) + 4
        pad = (-start) % alignment
        crc32 = zlib.crc32(data) if crc else 0
        flags = 0x0808 if size else 0x0800
        out.extend(struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0, len(full), len(extra) + 4 + pad))
        out.extend(full + extra + b"FB" + struct.pack("<H", pad) + b"Z" * pad + data)
        if size >= 8 and data[:4] == b"PK\x07\x08":  # ostream_write_func takes it for a descriptor
            crc_combined = hash_combine(crc_combined, struct.unpack_from("<I", data, 4)[0])
        if size:
            sizes = struct.pack("<QQ", size, size) if extra else struct.pack("<II", size, size)
            out.extend(struct.pack("<II", 0x08074B50, crc32) + sizes)
            crc_combined = hash_combine(crc_combined, crc32)
        cextra = zip64_extra(size, size, offset, big_size, big_offset)
        central.extend(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0, 0, flags, 0, 0, 0, crc32, min(size, U32),
                                   min(size, U32), len(full), len(cextra), 0, 0, 0, 0, min(offset, U32)))
        central.extend(full + cextra)
        written.append(name)

    for name, data in records:
        add(name, data)
    if with_serialization_id:
        add(".data/serialization_id", serialization_id(written, crc_combined).encode())
    cd_offset, n = len(out), len(written)
    out += central
    eocd64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, n, n, len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF), min(len(central), U32),
                       min(cd_offset, U32), 0)
    return bytes(out)
