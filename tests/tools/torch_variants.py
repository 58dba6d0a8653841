#!/usr/bin/python3
"""Re-writes torch.save files (DeepSpeed ZeRO-3 checkpoints) as newer torch / DeepSpeed / Python write them.

The fixtures were written by torch 1.13 + DeepSpeed 0.14.5 under Python 3.11.2. This tool re-emits each
torch.save file of a checkpoint as another writer would have produced it, without running anything from
the input: data.pkl is parsed into a tree of stand-in nodes that keeps the pickle's memo identity
(`parse`) and re-pickled by `Pickler`, which writes what CPython's C pickler writes at protocol 2
(Modules/_pickle.c save_tuple, batch_list(_exact), batch_dict(_exact), save_long, memo_put), then wrapped
in the container of caffe2's PyTorchStreamWriter on miniz. With no option (torch 1.13) every fixture file
comes out byte for byte; torch_variants_test.py checks the rest, partly against torch 1.13's own writers.

usage:  torch_variants.py rewrite SRC_ROOT DST_ROOT [options]   every torch.save file under SRC_ROOT
        torch_variants.py file SRC DST [options]                 one file
options: --torch V (default 1.13; 1.6 ... 2.x), --alignment N, --no-crc, --archive-prefix, --legacy,
         --optimizer {adamw,fused-adam,cpu-adam}, --zero-stage-enum {by-name,by-value}, --ds-version X

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
  --legacy: the non-zip format of `_legacy_save` (`_use_new_zipfile_serialization=False`; DeepSpeed >=
  0.17.1 with "checkpoint_serialization": false): pickles of the magic number, 1001 and sys_info, the object
  pickle with persistent ids ('storage', type, str(storage._cdata), location, numel, None) (a new key
  string at every reference), the sorted key list, then per key an int64 element count and the bytes.
  The _cdata values are invented heap-like addresses (`heap_address`).

Pickle level:
  torch >= 2.0 (PR #81616; torch/_tensor.py Tensor.__reduce_ex__, torch/_utils.py _get_obj_state): a
  plain tensor with a non-empty __dict__ pickles as torch._tensor._rebuild_from_type_v2(
  torch._utils._rebuild_tensor_v2, torch.Tensor, (its 6 args), {attrs}). DeepSpeed sets one attribute,
  `ds_id` = "<first>_<last>" param ds_id of the sub-group (a str), on each ZeRO-3 fp32 partition
  (runtime/zero/stage3.py `_create_fp32_partitions`, v0.14.5 ... v0.19.5), so each fp32_flat_groups
  tensor takes that form. Param ds_ids count module.parameters() from 0 (partition_parameters.py
  Init.param_id); they are derived from the model-states file next to the optimizer file. No 7th
  `_rebuild_tensor_v2` argument: torch >= 2.0 adds one only for conj/neg bits (PR #88182).
  --optimizer (the inner torch optimizer's state_dict; keys the user gave a group stay first):
    adamw      torch.optim.AdamW of --torch. 1.13: lr betas eps weight_decay amsgrad foreach maximize
               capturable; 2.0-2.6: + differentiable=False fused=None; >= 2.7 (AdamW = Adam(...,
               decoupled_weight_decay=True), PR #143710): lr betas eps weight_decay amsgrad maximize foreach
               capturable differentiable fused decoupled_weight_decay. step: 0-dim float32 CPU tensor.
    fused-adam DeepSpeed FusedAdam (ops/adam/fused_adam.py): lr bias_correction betas eps weight_decay,
               then step=0 (added by step()); each state's step is a Python int.
    cpu-adam   DeepSpeedCPUAdam (ops/adam/cpu_adam.py): lr betas eps weight_decay bias_correction amsgrad;
               each state's step is a Python int.
  --zero-stage-enum: by-name = getattr(ZeroStageEnum, 'weights') (CPython 3.11's Enum.__reduce_ex__ as
    released, e.g. 3.11.2, the fixtures); by-value = ZeroStageEnum(3) (CPython <= 3.10, >= 3.12, and later
    3.11 patch releases: 3.11.7 does).
  --ds-version X: `ds_version` of model and optimizer states; X >= 0.19.5 also adds
    checkpoint_parallel_dimensions = {'pp_degree': 1, 'tp_degree': 1} after mp_world_size
    (runtime/engine.py _common_checkpoint_state, _checkpoint_parallel_metadata; no mpu).
"""
import argparse
import bisect
import os
import pickletools
import re
import shutil
import struct
import sys
import zipfile
import zlib


