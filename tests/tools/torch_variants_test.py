#!/usr/bin/python3
"""Tests of torch_variants.py (run from the repo root: /usr/bin/python3 tests/tools/torch_variants_test.py).

1. With no option (torch 1.13) every torch.save file of the fixtures is reproduced byte for byte.
2. The pickler re-emits what CPython's C pickler wrote, for containers around the batch size, shared
   references, one-character strings, every int encoding and > 256 memo entries.
3. serialization_id reproduces ids that real torch (libstdc++ builds) wrote.
4. Every variant: the records, their order and alignment, CRCs (checked by zipfile) or zeros, the
   serialization_id; torch 1.13 loads each file and gets the original values, changed only where the
   variant says so (computed here independently on the loaded objects).
5. Real torch 1.13 as an oracle: its pickler, given the loaded objects changed as a newer writer would
   hold them (Tensor.__reduce_ex__ of torch >= 2.0, AdamW / FusedAdam groups, by-value enum), writes
   the same data.pkl; its _legacy_save writes the same legacy file.
"""
import collections
import io
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepspeed_stand_ins  # noqa: E402
import pickle_tree as pt  # noqa: E402
import torch_variants as tv  # noqa: E402
import torch_zip as tz  # noqa: E402

ZeroStageEnum, LossScaler = deepspeed_stand_ins.install()
import torch  # noqa: E402
from torch._tensor import _rebuild_from_type_v2  # noqa: E402

FIXTURES = os.path.join(HERE, "..", "data", "fixtures")
TRICKY = os.path.join(FIXTURES, "z3_tricky_fp32_ws4")
OPTIM = os.path.join(TRICKY, "checkpoint", "global_step4", "zero_pp_rank_1_mp_rank_00_optim_states.pt")


def torch_files(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if tv.is_torch_zip(os.path.join(d, f)))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def first_record(blob):
    """The bytes of a zip's first record (data.pkl), read through its local header (CRC may be 0)."""
    name_len, extra_len = struct.unpack_from("<HH", blob, 26)
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        size = z.infolist()[0].file_size
    return blob[30 + name_len + extra_len:30 + name_len + extra_len + size]


def load(path):
    return torch.load(path, map_location="cpu")


def same(a, b, where="root"):
    """Deep equality of loaded checkpoints: types, key order, tensor dtype/shape/stride/offset/bytes."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if torch.is_tensor(a):
        assert (a.dtype, a.shape, a.stride(), a.storage_offset(), a.requires_grad) == \
            (b.dtype, b.shape, b.stride(), b.storage_offset(), b.requires_grad), where
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), where
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
        same(getattr(a, "_metadata", None), getattr(b, "_metadata", None), f"{where}._metadata")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, LossScaler):
        same(vars(a), vars(b), where)
    elif isinstance(a, float):
        assert a == b or (a != a and b != b), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def records_of(path):
    """[(name, data offset, size, crc, local flags)] of a zip, from its central directory."""
    out, blob = [], read(path)
    for info in zipfile.ZipFile(io.BytesIO(blob)).infolist():
        name_len, extra_len = struct.unpack_from("<HH", blob, info.header_offset + 26)
        flags = struct.unpack_from("<H", blob, info.header_offset + 6)[0]
        out.append((info.filename, info.header_offset + 30 + name_len + extra_len, info.file_size, info.CRC, flags))
    return out


# ---------------------------------------------------------------- expected values of a variant

# facts from torch/optim/adamw.py, adam.py and DeepSpeed's fused_adam.py, cpu_adam.py (see torch_variants.py)
ADAMW_113 = ["lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable"]
ADAMW_20 = ADAMW_113 + ["differentiable", "fused"]
ADAMW_27 = ["lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach", "capturable", "differentiable",
            "fused", "decoupled_weight_decay"]
FUSED_ADAM = ["lr", "bias_correction", "betas", "eps", "weight_decay"]
CPU_ADAM = ["lr", "betas", "eps", "weight_decay", "bias_correction", "amsgrad"]
DEFAULTS = {"differentiable": False, "fused": None, "decoupled_weight_decay": True, "bias_correction": True}


def expected_adamw_group(g, keys):
    """What add_param_group + state_dict() make of a torch 1.13 AdamW group with other defaults: the
    user's keys (those before the 1.13 defaults) first, then `keys` not given, `params` last."""
    names = [k for k in g if k != "params"]
    split = next(i for i in range(len(names) + 1) if names[i:] == [n for n in ADAMW_113 if n not in names[:i]])
    out = {k: g[k] for k in names[:split]}
    for k in keys:
        if k not in out:
            out[k] = g[k] if k in g else DEFAULTS[k]
    return out


