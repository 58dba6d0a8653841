#!/usr/bin/python3
"""Writes a corpus of hostile and broken DeepSpeed checkpoints.

Usage: make_hostile_corpus.py FIXTURES_DIR OUT_DIR

Each case is OUT_DIR/<category>/<name>/: a checkpoint root (`latest` and a
tag directory) made from a copy of a fixture with one thing broken: parameter
names, shapes, tensor storages and offsets, zip records, pickles, `latest`,
special files (FIFOs, devices, sockets, dangling, looping and escaping
symlinks), rank sets (stray, missing, swapped ranks, mixed world sizes and
dtypes) and the structure of the pickles. OUT_DIR/cases.json lists them
(category, name, what is broken). run_hostile.py runs every command and view
on each; ucfs must answer each with its output or a clear error, never hang,
crash or run out of memory.

Python 3 standard library only (tests/tools/torch_variants.py writes the
pickles and zips as torch does). The output is rebuilt from scratch.
"""

import json
import math
import os
import shutil
import socket
import stat
import struct
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import torch_variants as tv  # noqa: E402

TAG = "global_step4"
OPTIM = "zero_pp_rank_{}_mp_rank_00_optim_states.pt"
MODEL = "zero_pp_rank_{}_mp_rank_00_model_states.pt"
BASE = "z3_fp32_ws2"  # the smallest fixture: 2 ranks, 4 params
TRICKY = "z3_tricky_fp32_ws4"  # sub-groups, param groups, frozen, tied, buffers

CASES = []  # (category, name, description, fixture, function(tag_dir, root))


def case(category, name, description, fixture=BASE):
    def register(fn):
        CASES.append((category, name, description, fixture, fn))
        return fn
    return register


# ------------------------------------------------------------------ helpers

def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    if os.path.lexists(path):
        os.remove(path)
    with open(path, "wb") as f:
        f.write(data)


def top_of(path):
    stem = os.path.basename(path)
    return stem[:stem.rindex(".")]


def load(path):
    """(tree, [(relative name, bytes)] in archive order, top folder)."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        top = names[0].split("/", 1)[0]
        records = [(n[len(top) + 1:], z.read(n)) for n in names]
    return tv.parse(dict(records)["data.pkl"]), records, top


def save(path, tree, records, top):
    pkl = tv.Pickler().dumps(tree)
    records = [(n, pkl if n == "data.pkl" else b) for n, b in records]
    write(path, tv.write_zip(records, top))


def edit(path, fn):
    """Applies fn(tree, records dict) to the file's pickle and records."""
    tree, records, top = load(path)
    recs = dict(records)
    fn(tree, recs)
    order = [n for n, _ in records if n in recs] + [n for n in recs if n not in dict(records)]
    save(path, tree, [(n, recs[n]) for n in order], top)


def set_records(path, fn):
    """fn(list of (name, bytes)) -> new list; written with the same top folder."""
    _, records, top = load(path)
    write(path, tv.write_zip(fn(records), top))


def osd(tree):
    return tree.get("optimizer_state_dict")


def flat(tree, k=0):
    return osd(tree).get("fp32_flat_groups").items[k]


def pid_items(tensor):
    return tensor.args.items[0].tup.items


def shapes(tree, group=0):
    """The param_shapes OrderedDict (an Obj with dictitems) of sub-group `group`."""
    return tree.get("param_shapes").items[group]


def set_first_shape(tree, dims):
    size = shapes(tree).dictitems[0][1]
    size.args.items[0] = tv.Tup(dims)


def rename_first_param(tag, name):
    """Renames the first param everywhere rank 0's model states name it."""
    def fn(tree, _):
        old = shapes(tree).dictitems[0][0].v
        shapes(tree).dictitems[0][0] = tv.Str(name)
        module = tree.get("module")
        for kv in module.dictitems:
            if isinstance(kv[0], tv.Str) and kv[0].v == old:
                kv[0] = tv.Str(name)
    for r in range(2):
        edit(os.path.join(tag, MODEL.format(r)), fn)


def dict_set(d, key, value):
    items = d.items if isinstance(d, tv.Dct) else d.dictitems
    for kv in items:
        if isinstance(kv[0], tv.Str) and kv[0].v == key:
            kv[1] = value
            return
    items.append([tv.Str(key), value])


def dict_del(d, key):
    items = d.items if isinstance(d, tv.Dct) else d.dictitems
    items[:] = [kv for kv in items if not (isinstance(kv[0], tv.Str) and kv[0].v == key)]


def raw_pickle(path, pkl):
    """Replaces data.pkl with raw bytes."""
    set_records(path, lambda rs: [(n, pkl if n == "data.pkl" else b) for n, b in rs])


def optim(tag, r=0):
    return os.path.join(tag, OPTIM.format(r))


def model(tag, r=0):
    return os.path.join(tag, MODEL.format(r))


# ------------------------------------------------------------------ names

NAMES = {
    "nul": "emb\x00ed.weight",
    "escape_clear_screen": "\x1b[2J\x1b[H\x1b]0;pwned\x07embed.weight",
    "newline": "embed.weight\nOK: fake line",
    "carriage_return": "embed.weight\rOVERWRITTEN",
    "c1_csi": "embed\u009b31m.weight",
    "del": "embed\x7f.weight",
    "slash": "embed/../../weight",
    "dotdot": "..",
    "dot": ".",
    "empty": "",
    "long_70000": "w" * 70000,
    "long_256": "w" * 256,
    "long_255": "w" * 255,
    "invalid_utf8": "embed\ud800.weight",
    "backslash": "embed\\x00.weight",
    "tab": "embed\t.weight",
}
for _key, _name in NAMES.items():
    case("names", _key, f"first param named {_name[:40]!r}")(
        lambda tag, root, n=_name: rename_first_param(tag, n))


@case("names", "duplicate_in_param_shapes", "param_shapes lists a name twice")
def _(tag, root):
    def fn(tree, _):
        s = shapes(tree)
        s.dictitems[1][0] = tv.Str(s.dictitems[0][0].v)
    edit(model(tag), fn)


@case("names", "non_string_key", "a param_shapes key that is an int")
def _(tag, root):
    edit(model(tag), lambda tree, _: shapes(tree).dictitems[0].__setitem__(0, 7))


@case("names", "tied_alias_control_chars", "shared_params alias with escapes", TRICKY)
def _(tag, root):
    def fn(tree, _):
        sp = tree.get("shared_params")
        sp.items[0][0] = tv.Str("head\x1b[31m\x00.weight")
    edit(model(tag), fn)