# ---------------------------------------------------------------- the pickle value tree

class Str:
    """A str, one node per pickled string object (memo identity = node identity)."""
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


class Tup:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class Lst:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class Dct:
    """An exact dict; items are [key, value] pairs in insertion order."""
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = [list(kv) for kv in items]

    def get(self, key):
        return next((v for k, v in self.items if isinstance(k, Str) and k.v == key), None)

    def keys(self):
        return [k.v if isinstance(k, Str) else k for k, _ in self.items]


class Glb:
    """GLOBAL module name; memoized by name, as pickle memoizes the one object the name denotes."""
    __slots__ = ("module", "name")

    def __init__(self, module, name):
        self.module, self.name = module, name


NO_STATE = object()


class Obj:
    """REDUCE (func, args) or NEWOBJ (cls, args), then APPENDS / SETITEMS of its list or dict items
    (save_reduce's listitems / dictitems iterators) and BUILD of `state`."""
    __slots__ = ("op", "func", "args", "listitems", "dictitems", "state")

    def __init__(self, op, func, args):
        self.op, self.func, self.args = op, func, args
        self.listitems, self.dictitems, self.state = [], [], NO_STATE


class Pid:
    """BINPERSID of a persistent-id tuple (a storage reference)."""
    __slots__ = ("tup",)

    def __init__(self, tup):
        self.tup = tup