def expected(orig, v):
    """The loaded original changed as variant `v` changes it (plain Python on loaded objects)."""
    def visit(x):
        if isinstance(x, dict):
            if "state" in x and "param_groups" in x:
                keys = {"fused-adam": FUSED_ADAM, "cpu-adam": CPU_ADAM}.get(v.optimizer) or \
                    (ADAMW_27 if v.torch >= (2, 7) else ADAMW_20 if v.torch >= (2, 0) else ADAMW_113)
                for i, g in enumerate(x["param_groups"]):
                    new = expected_adamw_group(g, keys)
                    if v.optimizer == "fused-adam":
                        new["step"] = 0
                    new["params"] = g["params"]
                    x["param_groups"][i] = new
                if v.optimizer != "adamw":
                    for s in x["state"].values():
                        s["step"] = int(s["step"].item())
            for k in list(x):
                x[k] = visit(x[k])
        elif isinstance(x, list):
            x[:] = [visit(y) for y in x]
        return x

    out = visit(orig)
    if v.ds_version and isinstance(out, dict) and "ds_version" in out:
        out["ds_version"] = v.ds_version
        if tv.parse_version(v.ds_version) >= (0, 19, 5) and "mp_world_size" in out:
            items = list(out.items())
            i = list(out).index("mp_world_size") + 1
            out = dict(items[:i] + [("checkpoint_parallel_dimensions", {"pp_degree": 1, "tp_degree": 1})] + items[i:])
    return out


# ---------------------------------------------------------------- tests

class ByteIdentity(unittest.TestCase):
    def test_fixtures_reproduced_byte_for_byte(self):
        files = torch_files(FIXTURES)
        self.assertGreater(len(files), 190)
        with tempfile.TemporaryDirectory() as tmp:
            for src in files:
                dst = os.path.join(tmp, os.path.relpath(src, FIXTURES))
                tv.rewrite_file(src, dst, tv.Variant())
                self.assertEqual(read(src), read(dst), src)
        print(f"\n  {len(files)} fixture files reproduced byte for byte", file=sys.stderr)


class PicklerMatchesCPython(unittest.TestCase):
    def roundtrip(self, obj):
        data = pickle.dumps(obj, protocol=2)
        self.assertEqual(pt.Pickler().dumps(pt.parse(data)), data)

    def test_batches(self):
        for n in (0, 1, 2, 999, 1000, 1001, 2000, 2001):
            self.roundtrip([f"s{i}" for i in range(n)])
            self.roundtrip({f"k{i}": i for i in range(n)})
            self.roundtrip(collections.OrderedDict((f"k{i}", i) for i in range(n)))
            self.roundtrip(set(range(n)))

    def test_values_and_memo(self):
        shared, one = ("t", 1.5), "x"
        ints = [0, 1, 255, 256, 65535, 65536, -1, -128, -129, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**63, -2**63,
                2**64, 0x1950A86A20F9469CFC6C, -(2**2100), 2**2100]
        self.roundtrip([shared, shared, one, one, "x", "", "", "é\u20ac\U0001F600", None, True, False, 0.1, -0.0,
                        float("inf"), (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4, 5), b"", b"\x00\xff", ints,
                        [str(i) for i in range(400)], [str(i) for i in range(400)], argparse_namespace()])


