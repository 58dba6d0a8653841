#!/usr/bin/python3
"""Re-writes torch.save files (DeepSpeed ZeRO-3 checkpoints) as newer torch / DeepSpeed / Python write them.

The fixtures were written by torch 1.13 + DeepSpeed 0.14.5 under Python 3.11.2. This tool re-emits each
torch.save file of a checkpoint as another writer would have produced it, without running anything from
the input: data.pkl is parsed into a tree of stand-in nodes that keeps the pickle's memo identity
(pickle_tree.py's `parse`) and re-pickled by its `Pickler`, which writes what CPython's C pickler writes at protocol 2
(Modules/_pickle.c save_tuple, batch_list(_exact), batch_dict(_exact), save_long, memo_put), then wrapped
in the container of caffe2's PyTorchStreamWriter on miniz (torch_zip.py). With no option (torch 1.13) every fixture file
comes out byte for byte; torch_variants_test.py checks the rest, partly against torch 1.13's own writers.

usage:  torch_variants.py rewrite SRC_ROOT DST_ROOT [options]   every torch.save file under SRC_ROOT
        torch_variants.py file SRC DST [options]                 one file
options: --torch V (default 1.13; 1.6 ... 2.x), --alignment N, --no-crc, --archive-prefix, --legacy,
         --optimizer {adamw,fused-adam,cpu-adam}, --zero-stage-enum {by-name,by-value}, --ds-version X

Container (`--torch`, `--alignment`, `--no-crc`, `--archive-prefix`): torch_zip.py says what each torch
version writes. Legacy (`legacy_variant`):
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
import os
import re
import shutil
import struct
import sys
import zipfile

from pickle_tree import Dct, Glb, Lst, Obj, Pickler, REBUILD_FROM_TYPE, REBUILD_V2, Str, Tup, is_glb, is_tensor, parse, scalar_value, walk
from torch_zip import write_zip


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