def parse(data):
    """Parses a protocol-2 pickle into the tree above. Executes nothing: globals stay names."""
    stack, marks, memo = [], [], {}

    def pop_mark():
        i = marks.pop()
        items = stack[i:]
        del stack[i:]
        return items

    def add(items, pairs):  # APPEND(S) / SETITEM(S) on the object under them
        target = stack[-1]
        if isinstance(target, Obj):
            (target.dictitems if pairs else target.listitems).extend(items)
        elif isinstance(target, Dct if pairs else Lst):
            target.items.extend(items)
        else:
            raise ValueError(f"cannot add items to {type(target).__name__}")

    for op, arg, pos in pickletools.genops(data):
        name = op.name
        if name == "PROTO":
            if arg != 2:
                raise ValueError(f"protocol {arg}: only protocol-2 pickles are supported")
        elif name == "STOP":
            break
        elif name == "MARK":
            marks.append(len(stack))
        elif name == "BINUNICODE":
            stack.append(Str(arg))
        elif name in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "BINFLOAT"):
            stack.append(arg)
        elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
            stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
        elif name == "EMPTY_TUPLE":
            stack.append(Tup([]))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = stack[-n:]
            del stack[-n:]
            stack.append(Tup(items))
        elif name == "TUPLE":
            stack.append(Tup(pop_mark()))
        elif name == "EMPTY_LIST":
            stack.append(Lst([]))
        elif name == "EMPTY_DICT":
            stack.append(Dct([]))
        elif name in ("APPEND", "SETITEM"):
            items = stack[-1 - (name == "SETITEM"):]
            del stack[-len(items):]
            add([items] if name == "SETITEM" else items, pairs=name == "SETITEM")
        elif name in ("APPENDS", "SETITEMS"):
            items = pop_mark()
            add([list(kv) for kv in zip(items[::2], items[1::2])] if name == "SETITEMS" else items,
                pairs=name == "SETITEMS")
        elif name == "GLOBAL":
            module, gname = arg.split(" ", 1)
            stack.append(Glb(module, gname))
        elif name in ("REDUCE", "NEWOBJ"):
            args = stack.pop()
            stack.append(Obj(name, stack.pop(), args))
        elif name == "BUILD":
            state = stack.pop()
            if not isinstance(stack[-1], Obj):
                raise ValueError(f"BUILD on {type(stack[-1]).__name__} at {pos}")
            stack[-1].state = state
        elif name == "BINPERSID":
            stack.append(Pid(stack.pop()))
        elif name in ("BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        else:
            raise ValueError(f"unsupported opcode {name} at {pos}")
    if len(stack) != 1 or marks:
        raise ValueError("malformed pickle")
    return stack[0]


def walk(root):
    """Every node of the tree once (shared nodes once), parents before children."""
    seen, todo = set(), [root]
    while todo:
        x = todo.pop()
        if id(x) in seen or not isinstance(x, (Tup, Lst, Dct, Obj, Pid)):
            continue
        seen.add(id(x))
        yield x
        if isinstance(x, (Tup, Lst)):
            kids = x.items
        elif isinstance(x, Dct):
            kids = [c for kv in x.items for c in kv]
        elif isinstance(x, Obj):
            kids = [x.func, x.args, *x.listitems, *(c for kv in x.dictitems for c in kv)]
            kids += [] if x.state is NO_STATE else [x.state]
        else:
            kids = [x.tup]
        todo.extend(reversed(kids))


class Pickler:
    """Writes a tree as CPython's C pickler writes the objects it stands for, at protocol 2.
    `persistent(pid)` returns the node to save for a Pid (pickle's persistent_id); it may return fresh
    nodes, which are kept alive so that their ids are never reused within one pickle."""

    BATCHSIZE = 1000

    def __init__(self, persistent=None):
        self.persistent = persistent or (lambda pid: pid.tup)

    def dumps(self, root):
        self.out, self.memo = bytearray(b"\x80\x02"), {}
        self.save(root)
        self.out += b"."
        return bytes(self.out)

    def put(self, key, obj):
        i = len(self.memo)
        self.memo[key] = (i, obj)
        self.out += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)

    def save(self, x):
        out = self.out
        if x is None:
            out += b"N"
        elif x is True or x is False:
            out += b"\x88" if x else b"\x89"
        elif type(x) is int:
            if 0 <= x <= 0xFF:
                out += b"K" + bytes([x])
            elif 0 <= x <= 0xFFFF:
                out += b"M" + struct.pack("<H", x)
            elif -0x80000000 <= x <= 0x7FFFFFFF:
                out += b"J" + struct.pack("<i", x)
            else:
                b = x.to_bytes((x.bit_length() >> 3) + 1, "little", signed=True)
                if x < 0 and len(b) > 1 and b[-1] == 0xFF and b[-2] & 0x80:
                    b = b[:-1]
                out += (b"\x8a" + bytes([len(b)]) if len(b) < 256 else b"\x8b" + struct.pack("<I", len(b))) + b
        elif type(x) is float:
            out += b"G" + struct.pack(">d", x)
        elif isinstance(x, Pid):
            self.save(self.persistent(x))
            out += b"Q"
        else:
            key = ("g", x.module, x.name) if isinstance(x, Glb) else id(x)
            hit = self.memo.get(key)
            if hit:
                i = hit[0]
                out += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)
            elif isinstance(x, Str):
                b = x.v.encode("utf-8", "surrogatepass")
                out += b"X" + struct.pack("<I", len(b)) + b
                self.put(key, x)
            elif isinstance(x, Glb):
                out += b"c" + x.module.encode("ascii") + b"\n" + x.name.encode("ascii") + b"\n"
                self.put(key, x)
            elif isinstance(x, Tup):
                self.save_tuple(x, key)
            elif isinstance(x, Lst):
                out += b"]"
                self.put(key, x)
                self.batch(x.items, exact=True, pairs=False)
            elif isinstance(x, Dct):
                out += b"}"
                self.put(key, x)
                self.batch(x.items, exact=True, pairs=True)
            elif isinstance(x, Obj):
                self.save(x.func)
                self.save(x.args)
                out += b"R" if x.op == "REDUCE" else b"\x81"
                self.put(key, x)
                self.batch(x.listitems, exact=False, pairs=False)
                self.batch(x.dictitems, exact=False, pairs=True)
                if x.state is not NO_STATE:
                    self.save(x.state)
                    out += b"b"
            else:
                raise TypeError(f"cannot pickle {type(x).__name__}")

    def save_tuple(self, x, key):
        if not x.items:
            self.out += b")"  # the empty tuple is never memoized
            return
        if len(x.items) > 3:
            self.out += b"("
        for item in x.items:
            self.save(item)
        self.out += b"t" if len(x.items) > 3 else b"\x85\x86\x87"[len(x.items) - 1:len(x.items)]
        self.put(key, x)

    def batch(self, items, exact, pairs):
        """batch_list_exact / batch_dict_exact (exact list / dict) or batch_list / batch_dict (the
        iterators of save_reduce): chunks of 1000 between MARK and APPENDS / SETITEMS; a single item
        without MARK (iterators: a last chunk of one; exact: only a container of length one); an exact
        dict whose last chunk is full is followed by an empty MARK SETITEMS."""
        one, many = (b"s", b"u") if pairs else (b"a", b"e")
        n = len(items)
        if n == 0:
            return
        chunks = [items[i:i + self.BATCHSIZE] for i in range(0, n, self.BATCHSIZE)]
        if exact and pairs and n > 1 and n % self.BATCHSIZE == 0:
            chunks.append([])
        for chunk in chunks:
            single = len(chunk) == 1 and (not exact or n == 1)
            if not single:
                self.out += b"("
            for item in chunk:
                for x in (item if pairs else [item]):
                    self.save(x)
            self.out += one if single else many


