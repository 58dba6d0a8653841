#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets.

Usage: make_corpus.py FIXTURES_DIR OUT_DIR

  OUT_DIR/pickle/  the data.pkl of every .pt and .bin below FIXTURES_DIR,
                   plus every *.pkl of the sibling directory ../pickles
  OUT_DIR/zip/     the odd archives (deflated, legacy) of the sibling ../zip,
                   then up to 40 in all of the smallest .pt files of each kind
                   below FIXTURES_DIR
  OUT_DIR/checkpoint/, OUT_DIR/checkpoint12/
                   mutation programs for checkpoint_fuzz (checkpoint_fuzz.cc
                   describes their format): every fixture unmutated, and one
                   program for each kind of edit the target knows
  OUT_DIR/grid/    mutation programs for grid_fuzz (over ../tp_fixtures):
                   every grid unmutated, and programs that remove and rename
                   its files and edit its universal_checkpoint_info
  OUT_DIR/tag_snapshot/
                   shared index files (checkpoint/tag_snapshot.h) for
                   tag_snapshot_fuzz: an empty one, and one of each of the
                   first fixtures' tag listings (format 1 and 2)

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
import struct
import sys
import zipfile
import zlib

# Enough zip seeds to cover every kind of fixture file without making each
# smoke run spend its time on near-duplicates.
MAX_ZIP_SEEDS = 40

# --- checkpoint_fuzz programs. These mirror checkpoint_program.cc's and
# pickle_edits.cc's decoder; a
# seed that drifts from it is still a valid program, only another edit.
# Fixtures are numbered in sorted order: 0 z3_bf16_ws2 ... 3 z3_fp32_ws2 ...
# 6 z3_tricky_fp32_ws4. Byte 0 bit 7: also the universal view with CRCs;
# bit 6: open the tag directory instead of the root.
CRC, TAG_DIR = 0x80, 0x40
OP_EDIT, OP_REPAIR, OP_REPLACE, OP_TRUNCATE, OP_REMOVE = 0, 2, 3, 4, 5
OP_FLIP, OP_RECORD, OP_LATEST, OP_ADD_RANK, OP_RETYPE, OP_ADD_RECORD = 6, 7, 8, 9, 10, 11
# kRetype's tensor families and storage classes (GlobalValue's first entries).
FAM_FLATS, FAM_STATES, FAM_MODULE, FAM_FROZEN, FAM_BUFFERS = 0, 3, 5, 6, 7
CLS_BF16, CLS_HALF, CLS_LONG, CLS_BOOL = 1, 2, 4, 9
# kAddRecord's names and contents.
REC_BYTEORDER, REC_FORMAT_VERSION, REC_ALIGNMENT, REC_SERIALIZATION_ID = 0, 1, 2, 3
TXT_LITTLE, TXT_BIG, TXT_1, TXT_4096, TXT_65535, TXT_0 = 0, 1, 2, 4, 5, 7
# Edit targets: bits 0-1 optim / model / both, bit 2 every rank, rest the rank.
OPTIM0, MODEL0, ALL_OPTIM, ALL_MODEL, ALL_FILES = 0, 1, 4, 5, 6
# Selectors, and the named paths of kPaths (checkpoint_program.cc).
SEL_ROOT, SEL_PATH, SEL_KIND, SEL_TENSOR, SEL_SIZE = 0, 1, 2, 3, 4
PATH_ZERO_STAGE, PATH_PARTITION_COUNT, PATH_FLATS, PATH_FLAT = 1, 2, 3, 4
PATH_STATE_ENTRY, PATH_PARAM_GROUP_PARAMS, PATH_SUB_GROUP_SIZE = 7, 10, 13
PATH_PARAM_SHAPES, PATH_PARAM_SHAPES_GROUP, PATH_SHARED = 17, 18, 24
PATH_BUFFER_NAMES, PATH_DP_WORLD_SIZE = 25, 26
# Tensor parts (the tensor selector's k1).
PART_CLASS, PART_KEY, PART_NUMEL, PART_OFFSET, PART_SIZE = 0, 1, 3, 4, 5
# Actions.
ACT_DESCEND, ACT_REPLACE, ACT_SCALAR, ACT_SEQUENCE, ACT_MAPPING = 0, 1, 2, 3, 4
ACT_WRAP, ACT_UNWRAP, ACT_SET_GLOBAL = 5, 6, 7
# Sequence modes; mapping modes are 12 + (a % 8).
SEQ_DROP, SEQ_DUP, SEQ_APPEND, SEQ_REPEAT = 0, 1, 2, 7
MAP_RENAME, MAP_ADD = 0, 5
# Value generators.
GEN_INT, GEN_STR = 2, 4


