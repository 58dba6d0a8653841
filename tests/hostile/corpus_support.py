"""Shared by the hostile corpus' case modules (cases_*.py): the case registry and
the helpers that copy, load, edit and write a fixture's rank files.

A case is a function(tag_dir, root) that breaks one thing of a fresh copy of a
fixture's root, registered with @case(category, name, description, fixture);
make_hostile_corpus.py writes every registered case.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import pickle_tree as pt  # noqa: E402
import torch_zip as tz  # noqa: E402

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
    return pt.parse(dict(records)["data.pkl"]), records, top


def save(path, tree, records, top):
    pkl = pt.Pickler().dumps(tree)
    records = [(n, pkl if n == "data.pkl" else b) for n, b in records]
    write(path, tz.write_zip(records, top))


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
    write(path, tz.write_zip(fn(records), top))


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
    size.args.items[0] = pt.Tup(dims)


def rename_first_param(tag, name):
    """Renames the first param everywhere rank 0's model states name it."""
    def fn(tree, _):
        old = shapes(tree).dictitems[0][0].v
        shapes(tree).dictitems[0][0] = pt.Str(name)
        module = tree.get("module")
        for kv in module.dictitems:
            if isinstance(kv[0], pt.Str) and kv[0].v == old:
                kv[0] = pt.Str(name)
    for r in range(2):
        edit(os.path.join(tag, MODEL.format(r)), fn)


def dict_set(d, key, value):
    items = d.items if isinstance(d, pt.Dct) else d.dictitems
    for kv in items:
        if isinstance(kv[0], pt.Str) and kv[0].v == key:
            kv[1] = value
            return
    items.append([pt.Str(key), value])


def dict_del(d, key):
    items = d.items if isinstance(d, pt.Dct) else d.dictitems
    items[:] = [kv for kv in items if not (isinstance(kv[0], pt.Str) and kv[0].v == key)]


def raw_pickle(path, pkl):
    """Replaces data.pkl with raw bytes."""
    set_records(path, lambda rs: [(n, pkl if n == "data.pkl" else b) for n, b in rs])


def optim(tag, r=0):
    return os.path.join(tag, OPTIM.format(r))


def model(tag, r=0):
    return os.path.join(tag, MODEL.format(r))