# ---------------------------------------------------------------- tensors in the tree

REBUILD_V2 = ("torch._utils", "_rebuild_tensor_v2")
REBUILD_FROM_TYPE = ("torch._tensor", "_rebuild_from_type_v2")


def is_glb(x, qualname):
    return isinstance(x, Glb) and (x.module, x.name) == qualname


def is_tensor(x):
    return isinstance(x, Obj) and x.op == "REDUCE" and is_glb(x.func, REBUILD_V2)


def tensor_storage(t):
    """(key, storage class name, location) of a `_rebuild_tensor_v2` node."""
    pid = t.args.items[0].tup.items
    return pid[2].v, pid[1].name, pid[3].v


def scalar_value(t, records):
    """The value of a 0-dim tensor, read from its storage record."""
    key, cls, _ = tensor_storage(t)
    fmt = {"FloatStorage": "<f", "DoubleStorage": "<d", "LongStorage": "<q", "IntStorage": "<i"}[cls]
    offset = t.args.items[1] * struct.calcsize(fmt)
    return struct.unpack_from(fmt, records[f"data/{key}"], offset)[0]


# ---------------------------------------------------------------- pickle-level variants

def wrap_ds_ids(root, ds_ids):
    """torch >= 2.0: each fp32_flat_groups tensor carries __dict__ {'ds_id': ...} (see module doc)."""
    attr = Str("ds_id")  # an interned attribute name: one object, memoized once
    for d in walk(root):
        groups = d.get("fp32_flat_groups") if isinstance(d, Dct) else None
        if isinstance(groups, Lst):
            for i, t in enumerate(groups.items):
                if is_tensor(t):
                    args = Tup([Glb(*REBUILD_V2), Glb("torch", "Tensor"), t.args, Dct([(attr, Str(ds_ids(i)))])])
                    groups.items[i] = Obj("REDUCE", Glb(*REBUILD_FROM_TYPE), args)


def ds_id_finder(model_states_root):
    """Returns i -> "<first>_<last>" param ds_ids of sub-group i, from a model-states tree (param_shapes
    per sub-group; ds_ids in module.parameters() order = the order of `module` keys that are params)."""
    shapes = model_states_root.get("param_shapes") if isinstance(model_states_root, Dct) else None
    if not isinstance(shapes, Lst):
        return lambda i: f"{i}_{i}"  # no model states at hand: one param per sub-group
    frozen = model_states_root.get("frozen_param_shapes")
    groups = [[k.v for k, _ in g.dictitems] for g in shapes.items]
    params = {n for g in groups for n in g} | ({k.v for k, _ in frozen.dictitems} if isinstance(frozen, Obj) else set())
    order = [k.v for k, _ in model_states_root.get("module").dictitems if k.v in params]
    ds_id = {name: i for i, name in enumerate(order)}
    return lambda i: f"{ds_id[groups[i][0]]}_{ds_id[groups[i][-1]]}"


ADAMW_KEYS = {  # torch.optim.AdamW defaults, in dict order (torch/optim/adamw.py, adam.py)
    "1.13": ["lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable"],
    "2.0": ["lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable",
            "differentiable", "fused"],
    "2.7": ["lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach", "capturable",
            "differentiable", "fused", "decoupled_weight_decay"],
}
NEW_DEFAULTS = {"differentiable": False, "fused": None, "decoupled_weight_decay": True, "bias_correction": True,
                "amsgrad": False}