def argparse_namespace():
    import argparse
    return argparse.Namespace(a=1, b=[2, 3], c={"d": None})


class SerializationId(unittest.TestCase):
    def test_ids_written_by_torch(self):
        # archive/{data.pkl,byteorder,version} of data_legacy_numpy in pytorch's
        # test/test_cpp_extensions_open_device_registration.py, with the CRCs of its descriptors
        crcs = 0
        for c in (0xEC86E4E3, 0x19E33D85, 0x55679ED1):
            crcs = tz.hash_combine(crcs, c)
        self.assertEqual(tz.serialization_id(["data.pkl", "byteorder", "version"], crcs),
                         "0636457737946401051300000027264370494161")
        # a torch 2.7+ state dict with 9 storages (14 records: the set rehashes from 13 to 29 buckets)
        names = ["data.pkl", ".format_version", ".storage_alignment", "byteorder"] + \
            [f"data/{i}" for i in range(9)] + ["version"]
        self.assertEqual(tz.serialization_id(names, 0)[:20], "01977860353369201443")

    def test_unordered_set_rehash_keeps_every_name(self):
        names = [f"data/{i}" for i in range(3000)]
        self.assertEqual(sorted(tz.unordered_set_order(names)), sorted(names))


VARIANTS = [
    dict(torch="2.0"),
    dict(torch="2.1"),
    dict(torch="2.6", crc=False),
    dict(torch="2.7"),
    dict(torch="2.7", alignment=4096, archive_prefix=True),
    dict(torch="2.7", legacy=True),
    dict(torch="1.13", legacy=True, zero_stage_enum="by-value"),
    dict(torch="2.4", optimizer="fused-adam", zero_stage_enum="by-value", ds_version="0.16.4"),
    dict(torch="2.7", optimizer="cpu-adam", crc=False, ds_version="0.19.5"),
]