@case("names", "buffer_name_long", "a buffer name of 70000 bytes", TRICKY)
def _(tag, root):
    def fn(tree, _):
        bn = tree.get("buffer_names")
        old = bn.items[0].v
        bn.items[0] = tv.Str("b" * 70000)
        for kv in tree.get("module").dictitems:
            if isinstance(kv[0], tv.Str) and kv[0].v == old:
                kv[0] = tv.Str("b" * 70000)
    edit(model(tag), fn)


# ------------------------------------------------------------------ shapes

SHAPES = {
    "wraps_to_5": [3, 6148914691236517207],
    "two_pow_62": [2 ** 31, 2 ** 31],
    "two_pow_63": [2 ** 32, 2 ** 31],
    "int64_max": [2 ** 63 - 1],
    "negative": [-11, -7],
    "minus_one": [11, -1],
    "zero_dim": [0, 7],
    "scalar": [],
    "bigger_than_flat": [12, 7],
    "smaller_than_flat": [10, 7],
    "sixty_five_dims": [1] * 65,
    "huge_then_zero": [2 ** 62, 0],
    "long_int": [2 ** 80, 1],
}
for _key, _dims in SHAPES.items():
    case("shapes", _key, f"first param of shape {_dims[:4]}")(
        lambda tag, root, d=_dims: edit(model(tag), lambda t, _: set_first_shape(t, d)))


@case("shapes", "not_ints", "a shape of strings and floats")
def _(tag, root):
    edit(model(tag), lambda t, _: set_first_shape(t, [tv.Str("11"), 7.0]))


@case("shapes", "not_a_size", "param_shapes value that is a dict")
def _(tag, root):
    edit(model(tag), lambda t, _: shapes(t).dictitems[0].__setitem__(1, tv.Dct([])))


@case("shapes", "frozen_wraps", "a frozen param whose shape product wraps", TRICKY)
def _(tag, root):
    def fn(tree, _):
        f = tree.get("frozen_param_shapes")
        items = f.items if isinstance(f, tv.Dct) else f.dictitems
        items[0][1].args.items[0] = tv.Tup([3, 6148914691236517207])
    edit(model(tag), fn)


@case("shapes", "every_param_2_pow_58", "params of 2^58 elements each: the model wraps 2^64 bytes")
def _(tag, root):
    def fn(tree, _):
        for kv in shapes(tree).dictitems:
            kv[1].args.items[0] = tv.Tup([2 ** 29, 2 ** 29])
    edit(model(tag), fn)


@case("shapes", "flat_shape_2d", "fp32 flat buffer with a 2-d shape")
def _(tag, root):
    edit(optim(tag), lambda t, _: flat(t).args.items.__setitem__(2, tv.Tup([1, 68])))


# ------------------------------------------------------------------ tensors: storages, offsets, strides

def tensor_edit(fn, rank=0):
    return lambda tag, root: edit(optim(tag, rank), lambda t, recs: fn(flat(t), recs))


