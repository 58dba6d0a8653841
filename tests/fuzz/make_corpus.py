#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets.

Usage: make_corpus.py FIXTURES_DIR OUT_DIR

  OUT_DIR/pickle/  the data.pkl of every .pt and .bin below FIXTURES_DIR,
                   plus every *.pkl of the sibling directory ../pickles
  OUT_DIR/zip/     the odd archives (deflated, legacy) of the sibling ../zip,
                   then up to 40 in all of the smallest .pt files of each kind
                   below FIXTURES_DIR

Seeds are named by the SHA-1 of their contents, as libFuzzer names the inputs
it adds, so identical fixtures (the checkpoints repeat many files) collapse
into one seed. OUT_DIR/pickle and OUT_DIR/zip are emptied first: the fuzzers
add inputs to them, and a stale corpus would make the smoke runs grow.
Standard library only, so it runs before anything is installed.
"""

import hashlib
import os
import re
import shutil
import sys
import zipfile

# Enough zip seeds to cover every kind of fixture file without making each
# smoke run spend its time on near-duplicates.
MAX_ZIP_SEEDS = 40


def files_below(root, suffixes):
    """Every regular file below root ending in one of suffixes, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(suffixes):
                found.append(os.path.join(dirpath, name))
    return found


def reset_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def write_seed(out_dir, data):
    """Stores data under its SHA-1; returns False if it was already there."""
    path = os.path.join(out_dir, hashlib.sha1(data).hexdigest())
    if os.path.exists(path):
        return False
    with open(path, "wb") as f:
        f.write(data)
    return True


def data_pkl(path):
    """The data.pkl record of a torch.save zip, or None (legacy format...)."""
    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name == "data.pkl" or name.endswith("/data.pkl"):
                    return z.read(name)
    except (zipfile.BadZipFile, OSError, NotImplementedError):
        pass
    return None


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    fixtures = os.path.abspath(argv[1])
    out = os.path.abspath(argv[2])
    if not os.path.isdir(fixtures):
        sys.stderr.write("make_corpus.py: %s is not a directory\n" % fixtures)
        return 1
    data_dir = os.path.dirname(fixtures)
    pickle_out = os.path.join(out, "pickle")
    zip_out = os.path.join(out, "zip")
    reset_dir(pickle_out)
    reset_dir(zip_out)

    torch_files = files_below(fixtures, (".pt", ".bin"))
    pickles = 0
    for path in torch_files:
        pkl = data_pkl(path)
        if pkl is not None and write_seed(pickle_out, pkl):
            pickles += 1
    for path in files_below(os.path.join(data_dir, "pickles"), (".pkl",)):
        with open(path, "rb") as f:
            if write_seed(pickle_out, f.read()):
                pickles += 1

    # The odd archives always; then the smallest file of each kind in turn
    # (fp32.pt, ..._optim_states.pt, ...): small inputs mutate fast, and
    # taking every kind keeps all the record layouts torch writes.
    archives = files_below(os.path.join(data_dir, "zip"), (".pt",))
    kinds = {}
    for path in torch_files:
        if path.endswith(".pt"):
            kind = re.sub(r"[0-9]+", "N", os.path.basename(path))
            kinds.setdefault(kind, []).append(path)
    queues = [sorted(paths, key=lambda p: (os.path.getsize(p), p))
              for _, paths in sorted(kinds.items())]
    for i in range(max(map(len, queues), default=0)):
        archives += [q[i] for q in queues if i < len(q)]
    zips = 0
    for path in archives:
        if zips >= MAX_ZIP_SEEDS:
            break
        with open(path, "rb") as f:
            if write_seed(zip_out, f.read()):
                zips += 1

    print("make_corpus.py: %d pickle seeds in %s, %d zip seeds in %s"
          % (pickles, pickle_out, zips, zip_out))
    return 0 if pickles and zips else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