class Variants(unittest.TestCase):
    def check_container(self, path, v):
        blob = read(path)
        if v.legacy:
            self.assertNotEqual(blob[:4], b"PK\x03\x04")
            self.assertEqual(blob[:14], b"\x80\x02\x8a\x0a" + tv.MAGIC_NUMBER.to_bytes(10, "little"))
            return
        recs = records_of(path)
        top = "archive" if v.archive_prefix else os.path.basename(path).rsplit(".", 1)[0]
        names = [n.split("/", 1)[1] for n, *_ in recs]
        self.assertTrue(all(n.startswith(top + "/") for n, *_ in recs))
        keys = [str(i) for i in range(sum(n.startswith("data/") for n in names))]
        if v.torch < (2, 7):
            keys.sort()
        want = ["data.pkl"] + ([".format_version", ".storage_alignment"] if v.torch >= (2, 7) else []) + \
            (["byteorder"] if v.torch >= (2, 1) else []) + [f"data/{k}" for k in keys] + ["version"] + \
            ([".data/serialization_id"] if v.torch >= (2, 1) else [])
        self.assertEqual(names, want, path)
        z = zipfile.ZipFile(io.BytesIO(blob))
        for (name, offset, size, crc, flags) in recs:
            self.assertEqual(offset % v.alignment, 0, name)
            self.assertEqual(flags, 0x0808 if size else 0x0800, name)
            if v.crc:
                self.assertEqual(z.read(name), blob[offset:offset + size], name)  # zipfile checks the CRC
            else:
                self.assertEqual(crc, 0, name)
        if v.torch >= (2, 7):
            self.assertEqual(blob[recs[2][1]:recs[2][1] + recs[2][2]], str(v.alignment).encode())
        if v.torch >= (2, 1):
            combined = 0
            for _, _, size, crc, _ in recs[:-1]:
                if size:
                    combined = tz.hash_combine(combined, crc)
            sid_offset, sid_size = recs[-1][1:3]
            self.assertEqual(blob[sid_offset:sid_offset + sid_size].decode(),
                             tz.serialization_id(names[:-1], combined))

    def check_ds_ids(self, path, v):
        if v.legacy or v.torch < (2, 0):
            return
        root = pt.parse(first_record(read(path)))
        for d in pt.walk(root):
            groups = d.get("fp32_flat_groups") if isinstance(d, pt.Dct) else None
            for t in groups.items if groups is not None else []:
                self.assertTrue(pt.is_glb(t.func, pt.REBUILD_FROM_TYPE))
                func, cls, args, state = t.args.items
                self.assertEqual((func.name, cls.module, cls.name, len(args.items)),
                                 ("_rebuild_tensor_v2", "torch", "Tensor", 6))
                self.assertEqual(state.keys(), ["ds_id"])
                self.assertRegex(state.get("ds_id").v, r"^\d+_\d+$")

    def test_variants_load_and_compare(self):
        files = torch_files(FIXTURES)
        with tempfile.TemporaryDirectory() as tmp:
            for kw in VARIANTS:
                v = tv.Variant(**kw)
                with self.subTest(**kw):
                    for src in files:
                        dst = os.path.join(tmp, os.path.relpath(src, FIXTURES))
                        tv.rewrite_file(src, dst, v)
                        self.check_container(dst, v)
                        self.check_ds_ids(dst, v)
                        same(expected(load(src), v), load(dst), os.path.relpath(src, FIXTURES))

    def test_ds_ids_are_the_params_ds_ids(self):
        ms = tv.read_torch_zip(os.path.join(os.path.dirname(OPTIM), "zero_pp_rank_0_mp_rank_00_model_states.pt"))[0]
        # what DeepSpeed 0.14.5 gives engine.optimizer.fp32_partitioned_groups_flat[i].ds_id for this model at
        # 4 ranks (printed by a run of the oracle's TrickyNet with its ds_config)
        ids = tv.ds_id_finder(ms)
        self.assertEqual([ids(i) for i in range(6)], ["1_2", "5_5", "9_9", "0_6", "10_12", "13_13"])