def int_table(index):
    """The byte that picks kInts[index]."""
    return index // 3 * 10 + 7 + index % 3


def str_table(index):
    """The byte that picks kStrs[index]."""
    return index // 3 * 12 + 9 + index % 3


def edit(target, selector, k1, k2, *steps):
    out = bytes([OP_EDIT, target, selector, k1, k2])
    for s in steps:
        out += s
    return out


def step(action, a=0, b=0, c=0, d=0, raw=None):
    out = bytes([action, a, b])
    if action != ACT_DESCEND:
        out += bytes([c, d])
    if raw is not None:
        assert action in (ACT_REPLACE, ACT_SCALAR) and b & 0x80
        out += raw.to_bytes(8, "little", signed=raw < 0)
    return out


def checkpoint_programs():
    """(name, program) pairs: the seeds of checkpoint_fuzz."""
    progs = [("fixture-%d" % i, bytes([i])) for i in range(7)]
    progs.append(("fixture-6-crc", bytes([0x86])))
    progs += [
        # partition_count 2^31 in every optimizer file
        ("partition-count-2p31", bytes([3]) + edit(
            ALL_OPTIM, SEL_PATH, PATH_PARTITION_COUNT, 0,
            step(ACT_SCALAR, int_table(15)))),
        # dp_world_size 0 in rank 0's model states
        ("dp-world-size-0", bytes([3]) + edit(
            MODEL0, SEL_PATH, PATH_DP_WORLD_SIZE, 0, step(ACT_SCALAR, int_table(0)))),
        # zero_stage a plain int 2
        ("zero-stage-2", bytes([3]) + edit(
            ALL_OPTIM, SEL_PATH, PATH_ZERO_STAGE, 0,
            step(ACT_REPLACE, GEN_INT, 0, int_table(3)))),
        # a param renamed '..' (a directory name in the universal view)
        ("param-named-dotdot", bytes([3]) + edit(
            MODEL0, SEL_PATH, PATH_PARAM_SHAPES_GROUP, 0,
            step(ACT_MAPPING, MAP_RENAME, 0, 0, str_table(5)))),
        # ... and '.wh.x' (a whiteout's name in a writable mount)
        ("param-named-whiteout", bytes([6]) + edit(
            MODEL0, SEL_PATH, PATH_PARAM_SHAPES_GROUP, 1,
            step(ACT_MAPPING, MAP_RENAME, 0, 0, str_table(6)))),
        # the first torch.Size gets one more dim of 3, then the optimizer
        # files are repaired to fit
        ("shape-rank-3-repaired", bytes([6]) + edit(
            MODEL0, SEL_SIZE, 0, 0,
            step(ACT_SEQUENCE, SEQ_APPEND, 0, GEN_INT, int_table(4)))
            + bytes([OP_REPAIR, 3])),
        # a param duplicated under a new name in its group, repaired
        ("param-added-repaired", bytes([3]) + edit(
            MODEL0, SEL_PATH, PATH_PARAM_SHAPES_GROUP, 0,
            step(ACT_MAPPING, 1, 0, 0, str_table(1))) + bytes([OP_REPAIR, 1])),
        # a whole sub-group repeated, repaired (more fp32_flat_groups)
        ("sub-groups-repeated-repaired", bytes([6]) + edit(
            MODEL0, SEL_PATH, PATH_PARAM_SHAPES, 0,
            step(ACT_SEQUENCE, SEQ_REPEAT, 0, 2)) + bytes([OP_REPAIR, 3])),
        # fp32 master weights as bfloat16 storages
        ("flat-dtype-bf16", bytes([3]) + edit(
            ALL_OPTIM, SEL_TENSOR, PART_CLASS, 0, step(ACT_SET_GLOBAL, 1))),
        # a storage numel of 2^62 (times 4 bytes: 2^64)
        ("storage-numel-2p62", bytes([3]) + edit(
            OPTIM0, SEL_TENSOR, PART_NUMEL, 1, step(ACT_SCALAR, int_table(26)))),
        # a storage offset one past the end
        ("storage-offset-plus-1", bytes([3]) + edit(
            OPTIM0, SEL_TENSOR, PART_OFFSET, 1, step(ACT_SCALAR, 0))),
        # one fp32_flat_groups entry fewer
        ("flat-groups-dropped", bytes([6]) + edit(
            ALL_OPTIM, SEL_PATH, PATH_FLATS, 0, step(ACT_SEQUENCE, SEQ_DROP, 0))),
        # a sub-group listed twice in param_groups[0]['params']
        ("param-group-params-dup", bytes([6]) + edit(
            OPTIM0, SEL_PATH, PATH_PARAM_GROUP_PARAMS, 0, step(ACT_SEQUENCE, SEQ_DUP, 0))),
        # Adam's step a plain int 2^63 - 1
        ("step-int-max", bytes([3]) + edit(
            OPTIM0, SEL_PATH, PATH_STATE_ENTRY, 0,
            step(ACT_REPLACE, GEN_INT, 0x80 | 0, 5, 0, raw=2**63 - 1))),
        # sub_group_size 1: one param per sub-group at every N
        ("sub-group-size-1", bytes([6]) + edit(
            MODEL0, SEL_PATH, PATH_SUB_GROUP_SIZE, 0, step(ACT_SCALAR, int_table(1)))),
        # a tied alias of something that is not a param
        ("shared-param-added", bytes([6]) + edit(
            MODEL0, SEL_PATH, PATH_SHARED, 0, step(ACT_MAPPING, MAP_ADD, 0, 0, 0))),
        # the buffer named twice
        ("buffer-named-twice", bytes([6]) + edit(
            MODEL0, SEL_PATH, PATH_BUFFER_NAMES, 0, step(ACT_SEQUENCE, SEQ_DUP, 0))),
        # file-level: rank 1's optimizer file cut in half; rank 0's model
        # file replaced by rank 1's; a storage record halved; `latest`
        # naming no tag; a fifth rank
        ("truncated-rank-1", bytes([3, OP_TRUNCATE, 2, 0x00, 0x80])),
        ("model-0-is-model-1", bytes([3, OP_REPLACE, 1, 3])),
        ("record-halved", bytes([3, OP_RECORD, 0, 3, 1])),
        ("latest-nope", bytes([3, OP_LATEST, 2])),
        ("rank-added", bytes([6, OP_ADD_RANK, 0])),
        ("zip-directory-flipped", bytes([3, OP_FLIP, 0, 0x10, 0x80, 0x41])),
        # named by the tag directory
        ("tag-dir", bytes([TAG_DIR | 3])),
        ("tag-dir-tricky", bytes([TAG_DIR | 6])),
        # ... without `latest`: a tag directory on its own
        ("tag-dir-alone", bytes([TAG_DIR | 3, OP_LATEST, 9])),
        # every per-element state and flat buffer in bfloat16 or float16
        ("states-bf16", bytes([3, OP_RETYPE, ALL_OPTIM, FAM_STATES, CLS_BF16,
                               OP_RETYPE, ALL_OPTIM, FAM_FLATS, CLS_BF16])),
        ("states-half", bytes([6, OP_RETYPE, ALL_OPTIM, FAM_STATES, CLS_HALF,
                               OP_RETYPE, ALL_OPTIM, FAM_FLATS, CLS_HALF])),
        # the buffer in float16 and bool (zero_to_fp32 makes them float32)
        ("buffer-half", bytes([6, OP_RETYPE, MODEL0, FAM_BUFFERS, CLS_HALF])),
        ("buffer-bool", bytes([6, OP_RETYPE, MODEL0, FAM_BUFFERS, CLS_BOOL])),
        # the module's placeholders (the training dtype) and frozen fragments
        ("module-bf16", bytes([3, OP_RETYPE, ALL_MODEL, FAM_MODULE, CLS_BF16])),
        ("frozen-half", bytes([6, OP_RETYPE, ALL_MODEL, FAM_FROZEN, CLS_HALF])),
        # rank 0's files as torch >= 2.7 (4096-aligned) and 2.1 wrote them
        ("torch27-4096", bytes([3, OP_ADD_RECORD, OPTIM0, REC_FORMAT_VERSION, TXT_1,
                                OP_ADD_RECORD, OPTIM0, REC_ALIGNMENT, TXT_4096,
                                OP_ADD_RECORD, OPTIM0, REC_BYTEORDER, TXT_LITTLE])),
        ("torch27-65535", bytes([6, OP_ADD_RECORD, OPTIM0, REC_FORMAT_VERSION, TXT_1,
                                 OP_ADD_RECORD, OPTIM0, REC_ALIGNMENT, TXT_65535,
                                 OP_ADD_RECORD, MODEL0, REC_FORMAT_VERSION, TXT_1,
                                 OP_ADD_RECORD, MODEL0, REC_ALIGNMENT, TXT_65535])),
        ("torch21", bytes([3, OP_ADD_RECORD, OPTIM0, REC_BYTEORDER, TXT_LITTLE,
                           OP_ADD_RECORD, OPTIM0, REC_SERIALIZATION_ID, TXT_0])),
        ("byteorder-big", bytes([3, OP_ADD_RECORD, 2, REC_BYTEORDER, TXT_BIG])),
    ]
    return progs