OPTIMIZERS = {"fused-adam": ["lr", "bias_correction", "betas", "eps", "weight_decay"],
              "cpu-adam": ["lr", "betas", "eps", "weight_decay", "bias_correction", "amsgrad"]}


def rewrite_param_group(group, new_keys, group_step, interned):
    """Re-orders an AdamW (1.13) param group as `torch.optim.Optimizer.add_param_group` builds it for
    other defaults: the user's keys first, then the defaults not given, then later additions (e.g. a
    scheduler's initial_lr), then FusedAdam's `step`; state_dict() puts `params` last. New key names come
    from `interned` (one str object per name, like the keyword names of the defaults dict)."""
    old_keys = ADAMW_KEYS["1.13"]
    items = [kv for kv in group.items if kv[0].v != "params"]
    names = [k.v for k, _ in items]
    for split in range(len(names) + 1):  # names = user keys + old defaults not given + extras
        user, rest = names[:split], names[split:]
        defaults = [n for n in rest if n in old_keys]
        if defaults == [n for n in old_keys if n not in user] and rest[:len(defaults)] == defaults:
            break
    else:
        return  # not a torch.optim.AdamW group: left as it is
    by_name = {kv[0].v: kv for kv in items}
    order = user + [n for n in new_keys if n not in user] + rest[len(defaults):]
    new = [by_name.get(n) or [interned(n), NEW_DEFAULTS[n]] for n in order]
    if group_step:
        new.append([interned("step"), 0])
    group.items = new + [kv for kv in group.items if kv[0].v == "params"]


def rewrite_optimizer(root, optimizer, torch_version, records):
    """--optimizer: param-group keys and the type of `step` of every torch optimizer state_dict."""
    if optimizer == "adamw":
        new_keys = ADAMW_KEYS["2.7" if torch_version >= (2, 7) else "2.0" if torch_version >= (2, 0) else "1.13"]
    else:
        new_keys = OPTIMIZERS[optimizer]
    done, names = set(), {}
    interned = lambda n: names.setdefault(n, Str(n))  # noqa: E731
    for d in list(walk(root)):
        state, groups = (d.get("state"), d.get("param_groups")) if isinstance(d, Dct) else (None, None)
        if not (isinstance(state, Dct) and isinstance(groups, Lst)):
            continue
        for g in groups.items:
            if id(g) not in done:
                done.add(id(g))
                rewrite_param_group(g, new_keys, optimizer == "fused-adam", interned)
        if optimizer != "adamw":
            for _, s in state.items:
                for kv in s.items:
                    if kv[0].v == "step" and is_tensor(kv[1]):
                        kv[1] = int(scalar_value(kv[1], records))


ZERO_STAGES = {"disabled": 0, "optimizer_states": 1, "gradients": 2, "weights": 3}
ZERO_STAGE_ENUM = ("deepspeed.runtime.zero.config", "ZeroStageEnum")


def rewrite_zero_stage_enum(root, form):
    """ZeroStageEnum member as `getattr(ZeroStageEnum, 'weights')` (by-name) or `ZeroStageEnum(3)`."""
    for d in walk(root):
        for kv in d.items if isinstance(d, Dct) else []:
            v = kv[1]
            if not (isinstance(v, Obj) and v.op == "REDUCE"):
                continue
            if is_glb(v.func, ("__builtin__", "getattr")) and is_glb(v.args.items[0], ZERO_STAGE_ENUM):
                cls, value = v.args.items[0], ZERO_STAGES[v.args.items[1].v]
            elif is_glb(v.func, ZERO_STAGE_ENUM):
                cls, value = v.func, v.args.items[0]
            else:
                continue
            if form == "by-value":
                kv[1] = Obj("REDUCE", cls, Tup([value]))
            else:
                name = next(n for n, x in ZERO_STAGES.items() if x == value)
                kv[1] = Obj("REDUCE", Glb("__builtin__", "getattr"), Tup([cls, Str(name)]))