class RealTorchOracle(unittest.TestCase):
    """torch 1.13's own writers on the loaded objects, changed as the newer writer holds them."""

    def setUp(self):
        self.saved_reduce = torch.Tensor.__reduce_ex__

    def tearDown(self):
        torch.Tensor.__reduce_ex__ = self.saved_reduce

    @staticmethod
    def torch2_reduce_ex(self, proto):
        """torch/_tensor.py Tensor.__reduce_ex__ of torch >= 2.0; `_get_obj_state` calls __getstate__,
        which Python 3.11's object has (the instance __dict__, or None when it is empty)."""
        state = self.__getstate__()
        if type(self) is torch.Tensor and not state:
            return self._reduce_ex_internal(proto)
        func, args = self._reduce_ex_internal(proto)
        return (_rebuild_from_type_v2, (func, type(self), args, state))

    def mine(self, src, **kw):
        with tempfile.TemporaryDirectory() as tmp:
            dst = os.path.join(tmp, os.path.basename(src))
            tv.rewrite_file(src, dst, tv.Variant(**kw))
            return read(dst)

    @staticmethod
    def regroup(groups, keys, extra=()):
        """Rebuilds groups as add_param_group would, reusing the loaded key objects (interned names)."""
        for i, g in enumerate(groups):
            names = {k: k for k in g}
            new = expected_adamw_group(g, keys)
            out = {names.get(k, k): val for k, val in new.items()}
            for k, val in extra:
                out[k] = val
            out[names["params"]] = g["params"]
            groups[i] = out

    def real_data_pkl(self, obj):
        buf = io.BytesIO()
        torch.save(obj, buf)
        return first_record(buf.getvalue())

    def test_torch2_pickles_ds_id_and_adamw_27(self):
        for src in (OPTIM, os.path.join(TRICKY, "expected", "global_step4_universal", "zero", "optimizer_state.pt")):
            obj = load(src)
            osd = obj if "fp32_flat_groups" in obj else obj["optimizer_state_dict"]  # universal: top level
            ids = tv.ds_id_finder(tv.model_states_near(src))
            for i, t in enumerate(osd["fp32_flat_groups"]):
                t.ds_id = ids(i)
            for groups in {id(sd["param_groups"]): sd["param_groups"] for sd in (osd["optimizer_state_dict"], osd)
                           if "param_groups" in sd}.values():
                self.regroup(groups, ADAMW_27)
            torch.Tensor.__reduce_ex__ = self.torch2_reduce_ex
            real = self.real_data_pkl(obj)
            torch.Tensor.__reduce_ex__ = self.saved_reduce
            mine = self.mine(src, torch="2.7")
            self.assertEqual(first_record(mine), real, src)

    def test_fused_adam_and_enum_by_value(self):
        obj = load(OPTIM)
        inner = obj["optimizer_state_dict"]["optimizer_state_dict"]
        self.regroup(inner["param_groups"], FUSED_ADAM, extra=[("step", 0)])
        for s in inner["state"].values():
            s["step"] = int(s["step"].item())
        by_name = ZeroStageEnum.__reduce_ex__
        ZeroStageEnum.__reduce_ex__ = lambda self, proto: (self.__class__, (self._value_,))  # CPython <= 3.10
        try:
            real = self.real_data_pkl(obj)
        finally:
            ZeroStageEnum.__reduce_ex__ = by_name
        mine = self.mine(OPTIM, optimizer="fused-adam", zero_stage_enum="by-value")
        self.assertEqual(first_record(mine), real)

    def test_legacy_save(self):
        saved = tv.heap_address
        try:
            for src in (OPTIM, os.path.join(FIXTURES, "z3_bf16_ws3", "checkpoint", "global_step4",
                                            "zero_pp_rank_2_mp_rank_00_model_states.pt"),
                        os.path.join(FIXTURES, "z3_fp32_ws2", "zero_to_fp32", "pytorch_model.bin")):
                obj, order = load(src), []

                class FirstSeen(pickle.Pickler):  # the storages in pickling order, as _legacy_save meets them
                    def persistent_id(self, x):
                        if isinstance(x, torch.storage.TypedStorage):
                            if x._storage._cdata not in order:
                                order.append(x._storage._cdata)
                            return "s"
                        return None

                FirstSeen(io.BytesIO(), protocol=2).dump(obj)
                real = io.BytesIO()
                torch.save(obj, real, _use_new_zipfile_serialization=False)
                tv.heap_address = lambda k: order[k]
                self.assertEqual(self.mine(src, legacy=True), real.getvalue(), src)
        finally:
            tv.heap_address = saved


class Cli(unittest.TestCase):
    def test_rewrite_and_file(self):
        script = os.path.join(HERE, "torch_variants.py")
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(FIXTURES, "z3_fp32_ws2", "checkpoint")
            r = subprocess.run([sys.executable, script, "rewrite", src, os.path.join(tmp, "ckpt"), "--torch", "2.7",
                                "--alignment", "4096", "--ds-version", "0.18.2"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("19 torch.save files rewritten", r.stdout)
            with open(os.path.join(tmp, "ckpt", "latest")) as f:
                self.assertEqual(f.read(), "global_step4")
            out = os.path.join(tmp, "one.pt")
            r = subprocess.run([sys.executable, script, "file", OPTIM, out, "--torch", "2.1", "--archive-prefix"])
            self.assertEqual(r.returncode, 0)
            self.assertEqual(first_record(read(out))[:2], b"\x80\x02")
            with zipfile.ZipFile(out) as z:
                self.assertTrue(z.namelist()[0].startswith("archive/"))
            r = subprocess.run([sys.executable, script, "file", OPTIM, out, "--torch", "2.5", "--no-crc"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("needs torch >= 2.6", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