# --- grid_fuzz programs (grid_fuzz.cc's decoder). Fixtures in sorted order:
# 0 pp_bf16opt_p2t2d2 (20 files in its tag directory: 8 optimizer, 4
# model-states, then 8 layer files), 2 tp1_z1_megatron_d2, 3 its _merges,
# 4 tp_z1_fp32_t2d2, 5 its _merges (averaged and SubparamShape merges),
# 9 z3_tp_fp32_t2d2.
G_REMOVE, G_RENAME, G_COPY, G_PATTERN, G_INFO, G_SHAPE, G_INT, G_FLIP, G_TRUNCATE = range(9)
GRID_FIXTURES = 10
# Renames: of a rank file 0 mp rank, 1 dp rank, 2 prefix, 3 kind; of a
# layer file 0 layer, 1 tensor-parallel rank, 2 no model axis.
RANK_MP, RANK_DP, RANK_PREFIX, RANK_KIND = 0, 1, 2, 3
LAYER_NUMBER, LAYER_TP, LAYER_NO_AXIS = 0, 1, 2
INFO_LISTS, PATTERNS, INFO_KEYS = 6, 9, 9


def grid_programs():
    """(name, bytes) of every grid_fuzz seed."""
    progs = []
    for f in range(GRID_FIXTURES):
        progs.append(("grid %d" % f, bytes([f])))
        progs.append(("grid %d tag dir, CRCs" % f, bytes([f | TAG_DIR | CRC])))
    for k in range(0, 20, 3):
        progs.append(("remove file %d" % k, bytes([0, G_REMOVE, k])))
    progs.append(("remove the last layer file", bytes([0, G_REMOVE, 19])))
    progs.append(("rename to mp rank 5", bytes([4, G_RENAME, 1, RANK_MP, 5])))
    progs.append(("rename to dp rank 4", bytes([4, G_RENAME, 0, RANK_DP, 4])))
    progs.append(("rename without bf16_", bytes([0, G_RENAME, 2, RANK_PREFIX, 0])))
    progs.append(("rename optim as model", bytes([9, G_RENAME, 1, RANK_KIND, 0])))
    progs.append(("layer file of another T", bytes([0, G_RENAME, 19, LAYER_TP, 2])))
    progs.append(("copy a layer file to T = 3", bytes([0, G_COPY, 19, LAYER_TP, 2])))
    progs.append(("layer file without model axis", bytes([0, G_COPY, 12, LAYER_NO_AXIS, 0])))
    progs.append(("layer file of another layer", bytes([0, G_RENAME, 12, LAYER_NUMBER, 7])))
    progs.append(("an extra mp rank", bytes([4, G_COPY, 1, RANK_MP, 2])))
    for lst in range(INFO_LISTS):
        for which in range(PATTERNS):
            progs.append(("pattern %d in list %d" % (which, lst),
                          bytes([4 + (lst & 1), G_PATTERN, lst, which, lst & 1])))
    for key in range(INFO_KEYS):
        for which in (0, 1, 2, 3 << 2, 4 << 2, 5 << 2):
            progs.append(("info key %d value %d" % (key, which),
                          bytes([0 if key % 2 else 5, G_INFO, key, which, 1])))
    for f in (0, 4, 8, 9):
        progs.append(("shape of file %d" % f, bytes([0, G_SHAPE, f, 1, 0, 4])))
        progs.append(("int of file %d" % f, bytes([5, G_INT, f, 7, 0, 4])))
        progs.append(("shape of merges file %d" % f, bytes([5, G_SHAPE, f, 3, 1, 4])))
    progs.append(("flip a byte", bytes([9, G_FLIP, 1]) + (1234).to_bytes(8, "little") + b"\x10"))
    progs.append(("truncate a layer file", bytes([0, G_TRUNCATE, 15]) + (600).to_bytes(8, "little")))
    return progs


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


