"""Hostile cases of what a rank file says of its tensors: parameter names (NUL, terminal escapes, paths,
duplicates), shapes (negative, huge, mismatched) and the tensors' storages, offsets and strides.

Registered with corpus_support.case; make_hostile_corpus.py writes them.
"""

from corpus_support import (
    TRICKY, case, dict_set, edit, flat, model, optim, osd, pid_items, pt, rename_first_param,
    set_first_shape, shapes)


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
        s.dictitems[1][0] = pt.Str(s.dictitems[0][0].v)
    edit(model(tag), fn)


@case("names", "non_string_key", "a param_shapes key that is an int")
def _(tag, root):
    edit(model(tag), lambda tree, _: shapes(tree).dictitems[0].__setitem__(0, 7))


@case("names", "tied_alias_control_chars", "shared_params alias with escapes", TRICKY)
def _(tag, root):
    def fn(tree, _):
        sp = tree.get("shared_params")
        sp.items[0][0] = pt.Str("head\x1b[31m\x00.weight")
    edit(model(tag), fn)


@case("names", "buffer_name_long", "a buffer name of 70000 bytes", TRICKY)
def _(tag, root):
    def fn(tree, _):
        bn = tree.get("buffer_names")
        old = bn.items[0].v
        bn.items[0] = pt.Str("b" * 70000)
        for kv in tree.get("module").dictitems:
            if isinstance(kv[0], pt.Str) and kv[0].v == old:
                kv[0] = pt.Str("b" * 70000)
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
    edit(model(tag), lambda t, _: set_first_shape(t, [pt.Str("11"), 7.0]))


@case("shapes", "not_a_size", "param_shapes value that is a dict")
def _(tag, root):
    edit(model(tag), lambda t, _: shapes(t).dictitems[0].__setitem__(1, pt.Dct([])))


@case("shapes", "frozen_wraps", "a frozen param whose shape product wraps", TRICKY)
def _(tag, root):
    def fn(tree, _):
        f = tree.get("frozen_param_shapes")
        items = f.items if isinstance(f, pt.Dct) else f.dictitems
        items[0][1].args.items[0] = pt.Tup([3, 6148914691236517207])
    edit(model(tag), fn)


@case("shapes", "every_param_2_pow_58", "params of 2^58 elements each: the model wraps 2^64 bytes")
def _(tag, root):
    def fn(tree, _):
        for kv in shapes(tree).dictitems:
            kv[1].args.items[0] = pt.Tup([2 ** 29, 2 ** 29])
    edit(model(tag), fn)


@case("shapes", "flat_shape_2d", "fp32 flat buffer with a 2-d shape")
def _(tag, root):
    edit(optim(tag), lambda t, _: flat(t).args.items.__setitem__(2, pt.Tup([1, 68])))


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
    "stride_huge": lambda f, r: f.args.items.__setitem__(3, pt.Tup([2 ** 62])),
    "stride_negative": lambda f, r: f.args.items.__setitem__(3, pt.Tup([-1])),
    "stride_zero": lambda f, r: f.args.items.__setitem__(3, pt.Tup([0])),
    "stride_wraps": lambda f, r: f.args.items.__setitem__(3, pt.Tup([2 ** 63 // 67 + 1])),
    "storage_key_missing_record": lambda f, r: pid_items(f).__setitem__(2, pt.Str("99")),
    "storage_key_path_traversal": lambda f, r: pid_items(f).__setitem__(2, pt.Str("../../version")),
    "storage_key_nul": lambda f, r: pid_items(f).__setitem__(2, pt.Str("0\x00")),
    "storage_class_unknown": lambda f, r: pid_items(f).__setitem__(1, pt.Glb("torch", "EvilStorage")),
    "storage_class_os_system": lambda f, r: pid_items(f).__setitem__(1, pt.Glb("os", "system")),
    "storage_class_half": lambda f, r: pid_items(f).__setitem__(1, pt.Glb("torch", "HalfStorage")),
    "storage_class_complex128": lambda f, r: pid_items(f).__setitem__(1, pt.Glb("torch", "ComplexDoubleStorage")),
    "location_garbage": lambda f, r: pid_items(f).__setitem__(3, pt.Str("\x1b[2Jcuda:99")),
    "pid_not_tuple": lambda f, r: f.args.items.__setitem__(0, pt.Pid(pt.Str("storage"))),
    "pid_short": lambda f, r: f.args.items.__setitem__(0, pt.Pid(pt.Tup(pid_items(f)[:3]))),
    "rebuild_args_short": lambda f, r: setattr(f, "args", pt.Tup(f.args.items[:3])),
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
            if isinstance(kv[0], pt.Str) and kv[0].v == bn:
                pid_items(kv[1])[4] = 2 ** 62
    edit(model(tag), fn)


@case("tensors", "frozen_fragment_offset_huge", "a frozen fragment at offset 2^62", TRICKY)
def _(tag, root):
    def fn(tree, _):
        frag = tree.get("frozen_param_fragments")
        items = frag.items if isinstance(frag, pt.Dct) else frag.dictitems
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
        if isinstance(step, pt.Obj):
            step.args.items[1] = 2 ** 62
        else:
            dict_set(st.items[0][1], "step", flat(tree))
    edit(optim(tag), fn)
