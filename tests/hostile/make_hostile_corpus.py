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

The cases live by category in cases_files.py (names, shapes, tensors),
cases_zip.py, cases_pickles.py (pickles, latest, special files),
cases_ranks.py (rank sets, structure) and cases_layouts.py (ZeRO-1/2, refused
layouts, TP/PP, experts), on corpus_support.py's helpers; the `index` category
needs a ucfs binary and is made by index_cases.py, from run_hostile.py.

Python 3 standard library only (tests/tools/torch_variants.py writes the
pickles and zips as torch does). The output is rebuilt from scratch.
"""

import json
import os
import shutil
import sys

# Importing a case module registers its cases (corpus_support.CASES): the
# imports' order is the corpus' order.
import cases_files
import cases_zip
import cases_pickles
import cases_ranks
import cases_layouts
from corpus_support import CASES, TAG

CASE_MODULES = (cases_files, cases_zip, cases_pickles, cases_ranks, cases_layouts)


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