def snapshot_file(tag, identity, listings, stats, files, summaries, version=2):
    """A shared index file (checkpoint/tag_snapshot.h): magic, version, then the entries: the tag, its directory's
    identity (size, mtime, ctime, inode), each entry (kind 1 listing, 2 stat, 3 file, 4 summary: path, payload);
    CRC-32 of all before. Format 1 writes the entries as they are; 2, their length and them deflated (zlib)."""
    u64 = lambda v: struct.pack("<Q", v)
    text = lambda b: u64(len(b)) + b
    entries = []
    for path, names in listings:
        payload = u64(len(names)) + b"".join(text(n) + u64(flags) for n, flags in names)
        entries.append(u64(1) + text(path) + text(payload))
    for path, (size, mtime, ctime, inode, mode, uid, gid, is_dir) in stats:
        payload = b"".join(u64(v) for v in (size, mtime, ctime, inode, mode, uid, gid, is_dir))
        entries.append(u64(2) + text(path) + text(payload))
    entries += [u64(3) + text(p) + text(b) for p, b in files]
    entries += [u64(4) + text(p) + text(b) for p, b in summaries]
    inner = text(tag) + b"".join(u64(v) for v in identity) + u64(len(entries)) + b"".join(entries)
    if version == 1:
        body = b"UCFS-IDX" + u64(1) + inner
    else:
        body = b"UCFS-IDX" + u64(2) + u64(len(inner)) + zlib.compress(inner, 6)
    return body + struct.pack("<I", zlib.crc32(body) & 0xffffffff)