def set_ds_version(root, version):
    if not isinstance(root, Dct) or root.get("ds_version") is None:
        return
    for kv in root.items:
        if kv[0].v == "ds_version":
            kv[1] = Str(version)
    keys = root.keys()
    if parse_version(version) >= (0, 19, 5) and "mp_world_size" in keys and \
            "checkpoint_parallel_dimensions" not in keys:
        dims = Dct([(Str("pp_degree"), 1), (Str("tp_degree"), 1)])
        root.items.insert(keys.index("mp_world_size") + 1, [Str("checkpoint_parallel_dimensions"), dims])


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


def zip_variant(root, records, top, v):
    """data.pkl with storage keys renumbered in first-pickled order (torch's id_map), then the records."""
    keys, order = {}, []

    def persistent(pid):
        items = pid.tup.items
        key = keys.get(items[2].v)
        if key is None:
            key = keys[items[2].v] = Str(str(len(keys)))
            order.append(items[2].v)
        return Tup([items[0], items[1], key, items[3], items[4]])

    data_pkl = Pickler(persistent).dumps(root)
    if v.torch < (2, 7):
        order.sort(key=lambda k: keys[k].v)  # sorted(serialized_storages.keys()): string order
    storages = [(f"data/{keys[k].v}", records[f"data/{k}"]) for k in order]
    head = [("data.pkl", data_pkl)]
    if v.torch >= (2, 7):
        head += [(".format_version", b"1"), (".storage_alignment", str(v.alignment).encode())]
    if v.torch >= (2, 1):
        head += [("byteorder", b"little")]
    return write_zip(head + storages + [("version", b"3\n")], top, v.alignment, v.crc,
                     with_serialization_id=v.torch >= (2, 1))


MAGIC_NUMBER = 0x1950A86A20F9469CFC6C


def heap_address(k):
    """The invented `storage._cdata` of the k-th storage pickled: 16-byte aligned heap-like addresses
    of equal length, in an order unrelated to k (so the sorted key order is not the pickling order)."""
    return 0x55A100000000 + ((k * 2654435761) % (1 << 20)) * 0x40


def legacy_variant(root, records):
    """_legacy_save: a run of pickles, then each storage as <int64 element count><bytes> in key order."""
    cdata, storages = {}, {}

    def persistent(pid):
        items = pid.tup.items
        key = cdata.setdefault(items[2].v, str(heap_address(len(cdata))))
        storages.setdefault(key, (items[4], records[f"data/{items[2].v}"]))
        return Tup([items[0], items[1], Str(key), items[3], items[4], None])  # a new key str per call

    sys_info = Dct([(Str("protocol_version"), 1001), (Str("little_endian"), True),
                    (Str("type_sizes"), Dct([(Str("short"), 2), (Str("int"), 4), (Str("long"), 4)]))])
    parts = [Pickler().dumps(x) for x in (MAGIC_NUMBER, 1001, sys_info)]
    parts.append(Pickler(persistent).dumps(root))
    keys = sorted(storages)
    parts.append(Pickler().dumps(Lst([Str(k) for k in keys])))
    for k in keys:
        numel, data = storages[k]
        parts.append(struct.pack("<q", numel) + data)
    return b"".join(parts)


# ---------------------------------------------------------------- files and trees

class Variant:
    def __init__(self, torch="1.13", alignment=None, crc=True, archive_prefix=False, legacy=False,
                 optimizer="adamw", zero_stage_enum=None, ds_version=None):
        self.torch = parse_version(torch)
        if self.torch < (1, 6):
            raise ValueError("torch < 1.6 wrote no zip by default")
        if alignment is not None and (self.torch < (2, 7) or alignment < 1):
            raise ValueError("--alignment needs torch >= 2.7 (torch.utils.serialization.config) and N >= 1")
        if not crc and self.torch < (2, 6):
            raise ValueError("--no-crc needs torch >= 2.6 (torch.serialization.set_crc32_options)")
        if legacy and (alignment is not None or not crc or archive_prefix):
            raise ValueError("--alignment, --no-crc and --archive-prefix apply to the zip format only")
        self.alignment, self.crc, self.archive_prefix, self.legacy = alignment or 64, crc, archive_prefix, legacy
        self.optimizer, self.zero_stage_enum, self.ds_version = optimizer, zero_stage_enum, ds_version


