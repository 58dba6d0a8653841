"""Hostile cases of the pickles (billion laughs, deep nesting, globals that must never run), of `latest`,
and of special files in place of rank files (FIFOs, devices, sockets, dangling, looping and escaping
symlinks).

Registered with corpus_support.case; make_hostile_corpus.py writes them.
"""

import os
import shutil
import socket
import stat
import struct

from corpus_support import (
    OPTIM, TAG, case, dict_set, edit, flat, model, optim, pt, raw_pickle, write)


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
        leaf = pt.Str("lol")
        x = leaf
        for _ in range(9):
            x = pt.Lst([x] * 10)
        dict_set(tree, "ds_config", pt.Dct([[pt.Str("zero_optimization"), pt.Dct([])], [pt.Str("laughs"), x]]))
    edit(model(tag), fn)


@case("pickles", "deep_inside_checkpoint", "a valid checkpoint with a 990-deep value in ds_config")
def _(tag, root):
    def fn(tree, _):
        x = pt.Lst([])
        for i in range(990):
            x = pt.Lst([x, i])
        dict_set(tree, "deep", x)
    edit(model(tag), fn)
    edit(optim(tag, 1), fn)


@case("pickles", "deep_and_wide_keys", "990 nested dicts with 200-byte keys and 300 entries each")
def _(tag, root):
    # Before verify kept paths as parent links, this cost 60 s and 22 GB.
    def fn(tree, _):
        x = pt.Lst([])
        for i in range(990):
            x = pt.Dct([[pt.Str("k" * 200 + str(i)), x]] + [[pt.Str(f"t{j}"), pt.Tup([])] for j in range(300)])
        dict_set(tree, "deep", x)
    edit(optim(tag, 1), fn)


@case("pickles", "wide_inside_checkpoint", "200000 tensors-looking values in rank 1's optimizer file")
def _(tag, root):
    def fn(tree, _):
        f = flat(tree)
        bad = pt.Obj("REDUCE", f.func, pt.Tup([f.args.items[0], 2 ** 62] + f.args.items[2:]))
        dict_set(tree, "junk", pt.Lst([bad] * 200000))
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