TENSORS = {
    "storage_numel_2_pow_62": lambda f, r: pid_items(f).__setitem__(4, 2 ** 62),
    "storage_numel_2_pow_63_minus_1": lambda f, r: pid_items(f).__setitem__(4, 2 ** 63 - 1),
    "storage_numel_2_pow_64": lambda f, r: pid_items(f).__setitem__(4, 2 ** 64),
    "storage_numel_negative": lambda f, r: pid_items(f).__setitem__(4, -1),
    "storage_numel_short": lambda f, r: pid_items(f).__setitem__(4, 10),
    "storage_numel_float": lambda f, r: pid_items(f).__setitem__(4, 68.0),
    "offset_huge": lambda f, r: f.args.items.__setitem__(1, 2 ** 62),
    "offset_past_storage": lambda f, r: f.args.items.__setitem__(1, 69),
    "offset_negative": lambda f, r: f.args.items.__setitem__(1, -4),
    "offset_overflows_bytes": lambda f, r: f.args.items.__setitem__(1, 2 ** 62 - 1),
    "stride_huge": lambda f, r: f.args.items.__setitem__(3, tv.Tup([2 ** 62])),
    "stride_negative": lambda f, r: f.args.items.__setitem__(3, tv.Tup([-1])),
    "stride_zero": lambda f, r: f.args.items.__setitem__(3, tv.Tup([0])),
    "stride_wraps": lambda f, r: f.args.items.__setitem__(3, tv.Tup([2 ** 63 // 67 + 1])),
    "storage_key_missing_record": lambda f, r: pid_items(f).__setitem__(2, tv.Str("99")),
    "storage_key_path_traversal": lambda f, r: pid_items(f).__setitem__(2, tv.Str("../../version")),
    "storage_key_nul": lambda f, r: pid_items(f).__setitem__(2, tv.Str("0\x00")),
    "storage_class_unknown": lambda f, r: pid_items(f).__setitem__(1, tv.Glb("torch", "EvilStorage")),
    "storage_class_os_system": lambda f, r: pid_items(f).__setitem__(1, tv.Glb("os", "system")),
    "storage_class_half": lambda f, r: pid_items(f).__setitem__(1, tv.Glb("torch", "HalfStorage")),
    "storage_class_complex128": lambda f, r: pid_items(f).__setitem__(1, tv.Glb("torch", "ComplexDoubleStorage")),
    "location_garbage": lambda f, r: pid_items(f).__setitem__(3, tv.Str("\x1b[2Jcuda:99")),
    "pid_not_tuple": lambda f, r: f.args.items.__setitem__(0, tv.Pid(tv.Str("storage"))),
    "pid_short": lambda f, r: f.args.items.__setitem__(0, tv.Pid(tv.Tup(pid_items(f)[:3]))),
    "rebuild_args_short": lambda f, r: setattr(f, "args", tv.Tup(f.args.items[:3])),
    "size_not_tuple": lambda f, r: f.args.items.__setitem__(2, 68),
    "record_truncated": lambda f, r: r.__setitem__("data/" + pid_items(f)[2].v, r["data/" + pid_items(f)[2].v][:100]),
    "record_empty": lambda f, r: r.__setitem__("data/" + pid_items(f)[2].v, b""),
}
for _key, _fn in TENSORS.items():
    case("tensors", _key, f"rank 0's fp32 flat buffer: {_key}")(tensor_edit(_fn))
    case("tensors", _key + "_rank1", f"rank 1's fp32 flat buffer: {_key}")(tensor_edit(_fn, 1))


@case("tensors", "buffer_storage_2_pow_62", "a buffer whose storage numel is 2^62", TRICKY)
def _(tag, root):
    def fn(tree, _):
        bn = tree.get("buffer_names").items[0].v
        for kv in tree.get("module").dictitems:
            if isinstance(kv[0], tv.Str) and kv[0].v == bn:
                pid_items(kv[1])[4] = 2 ** 62
    edit(model(tag), fn)


@case("tensors", "frozen_fragment_offset_huge", "a frozen fragment at offset 2^62", TRICKY)
def _(tag, root):
    def fn(tree, _):
        frag = tree.get("frozen_param_fragments")
        items = frag.items if isinstance(frag, tv.Dct) else frag.dictitems
        items[0][1].args.items[1] = 2 ** 62
    edit(model(tag, 1), fn)


@case("tensors", "exp_avg_numel_2_pow_62", "exp_avg storage numel 2^62")
def _(tag, root):
    def fn(tree, _):
        st = osd(tree).get("optimizer_state_dict").get("state")
        pid_items(st.items[0][1].get("exp_avg"))[4] = 2 ** 62
    edit(optim(tag), fn)


@case("tensors", "step_tensor_offset_huge", "the 0-dim step tensor at offset 2^62", TRICKY)
def _(tag, root):
    def fn(tree, _):
        st = osd(tree).get("optimizer_state_dict").get("state")
        step = st.items[0][1].get("step")
        if isinstance(step, tv.Obj):
            step.args.items[1] = 2 ** 62
        else:
            dict_set(st.items[0][1], "step", flat(tree))
    edit(optim(tag), fn)


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
    blob = tv.write_zip(records, top)
    blob = blob.replace(f"{top}/version".encode(), f"{top[:-1]}X/version".encode())
    write(p, blob)


@case("zip", "no_top_folder", "records without a top folder")
def _(tag, root):
    p = optim(tag, 1)
    _, records, top = load(p)
    write(p, tv.write_zip(records, "x").replace(b"x/", b"__"))


# ------------------------------------------------------------------ pickles

def billion_laughs(levels=9, fanout=10):
    p = b"\x80\x02X\x03\x00\x00\x00lolq\x00"
    for level in range(1, levels + 1):
        p += b"0(" + (b"h" + bytes([level - 1])) * fanout + b"lq" + bytes([level])
    return p + b"."


def nested(depth, open_op=b"]", close=b"a"):
    """A list nested `depth` deep: ] ] ] ... N a a a."""
    p = b"\x80\x02" + open_op * depth + b"N" + close * depth + b"."
    return p


PICKLES = {
    "billion_laughs_3_9kb": billion_laughs(9, 10),
    "billion_laughs_wide": billion_laughs(5, 200),
    "nested_999": nested(999),
    "nested_1001": nested(1001),
    "nested_100000": nested(100000),
    "nested_dicts": b"\x80\x02" + b"}X\x01\x00\x00\x00k" * 5000 + b"N" + b"s" * 5000 + b".",
    "nested_tuples_marks": b"\x80\x02" + b"(" * 100000 + b"N" + b"t" * 100000 + b".",
    "truncated": b"\x80\x02}q\x00(X\x03\x00\x00\x00abc",
    "empty": b"",
    "no_stop": b"\x80\x02N",
    "stack_underflow": b"\x80\x02a.",
    "unknown_opcode": b"\x80\x02\xff.",
    "protocol_99": b"\x80\x63N.",
    "memo_get_missing": b"\x80\x02j\xff\xff\xff\x7f.",
    "memo_put_huge_index": b"\x80\x02Nr\xff\xff\xff\xff.",
    "binunicode_4gib": b"\x80\x02X\xff\xff\xff\xff" + b"a" * 100 + b".",
    "binbytes8_huge": b"\x80\x02\x8e" + struct.pack("<Q", 2 ** 63) + b".",
    "long4_huge": b"\x80\x02\x8b" + struct.pack("<I", 0x7FFFFFFF) + b"\x01" * 100 + b".",
    "long_1000_bytes": b"\x80\x02\x8b" + struct.pack("<I", 1000) + b"\x01" * 1000 + b".",
    "os_system_reduce": b"\x80\x02cos\nsystem\nX\x0c\x00\x00\x00touch /tmp/x\x85R.",
    "builtins_eval": b"\x80\x02cbuiltins\neval\nX\x08\x00\x00\x00__file__\x85R.",
    "cycle_via_memo": b"\x80\x02]q\x00h\x00a.",
    "dict_cycle": b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s.",
    "many_nones_4m": b"\x80\x02(" + b"N" * (4 << 20) + b"l.",
    "many_empty_dicts_1m": b"\x80\x02(" + b"}" * (1 << 20) + b"l.",
    "odd_setitems": b"\x80\x02}(NNNu.",
    "build_on_list": b"\x80\x02]Nb.",
    "global_newline_name": b"\x80\x02X\x03\x00\x00\x00a\nbX\x01\x00\x00\x00c\x93.",
    "global_control_chars": b"\x80\x02c\x1b[2J\nevil\x00\n)R.",
    "frame_huge": b"\x80\x04\x95" + struct.pack("<Q", 2 ** 63) + b"N.",
    "root_is_int": b"\x80\x02K\x05.",
    "root_is_list": b"\x80\x02].",
    "pickle_then_trailing": b"\x80\x02}.garbage after stop",
}
for _key, _pkl in PICKLES.items():
    case("pickles", _key, f"rank 0's model states data.pkl: {_key}")(
        lambda tag, root, p=_pkl: raw_pickle(model(tag), p))
for _key in ("billion_laughs_3_9kb", "nested_1001", "nested_999", "many_nones_4m", "truncated", "cycle_via_memo"):
    case("pickles", _key + "_optim1", f"rank 1's optimizer data.pkl: {_key}")(
        lambda tag, root, p=PICKLES[_key]: raw_pickle(optim(tag, 1), p))


@case("pickles", "laughs_inside_checkpoint", "a valid checkpoint with a billion-laughs value in ds_config")
def _(tag, root):
    def fn(tree, _):
        leaf = tv.Str("lol")
        x = leaf
        for _ in range(9):
            x = tv.Lst([x] * 10)
        dict_set(tree, "ds_config", tv.Dct([[tv.Str("zero_optimization"), tv.Dct([])], [tv.Str("laughs"), x]]))
    edit(model(tag), fn)


@case("pickles", "deep_inside_checkpoint", "a valid checkpoint with a 990-deep value in ds_config")
def _(tag, root):
    def fn(tree, _):
        x = tv.Lst([])
        for i in range(990):
            x = tv.Lst([x, i])
        dict_set(tree, "deep", x)
    edit(model(tag), fn)
    edit(optim(tag, 1), fn)


@case("pickles", "deep_and_wide_keys", "990 nested dicts with 200-byte keys and 300 entries each")
def _(tag, root):
    # Before verify kept paths as parent links, this cost 60 s and 22 GB.
    def fn(tree, _):
        x = tv.Lst([])
        for i in range(990):
            x = tv.Dct([[tv.Str("k" * 200 + str(i)), x]] + [[tv.Str(f"t{j}"), tv.Tup([])] for j in range(300)])
        dict_set(tree, "deep", x)
    edit(optim(tag, 1), fn)


@case("pickles", "wide_inside_checkpoint", "200000 tensors-looking values in rank 1's optimizer file")
def _(tag, root):
    def fn(tree, _):
        f = flat(tree)
        bad = tv.Obj("REDUCE", f.func, tv.Tup([f.args.items[0], 2 ** 62] + f.args.items[2:]))
        dict_set(tree, "junk", tv.Lst([bad] * 200000))
    edit(optim(tag, 1), fn)


# ------------------------------------------------------------------ latest

LATEST = {
    "empty": b"",
    "whitespace": b" \n\t\n",
    "dotdot": b"..",
    "dot": b".",
    "absolute": b"/etc",
    "traversal": b"../../../../etc",
    "nonexistent_tag": b"global_step999",
    "nul": b"global_step4\x00evil",
    "control_chars": b"\x1b[2J\x1b]0;owned\x07global_step4",
    "very_long": b"g" * 5000,
    "binary": bytes(range(256)),
    "newline_in_middle": b"global\nstep4",
    "utf8_invalid": b"global_step4\xff\xfe",
    "tag_is_file": b"zero_to_fp32.py",
}
for _key, _content in LATEST.items():
    def _make(content):
        def fn(tag, root):
            write(os.path.join(root, "latest"), content)
            if content == b"zero_to_fp32.py":
                write(os.path.join(root, "zero_to_fp32.py"), b"#")
        return fn
    case("latest", _key, f"latest holds {_content[:30]!r}")(_make(_content))


@case("latest", "is_directory", "latest is a directory")
def _(tag, root):
    os.remove(os.path.join(root, "latest"))
    os.mkdir(os.path.join(root, "latest"))


@case("latest", "huge", "latest is 100 MB")
def _(tag, root):
    with open(os.path.join(root, "latest"), "wb") as f:
        f.truncate(100 << 20)


# ------------------------------------------------------------------ special files (FIFOs, devices, symlinks)

def replace_with(path, kind, target=None):
    os.remove(path) if os.path.lexists(path) and not os.path.isdir(path) else None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    elif kind == "blockdev":
        os.mknod(path, 0o600 | stat.S_IFBLK, os.makedev(7, 200))  # a loop device that does not exist
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
    elif kind == "symlink":
        os.symlink(target, path)
    elif kind == "dir":
        os.mkdir(path)


SPECIAL = {
    "optim1_fifo": (lambda t, r: optim(t, 1), "fifo", None),
    "model0_fifo": (lambda t, r: model(t), "fifo", None),
    "latest_fifo": (lambda t, r: os.path.join(r, "latest"), "fifo", None),
    "optim1_chardev_zero": (lambda t, r: optim(t, 1), "chardev", None),
    "optim1_blockdev": (lambda t, r: optim(t, 1), "blockdev", None),
    "optim1_socket": (lambda t, r: optim(t, 1), "socket", None),
    "optim1_directory": (lambda t, r: optim(t, 1), "dir", None),
    "optim1_dangling_symlink": (lambda t, r: optim(t, 1), "symlink", "nowhere.pt"),
    "optim1_self_loop": (lambda t, r: optim(t, 1), "symlink", OPTIM.format(1)),
    "optim1_two_loop": (lambda t, r: optim(t, 1), "symlink", "loop_b"),
    "optim1_to_dev_zero": (lambda t, r: optim(t, 1), "symlink", "/dev/zero"),
    "optim1_to_outside": (lambda t, r: optim(t, 1), "symlink", "/etc/passwd"),
    "optim1_to_proc": (lambda t, r: optim(t, 1), "symlink", "/proc/self/mem"),
    "latest_dangling": (lambda t, r: os.path.join(r, "latest"), "symlink", "nowhere"),
    "latest_loop": (lambda t, r: os.path.join(r, "latest"), "symlink", "latest"),
    "latest_to_dev_zero": (lambda t, r: os.path.join(r, "latest"), "symlink", "/dev/zero"),
    "latest_to_outside": (lambda t, r: os.path.join(r, "latest"), "symlink", "/etc/hostname"),
    "model0_to_dev_urandom": (lambda t, r: model(t), "symlink", "/dev/urandom"),
}
for _key, (_where, _kind, _target) in SPECIAL.items():
    def _make(where, kind, target):
        def fn(tag, root):
            path = where(tag, root)
            replace_with(path, kind, target)
            if target == "loop_b":
                os.symlink(OPTIM.format(1), os.path.join(tag, "loop_b"))
        return fn
    case("special", _key, f"{_key}: a {_kind}" + (f" -> {_target}" if _target else ""))(_make(_where, _kind, _target))


@case("special", "tag_dir_symlink_loop", "the tag directory is a symlink to itself")
def _(tag, root):
    shutil.rmtree(tag)
    os.symlink(TAG, tag)


@case("special", "tag_dir_symlink_outside", "the tag directory is a symlink to /etc")
def _(tag, root):
    shutil.rmtree(tag)
    os.symlink("/etc", tag)


# ------------------------------------------------------------------ rank sets

@case("ranks", "rank_999999999_empty", "one empty file named zero_pp_rank_999999999_..._optim_states.pt")
def _(tag, root):
    write(optim(tag, 999999999), b"")


@case("ranks", "rank_999999999_model", "one empty model file of rank 999999999")
def _(tag, root):
    write(model(tag, 999999999), b"")


@case("ranks", "rank_1000_copy", "rank 1's file copied as rank 1000")
def _(tag, root):
    shutil.copy(optim(tag, 1), optim(tag, 1000))


@case("ranks", "rank_10_copy", "rank 1's file copied as rank 10")
def _(tag, root):
    shutil.copy(optim(tag, 1), optim(tag, 10))


@case("ranks", "missing_rank_0", "rank 0's optimizer file missing")
def _(tag, root):
    os.remove(optim(tag, 0))


@case("ranks", "missing_model_0", "rank 0's model states missing")
def _(tag, root):
    os.remove(model(tag, 0))


@case("ranks", "missing_middle", "rank 1 of 4 missing", "z3_fp32_ws4")
def _(tag, root):
    os.remove(optim(tag, 1))


@case("ranks", "swapped_optim", "rank 0 and 1 optimizer files swapped")
def _(tag, root):
    a, b = read(optim(tag, 0)), read(optim(tag, 1))
    write(optim(tag, 0), b)
    write(optim(tag, 1), a)


@case("ranks", "swapped_model", "rank 0 and 1 model files swapped")
def _(tag, root):
    a, b = read(model(tag, 0)), read(model(tag, 1))
    write(model(tag, 0), b)
    write(model(tag, 1), a)


@case("ranks", "model_as_optim", "rank 1's model states named as its optimizer file")
def _(tag, root):
    shutil.copy(model(tag, 1), optim(tag, 1))


@case("ranks", "renamed_rank_3_of_4", "ranks 2 and 3 of 4 rotated", "z3_fp32_ws4")
def _(tag, root):
    a, b, c = read(optim(tag, 1)), read(optim(tag, 2)), read(optim(tag, 3))
    write(optim(tag, 1), b)
    write(optim(tag, 2), c)
    write(optim(tag, 3), a)


@case("ranks", "mixed_bf16_plain", "bf16_ and plain optimizer files together")
def _(tag, root):
    shutil.copy(optim(tag, 1), os.path.join(tag, "bf16_" + OPTIM.format(1)))


@case("ranks", "mp_rank_01", "a model-parallel rank 1 file")
def _(tag, root):
    shutil.copy(optim(tag, 1), os.path.join(tag, "zero_pp_rank_1_mp_rank_01_optim_states.pt"))


@case("ranks", "leading_zero_duplicate", "zero_pp_rank_01 beside zero_pp_rank_1")
def _(tag, root):
    shutil.copy(optim(tag, 1), os.path.join(tag, "zero_pp_rank_01_mp_rank_00_optim_states.pt"))


def foreign(fixture, rank, kind="optim"):
    def fn(tag, root, fixtures):
        name = (OPTIM if kind == "optim" else MODEL).format(rank)
        bf16 = "bf16_" if "bf16" in fixture and kind == "optim" else ""
        src = os.path.join(fixtures, fixture, "checkpoint", TAG, bf16 + name)
        shutil.copy(src, os.path.join(tag, name))
    fn.needs_fixtures = True
    return fn


case("ranks", "mixed_world_ws3_rank1", "rank 1's optimizer file from the world-size-3 run")(foreign("z3_fp32_ws3", 1))
case("ranks", "mixed_world_ws4_model1", "rank 1's model file from the world-size-4 run")(foreign("z3_fp32_ws4", 1, "model"))
case("ranks", "mixed_world_ws3_rank2", "rank 2's file of the world-size-3 run added")(foreign("z3_fp32_ws3", 2))
case("ranks", "mixed_dtype_bf16_rank1", "rank 1's optimizer file from the bf16 run (plain name)")(foreign("z3_bf16_ws2", 1))
case("ranks", "mixed_tricky_rank1", "rank 1's optimizer file from the tricky run")(foreign(TRICKY, 1))
case("ranks", "mixed_tricky_model0", "rank 0's model states from the tricky run")(foreign(TRICKY, 0, "model"))


def pickle_int(fn_path, key, value, where="osd"):
    def fn(tag, root):
        def e(tree, _):
            d = osd(tree) if where == "osd" else tree
            dict_set(d, key, value)
        edit(fn_path(tag), e)
    return fn


for _v in (2 ** 31, 2 ** 63 - 1, -1, 0, 3, 1000000):
    case("ranks", f"partition_count_{_v}", f"rank 1's partition_count {_v}")(
        pickle_int(lambda t: optim(t, 1), "partition_count", _v))
    case("ranks", f"dp_world_size_{_v}", f"rank 0's dp_world_size {_v}")(
        pickle_int(lambda t: model(t), "dp_world_size", _v, "root"))


@case("ranks", "all_partition_count_2_pow_31", "every file claims a world of 2^31")
def _(tag, root):
    for r in range(2):
        edit(optim(tag, r), lambda t, _: dict_set(osd(t), "partition_count", 2 ** 31))
        edit(model(tag, r), lambda t, _: dict_set(t, "dp_world_size", 2 ** 31))


# ------------------------------------------------------------------ structure

STRUCT = {
    "no_optimizer_state_dict": (optim, lambda t: dict_del(t, "optimizer_state_dict")),
    "zero_stage_2": (optim, lambda t: dict_set(osd(t), "zero_stage", 2)),
    "zero_stage_huge": (optim, lambda t: dict_set(osd(t), "zero_stage", 2 ** 63 - 1)),
    "zero_stage_string": (optim, lambda t: dict_set(osd(t), "zero_stage", tv.Str("3"))),
    "flat_groups_empty": (optim, lambda t: dict_set(osd(t), "fp32_flat_groups", tv.Lst([]))),
    "flat_groups_not_list": (optim, lambda t: dict_set(osd(t), "fp32_flat_groups", 5)),
    "flat_groups_none_item": (optim, lambda t: osd(t).get("fp32_flat_groups").items.__setitem__(0, None)),
    "flat_groups_1000": (optim, lambda t: dict_set(osd(t), "fp32_flat_groups", tv.Lst([flat(t)] * 1000))),
    "state_missing": (optim, lambda t: dict_del(osd(t).get("optimizer_state_dict"), "state")),
    "exp_avg_missing": (optim, lambda t: dict_del(osd(t).get("optimizer_state_dict").get("state").items[0][1], "exp_avg")),
    "exp_avg_is_flat_of_rank": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "exp_avg_sq", flat(t))),
    "step_nan": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", float("nan"))),
    "step_huge": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", 2 ** 63 - 1)),
    "step_long": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", 2 ** 70)),
    "step_string": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", tv.Str("4"))),
    "state_key_huge": (optim, lambda t: osd(t).get("optimizer_state_dict").get("state").items[0].__setitem__(0, 2 ** 62)),
    "state_10000_entries": (optim, lambda t: osd(t).get("optimizer_state_dict").get("state").items[0][1].items.extend(
        [[tv.Str(f"s{i}"), flat(t)] for i in range(10000)])),
    "param_groups_out_of_range": (optim, lambda t: osd(t).get("optimizer_state_dict").get("param_groups").items[0].get("params").items.__setitem__(0, 2 ** 40)),
    "param_groups_negative": (optim, lambda t: osd(t).get("optimizer_state_dict").get("param_groups").items[0].get("params").items.__setitem__(0, -1)),
    "param_groups_twice": (optim, lambda t: osd(t).get("optimizer_state_dict").get("param_groups").items.append(
        osd(t).get("optimizer_state_dict").get("param_groups").items[0])),
    "param_groups_not_list": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict"), "param_groups", 7)),
    "param_shapes_missing": (model, lambda t: dict_del(t, "param_shapes")),
    "param_shapes_empty": (model, lambda t: dict_set(t, "param_shapes", tv.Lst([]))),
    "param_shapes_1000_groups": (model, lambda t: dict_set(t, "param_shapes", tv.Lst([shapes(t)] * 1000))),
    "module_missing": (model, lambda t: dict_del(t, "module")),
    "module_not_dict": (model, lambda t: dict_set(t, "module", tv.Lst([]))),
    "buffer_names_missing_buffer": (model, lambda t: dict_set(t, "buffer_names", tv.Lst([tv.Str("no.such.buffer")]))),
    "buffer_names_not_strings": (model, lambda t: dict_set(t, "buffer_names", tv.Lst([5, None]))),
    "shared_params_to_missing": (model, lambda t: dict_set(t, "shared_params", tv.Dct([[tv.Str("alias"), tv.Str("no.such")]]))),
    "shared_params_self": (model, lambda t: dict_set(t, "shared_params", tv.Dct([[tv.Str(shapes(t).dictitems[0][0].v), tv.Str(shapes(t).dictitems[0][0].v)]]))),
    "frozen_shapes_without_fragments": (model, lambda t: dict_set(t, "frozen_param_shapes", tv.Dct([[tv.Str("frozen.w"), shapes(t).dictitems[0][1]]]))),
    "sub_group_size_negative": (model, lambda t: dict_set(t, "ds_config", tv.Dct([[tv.Str("zero_optimization"), tv.Dct([[tv.Str("sub_group_size"), -5]])]]))),
    "sub_group_size_inf": (model, lambda t: dict_set(t, "ds_config", tv.Dct([[tv.Str("zero_optimization"), tv.Dct([[tv.Str("sub_group_size"), math.inf]])]]))),
    "sub_group_size_nan": (model, lambda t: dict_set(t, "ds_config", tv.Dct([[tv.Str("zero_optimization"), tv.Dct([[tv.Str("sub_group_size"), math.nan]])]]))),
    "sub_group_size_zero": (model, lambda t: dict_set(t, "ds_config", tv.Dct([[tv.Str("zero_optimization"), tv.Dct([[tv.Str("sub_group_size"), 0]])]]))),
    "ds_config_not_dict": (model, lambda t: dict_set(t, "ds_config", tv.Str("{}"))),
    "ds_version_control": (model, lambda t: dict_set(t, "ds_version", tv.Str("0.14.5\x1b[2J\x00"))),
    "ds_version_huge": (model, lambda t: dict_set(t, "ds_version", tv.Str("9" * 100000))),
    "global_steps_negative": (model, lambda t: dict_set(t, "global_steps", -(2 ** 63))),
    "top_level_list": (model, None),
}
for _key, (_which, _fn) in STRUCT.items():
    def _make(which, fn):
        def apply(tag, root):
            if fn is None:
                edit(which(tag), lambda t, r: None)
                p = which(tag)
                _, records, top = load(p)
                raw_pickle(p, tv.Pickler().dumps(tv.Lst([1, 2])))
                return
            edit(which(tag), lambda t, _: fn(t))
        return apply
    case("structure", _key, f"{_which.__name__} file: {_key}")(_make(_which, _fn))


# ------------------------------------------------------------------ ZeRO-1/2

STAGE12 = "z2_tricky_fp32_ws2"  # two param groups split across 2 ranks, mp_rank_00_model_states.pt
SHARED_MODEL = "mp_rank_00_model_states.pt"


def partition(tree, k=0):
    return osd(tree).get("single_partition_of_fp32_groups").items[k]


def base_state(tree):
    return osd(tree).get("base_optimizer_state").get("state")


for _key, _fn in TENSORS.items():
    case("zero12_tensors", _key, f"rank 1's fp32 partition of group 0: {_key}", STAGE12)(
        lambda tag, root, fn=_fn: edit(optim(tag, 1), lambda t, recs: fn(partition(t), recs)))


@case("zero12", "partition_count_not_ints", "partition_count ['2', '2']", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: dict_set(osd(t), "partition_count", tv.Lst([tv.Str("2"), tv.Str("2")])))


@case("zero12", "partition_count_of_experts", "partition_count [2, 1]: a group over fewer ranks (MoE)", STAGE12)
def _(tag, root):
    for r in range(2):
        edit(optim(tag, r), lambda t, _: dict_set(osd(t), "partition_count", tv.Lst([2, 1])))


@case("zero12", "no_base_optimizer_state", "base_optimizer_state removed", STAGE12)
def _(tag, root):
    edit(optim(tag, 1), lambda t, _: dict_del(osd(t), "base_optimizer_state"))


@case("zero12", "state_of_one_group_missing", "base_optimizer_state['state'] lacks group 1", STAGE12)
def _(tag, root):
    edit(optim(tag, 1), lambda t, _: base_state(t).items.__delitem__(slice(1, 2)))


@case("zero12", "partition_list_longer", "single_partition_of_fp32_groups has a third group", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: osd(t).get("single_partition_of_fp32_groups").items.append(partition(t)))


@case("zero12", "partition_2d", "rank 0's fp32 partition shaped 2-d", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: partition(t).args.items.__setitem__(2, tv.Tup([208, 2])))


@case("zero12", "exp_avg_numel_2_pow_62", "exp_avg of group 0 with a storage of 2^62 elements", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: pid_items(base_state(t).items[0][1].get("exp_avg")).__setitem__(4, 2 ** 62))


@case("zero12", "zero_stage_3", "zero_stage 3 beside mp_rank_00_model_states.pt", STAGE12)
def _(tag, root):
    def fn(t, _):
        dict_set(osd(t), "zero_stage", 3)
    for r in range(2):
        edit(optim(tag, r), fn)


@case("zero12", "no_zero_stage_on_one_rank", "rank 1 without zero_stage (a BF16_Optimizer file?)", STAGE12)
def _(tag, root):
    edit(optim(tag, 1), lambda t, _: dict_del(osd(t), "zero_stage"))


@case("zero12", "model_states_missing", "mp_rank_00_model_states.pt removed", STAGE12)
def _(tag, root):
    os.remove(os.path.join(tag, SHARED_MODEL))


@case("zero12", "model_states_truncated", "mp_rank_00_model_states.pt cut in half", STAGE12)
def _(tag, root):
    path = os.path.join(tag, SHARED_MODEL)
    write(path, read(path)[: os.path.getsize(path) // 2])


@case("zero12", "tensor_parallel_rank", "an mp_rank_01_model_states.pt beside mp_rank_00", STAGE12)
def _(tag, root):
    shutil.copy(os.path.join(tag, SHARED_MODEL), os.path.join(tag, "mp_rank_01_model_states.pt"))


@case("zero12", "last_rank_missing", "rank 1's optimizer file removed", STAGE12)
def _(tag, root):
    os.remove(optim(tag, 1))


@case("zero12", "dp_world_size_2_pow_31", "dp_world_size 2^31 in the model states", STAGE12)
def _(tag, root):
    edit(os.path.join(tag, SHARED_MODEL), lambda t, _: dict_set(t, "dp_world_size", 2 ** 31))


@case("zero12", "group_shape_wraps", "a param of shape [3, 6148914691236517207] in group 1", STAGE12)
def _(tag, root):
    def fn(t, _):
        size = shapes(t, 1).dictitems[1][1]
        size.args.items[0] = tv.Tup([3, 6148914691236517207])
    edit(os.path.join(tag, SHARED_MODEL), fn)


@case("zero12", "frozen_shape_disagrees", "frozen_param_shapes says proj.bias is [6]", STAGE12)
def _(tag, root):
    def fn(t, _):
        frozen = t.get("frozen_param_shapes")
        items = frozen.items if isinstance(frozen, tv.Dct) else frozen.dictitems
        items[-1][1].args.items[0] = tv.Tup([6])
    edit(os.path.join(tag, SHARED_MODEL), fn)


@case("zero12", "round_robin_gradients", "zero_optimization.round_robin_gradients true", STAGE12)
def _(tag, root):
    edit(os.path.join(tag, SHARED_MODEL),
         lambda t, _: dict_set(t.get("ds_config").get("zero_optimization"), "round_robin_gradients", True))


# ------------------------------------------------------------------ layouts ucfs refuses by name
# (src/checkpoint/unserved_layouts.h): each refused at open, naming its file.

@case("unserved", "zenflow", "zero_optimization.zenflow set: ZenFlow's transposed flat buffers", STAGE12)
def _(tag, root):
    edit(os.path.join(tag, SHARED_MODEL),
         lambda t, _: dict_set(t.get("ds_config").get("zero_optimization"), "zenflow",
                               tv.Dct([(tv.Str("topk_ratio"), 0.1)])))


@case("unserved", "mics", "zero_optimization.mics_shard_size 1: MiCS's shard-group optimizer files")
def _(tag, root):
    edit(model(tag), lambda t, _: dict_set(t.get("ds_config").get("zero_optimization"), "mics_shard_size", 1))


@case("unserved", "nvme_offload", "<tag>/offloaded_tensors/rank0: states in NVMe swap files")
def _(tag, root):
    os.makedirs(os.path.join(tag, "offloaded_tensors", "rank0"))


@case("unserved", "split_rank_file", "rank 1's optimizer file in two parts (FastCheckpointEngine)")
def _(tag, root):
    data = read(optim(tag, 1))
    os.remove(optim(tag, 1))
    write(optim(tag, 1) + "-0.2", data[:len(data) // 2])
    write(optim(tag, 1) + "-1.2", data[len(data) // 2:])


@case("unserved", "elastic_checkpoint", "base_optimizer_state a list of each group's states", STAGE12)
def _(tag, root):
    def fn(t, _):
        base = osd(t).get("base_optimizer_state")
        dict_set(osd(t), "base_optimizer_state", tv.Lst([v for _, v in base.get("state").items]))
    for r in range(2):
        edit(optim(tag, r), fn)


# Parameter alignment is served (src/checkpoint/param_alignment.cc): paddings
# that are not one per param of each group are corruption, naming the file.
@case("zero12", "parameter_alignment_wrong_length",
      "param_alignment_paddings [[0, 0], [0, 3, 0]]: fewer paddings than params", STAGE12)
def _(tag, root):
    for r in range(2):
        edit(optim(tag, r), lambda t, _: dict_set(osd(t), "param_alignment_paddings",
                                                   tv.Lst([tv.Lst([0, 0]), tv.Lst([0, 3, 0])])))


@case("unserved", "autoep_layers", "ds_autoep_layers in rank 0's model states")
def _(tag, root):
    edit(model(tag), lambda t, _: dict_set(t, "ds_autoep_layers", tv.Lst([tv.Dct([(tv.Str("ep_size"), 2)])])))


# ------------------------------------------------------------------ tensor and pipeline parallel
# The TP/PP fixtures (tests/data/tp_fixtures, beside the fixtures). ucfs
# serves their universal view and their view at a new D: each broken one
# must get a clear error naming its file, from every command.
TP = "../tp_fixtures/tp_z1_fp32_t2d2"
PP = "../tp_fixtures/pp_bf16opt_p2t2d2"
TP_MODEL0 = "mp_rank_00_model_states.pt"


def edit_info(tag, fn):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: fn(t.get("universal_checkpoint_info")))


@case("parallel", "mp_rank_missing", "zero_pp_rank_1_mp_rank_01 removed", TP)
def _(tag, root):
    os.remove(os.path.join(tag, "zero_pp_rank_1_mp_rank_01_optim_states.pt"))


@case("parallel", "stray_mp_rank", "an mp_rank_02_model_states.pt beside mp_rank_00 and 01", TP)
def _(tag, root):
    shutil.copy(os.path.join(tag, "mp_rank_01_model_states.pt"), os.path.join(tag, "mp_rank_02_model_states.pt"))


@case("parallel", "layer_file_missing", "tensor rank 1's layer_03 removed", PP)
def _(tag, root):
    os.remove(os.path.join(tag, "layer_03-model_01-model_states.pt"))


@case("parallel", "layer_files_mixed", "a layer file without model_NN beside ones with it", PP)
def _(tag, root):
    shutil.copy(os.path.join(tag, "layer_03-model_00-model_states.pt"), os.path.join(tag, "layer_05-model_states.pt"))


@case("parallel", "no_universal_info", "universal_checkpoint_info removed from mp_rank_00", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0),
         lambda t, _: t.items.__setitem__(slice(None), [kv for kv in t.items if kv[0].v != "universal_checkpoint_info"]))


@case("parallel", "universal_info_not_a_dict", "universal_checkpoint_info is a str", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: dict_set(t, "universal_checkpoint_info", tv.Str("patterns")))


@case("parallel", "pattern_not_a_str", "a tp_replicated pattern is an int", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("tp_replicated_parameter_patterns").items.append(7))


@case("parallel", "pattern_unused", "a tp_replicated pattern no param matches", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("tp_replicated_parameter_patterns").items.append(tv.Str("no_such_param")))


@case("parallel", "pattern_python_only", "a pattern with a Python named group", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("tp_replicated_parameter_patterns").items.append(tv.Str("(?P<x>final)")))


@case("parallel", "pattern_matches_twice", "two row-parallel patterns match one param", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("parameter_with_row_parallelism_patterns").items.append(
        tv.Str(r"language_model.encoder.layers.\d+.mlp")))


@case("parallel", "vocab_size_missing", "original_vocab_size removed", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.items.__setitem__(
        slice(None), [kv for kv in info.items if kv[0].v != "original_vocab_size"]))


@case("parallel", "vocab_size_too_big", "original_vocab_size beyond the padded rows", TP)
def _(tag, root):
    edit_info(tag, lambda info: dict_set(info, "original_vocab_size", 1000))


@case("parallel", "vocab_pattern_on_a_bias", "the vocabulary pattern names a 1-D param", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("vocabulary_parameter_patterns").items.append(
        tv.Str("language_model.encoder.final_layernorm.bias")))


def affine_info(info, entry):
    dict_set(info, "affine_map", tv.Dct([(tv.Str("version"), 1), (tv.Str("params"), entry)]))


@case("parallel", "affine_map", "an AutoTP affine_map entry without ranks", TP)
def _(tag, root):
    entry = tv.Dct([(tv.Str("logical_shape"), tv.Lst([]))])
    edit_info(tag, lambda info: affine_info(info, tv.Dct([(tv.Str("^language_model.x$"), entry)])))


def first_param_map(tree, rank1_source, rank1_strides=None):
    """An affine map of the first param (local [a, b]) as two row blocks of a [2a, b] param, rank 1's at
    source offset `rank1_source` with source strides `rank1_strides` (row major by default)."""
    name, size = shapes(tree).dictitems[0]
    a, b = [int(v) for v in size.args.items[0].items]

    def piece(rank, source, strides):
        return tv.Dct([(tv.Str("shape"), tv.Lst([a, b])), (tv.Str("source"), tv.Lst([source, tv.Lst(strides)])),
                       (tv.Str("dest"), tv.Lst([0, tv.Lst([b, 1])])), (tv.Str("locations"), tv.Lst([rank]))])

    ranks = tv.Dct([(t, tv.Dct([(tv.Str("shard_shape"), tv.Lst([a, b])),
                               (tv.Str("pieces"), tv.Lst([piece(t, 0 if t == 0 else rank1_source,
                                                                [b, 1] if t == 0 else rank1_strides or [b, 1])]))]))
                    for t in (0, 1)])
    entry = tv.Dct([(tv.Str("logical_shape"), tv.Lst([2 * a, b])), (tv.Str("ranks"), ranks)])
    return tv.Dct([(tv.Str("^" + name.v.replace(".", "\\.") + "$"), entry)])


@case("parallel", "affine_map_overlap", "an affine map whose rank 1 rows overlap rank 0's", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: affine_info(
        t.get("universal_checkpoint_info"), first_param_map(t, 1)))


@case("parallel", "affine_map_huge_strides", "an affine map of strides near 2**63", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: affine_info(
        t.get("universal_checkpoint_info"), first_param_map(t, 2**62, [2**62 + 1, 2**61])))


@case("parallel", "local_shapes_disagree", "tensor rank 1 lists another local shape", TP)
def _(tag, root):
    def fn(t, _):
        size = shapes(t).dictitems[0][1]
        size.args.items[0] = tv.Tup([4, 16])
    edit(os.path.join(tag, "mp_rank_01_model_states.pt"), fn)


# ------------------------------------------------------------------ experts
# DeepSpeed 0.19.8's MoE checkpoints (tests/data/modern, beside the
# fixtures): W 4, EP 2, the expert group cut over 2 ranks. ucfs serves every
# view of them; each broken one must be refused naming its file, or (a lost
# expert file) pass through as it is, verify naming it.
MOE = "../modern/moe_z2_fp32_e2d2"
AUTOEP = "../modern/autoep_z2_fp32_e2d2"


def param_group(tree, k):
    return osd(tree).get("base_optimizer_state").get("param_groups").items[k]


@case("experts", "partition_count_of_another_rank", "rank 3 cuts the expert group over 4 ranks", MOE)
def _(tag, root):
    edit(optim(tag, 3), lambda t, _: dict_set(osd(t), "partition_count", tv.Lst([4, 4])))


@case("experts", "expert_group_unnamed", "the expert group cut over 2 ranks is named no 'ep_size_N'", MOE)
def _(tag, root):
    edit(optim(tag, 0), lambda t, _: dict_set(param_group(t, 1), "name", tv.Str("experts")))


@case("experts", "ep_size_not_dividing", "the expert group is named 'ep_size_3' at W 4", MOE)
def _(tag, root):
    edit(optim(tag, 0), lambda t, _: dict_set(param_group(t, 1), "name", tv.Str("ep_size_3")))


@case("experts", "expert_file_missing", "layer 0's expert 3 file is gone", MOE)
def _(tag, root):
    os.remove(os.path.join(tag, "layer_0_expert_3_mp_rank_00_model_states.pt"))


@case("experts", "expert_partition_short", "rank 1's expert partition lost its last 100 elements", MOE)
def _(tag, root):
    def fn(t, _):
        part = osd(t).get("single_partition_of_fp32_groups").items[1]
        part.args.items[2] = tv.Tup([444])
    edit(optim(tag, 1), fn)


@case("experts", "autoep_folded", "ds_autoep_layers folded into AutoTP ranks", AUTOEP)
def _(tag, root):
    def fn(t, _):
        for layer in t.get("ds_autoep_layers").items:
            dict_set(layer, "folding", tv.Dct([]))
    edit(os.path.join(tag, "mp_rank_00_model_states.pt"), fn)


# ------------------------------------------------------------------ main

def main(argv):
    sys.setrecursionlimit(100000)
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    fixtures, out = argv[1], argv[2]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    listed, names = [], set()
    for category, name, description, fixture, fn in CASES:
        key = f"{category}/{name}"
        assert key not in names, key
        names.add(key)
        root = os.path.join(out, category, name)
        src = os.path.join(fixtures, fixture, "checkpoint")
        os.makedirs(root)
        shutil.copy(os.path.join(src, "latest"), os.path.join(root, "latest"))
        shutil.copytree(os.path.join(src, TAG), os.path.join(root, TAG))
        tag = os.path.join(root, TAG)
        if getattr(fn, "needs_fixtures", False):
            fn(tag, root, fixtures)
        else:
            fn(tag, root)
        listed.append({"case": key, "category": category, "description": description, "fixture": fixture})
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(listed, f, indent=1)
    counts = {}
    for c in listed:
        counts[c["category"]] = counts.get(c["category"], 0) + 1
    print(f"{len(listed)} cases: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