def snapshot_seeds(fixtures):
    """Shared index files: empty, and one of each fixture's tag listing (its rank files' names, stats, a file), at
    format 1 and 2."""
    yield snapshot_file(b"", (0, 0, 0, 0), [], [], [], [])
    for name in sorted(os.listdir(fixtures))[:4]:
        tag_dir = os.path.join(fixtures, name, "checkpoint", "global_step4")
        if not os.path.isdir(tag_dir):
            continue
        names = sorted(os.listdir(tag_dir))
        listing = [(n.encode(), 0) for n in names]
        stats = [(n.encode(), (os.path.getsize(os.path.join(tag_dir, n)), 1, 2, i + 3, 0o644, 0, 0, 0))
                 for i, n in enumerate(names)]
        for version in (1, 2):  # 1: mutations reach the fields; 2: zlib's stream
            yield snapshot_file(b"global_step4", (4096, 5, 6, 7), [(b"", listing)], stats,
                                [(b"ds_config.json", b"{}")], [(names[0].encode(), b"\x03")], version)


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

    # The same programs for checkpoint_fuzz (ZeRO-3 fixtures) and
    # checkpoint12_fuzz (ZeRO-1/2 fixtures): they name edits, not files.
    programs = 0
    for corpus in ("checkpoint", "checkpoint12"):
        checkpoint_out = os.path.join(out, corpus)
        reset_dir(checkpoint_out)
        for _, program in checkpoint_programs():
            if write_seed(checkpoint_out, program):
                programs += 1

    grid_out = os.path.join(out, "grid")
    reset_dir(grid_out)
    grids = sum(write_seed(grid_out, program) for _, program in grid_programs())

    snapshot_out = os.path.join(out, "tag_snapshot")
    reset_dir(snapshot_out)
    snapshots = sum(write_seed(snapshot_out, seed) for seed in snapshot_seeds(fixtures))

    print("make_corpus.py: %d pickle seeds in %s, %d zip seeds in %s, %d checkpoint "
          "programs in %s, %d grid programs in %s"
          % (pickles, pickle_out, zips, zip_out, programs, checkpoint_out, grids, grid_out))
    return 0 if pickles and zips and programs and grids and snapshots else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