def parse_version(s):
    return tuple(int(x) for x in s.split("."))


def read_torch_zip(path):
    """(data.pkl tree, {record name: bytes}) of a torch.save zip."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        top = names[0].split("/", 1)[0]
        records = {n[len(top) + 1:]: z.read(n) for n in names}
    return parse(records["data.pkl"]), records


def is_torch_zip(path):
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            return False
    with zipfile.ZipFile(path) as z:
        return z.namelist()[0].endswith("/data.pkl")


def model_states_near(path):
    """The model-states tree that goes with an optimizer file: rank 0's (lowest rank) in its directory or
    in the parent directory (a universal checkpoint's zero/optimizer_state.pt)."""
    for d in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        found = [f for f in os.listdir(d or ".") if f.endswith("model_states.pt")]
        if found:
            rank = [int(m.group(1)) if m else 0 for m in (re.search(r"rank_(\d+)_", f) for f in found)]
            return read_torch_zip(os.path.join(d, found[rank.index(min(rank))]))[0]
    return None


def rewrite_file(src, dst, v):
    """Writes the torch.save file `src` as variant `v` to `dst`."""
    root, records = read_torch_zip(src)
    if v.torch >= (2, 0) and any(isinstance(d, Dct) and d.get("fp32_flat_groups") for d in walk(root)):
        wrap_ds_ids(root, ds_id_finder(model_states_near(src)))
    rewrite_optimizer(root, v.optimizer, v.torch, records)
    if v.zero_stage_enum:
        rewrite_zero_stage_enum(root, v.zero_stage_enum)
    if v.ds_version:
        set_ds_version(root, v.ds_version)
    if v.legacy:
        blob = legacy_variant(root, records)
    else:
        stem = os.path.basename(dst)
        top = "archive" if v.archive_prefix else (stem[:stem.rindex(".")] if "." in stem else stem)
        blob = zip_variant(root, records, top, v)
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(blob)


def rewrite_tree(src_root, dst_root, v):
    """Every torch.save zip under src_root rewritten, every other file copied; returns the rewritten paths."""
    done = []
    for dirpath, dirnames, filenames in os.walk(src_root):
        dirnames.sort()
        out_dir = os.path.join(dst_root, os.path.relpath(dirpath, src_root))
        os.makedirs(out_dir, exist_ok=True)
        for f in sorted(filenames):
            src, dst = os.path.join(dirpath, f), os.path.join(out_dir, f)
            if is_torch_zip(src):
                rewrite_file(src, dst, v)
                done.append(dst)
            else:
                shutil.copy2(src, dst)
    return done


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["rewrite", "file"], help="rewrite: a checkpoint tree; file: one file")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--torch", default="1.13", help="writer version, e.g. 1.13, 2.0, 2.1, 2.6, 2.7 (default 1.13)")
    ap.add_argument("--alignment", type=int, help="storage alignment, torch >= 2.7 (default 64)")
    ap.add_argument("--no-crc", action="store_true", help="CRC-32 fields 0 (torch >= 2.6 compute_crc32=False)")
    ap.add_argument("--archive-prefix", action="store_true", help="top folder `archive` (saved to a file object)")
    ap.add_argument("--legacy", action="store_true", help="torch's non-zip format")
    ap.add_argument("--optimizer", choices=["adamw", "fused-adam", "cpu-adam"], default="adamw",
                    help="optimizer whose state_dict to write (default: torch.optim.AdamW of --torch)")
    ap.add_argument("--zero-stage-enum", choices=["by-name", "by-value"],
                    help="pickled form of ZeroStageEnum (default: as in the source)")
    ap.add_argument("--ds-version", help="ds_version to write (>= 0.19.5 adds checkpoint_parallel_dimensions)")
    a = ap.parse_args(argv)
    try:
        v = Variant(a.torch, a.alignment, not a.no_crc, a.archive_prefix, a.legacy, a.optimizer,
                    a.zero_stage_enum, a.ds_version)
    except ValueError as e:
        ap.error(str(e))
    if a.mode == "rewrite":
        done = rewrite_tree(a.src, a.dst, v)
        print(f"{len(done)} torch.save files rewritten under {a.dst}")
    else:
        rewrite_file(a.src, a.dst, v)


if __name__ == "__main__":
    sys.exit(main())
