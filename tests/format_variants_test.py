#!/usr/bin/python3
"""ucfs on checkpoints as torch 2.x, newer DeepSpeed and other Pythons write them.

tests/tools/torch_variants.py re-writes a fixture checkpoint as another
writer would (it reproduces the torch 1.13 fixtures byte for byte; see its
own test). For each variant this test runs `ucfs inspect` and `ucfs verify`
and exports the universal, reshard and consolidated views, then checks every
exported file against the same view of the original fixture:

- the values: torch.load of each file equals torch.load of the original
  fixture's file re-written as that variant (tensors by dtype, shape and
  bytes; everything else by value);
- the bytes: the universal files and pytorch_model.bin, which ucfs lays out
  as the torch that wrote the checkpoint would, are byte-identical to the
  original fixture's export re-written as that variant (with real CRCs, or
  with the zeros of a compute_crc32=False writer);
- the model-states files the universal view passes through are the
  variant's own.

usage: format_variants_test.py UCFS REPO_ROOT
"""
import os
import subprocess
import sys
import tempfile

UCFS, REPO = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
import deepspeed_stand_ins  # noqa: E402
import torch_variants as tv  # noqa: E402
from mount_testing import Results, files_below  # noqa: E402
from torch_compare import same_value  # noqa: E402

deepspeed_stand_ins.install()
import torch  # noqa: E402
import zipfile  # noqa: E402

# ucfs's reshard and consolidated files carry CRC 0, as torch writes them with
# compute_crc32 off; torch.load never checks CRCs, zipfile (which
# torch_variants reads with) always does. The bytes are compared here anyway.
zipfile.ZipExtFile._update_crc = lambda self, data: None

FIXTURES = os.path.join(REPO, "tests", "data", "fixtures")
# (name, torch_variants options). Together they cover every container
# layout (1.6-2.0, 2.1-2.6, >= 2.7 with 64 and 4096 alignment, CRCs off,
# the `archive/` prefix, the legacy format) and every pickle-level form
# (ds_id on the fp32 flats, AdamW / FusedAdam / CPUAdam groups, int steps,
# ZeroStageEnum(3), checkpoint_parallel_dimensions).
VARIANTS = [
    ("torch2.1", dict(torch="2.1")),
    ("torch2.6_nocrc", dict(torch="2.6", crc=False)),
    ("torch2.7", dict(torch="2.7")),
    ("torch2.7_align4096_archive", dict(torch="2.7", alignment=4096, archive_prefix=True)),
    ("torch2.4_legacy", dict(torch="2.4", legacy=True)),
    ("fused_adam_enum_by_value", dict(torch="2.3", optimizer="fused-adam", zero_stage_enum="by-value")),
    ("cpu_adam_ds0.19.5", dict(torch="2.8", optimizer="cpu-adam", ds_version="0.19.5")),
]
CASES = [("z3_bf16_ws3", 4), ("z3_tricky_fp32_ws4", 3)]


def expected_format(options):
    """What `ucfs inspect` says of the container a variant is written in."""
    if options.get("legacy"):
        return "torch legacy (non-zip) format"
    version = tuple(int(x) for x in options["torch"].split("."))
    if version >= (2, 7):
        alignment = options.get("alignment", 64)
        return "torch >= 2.7 zip" + (f", {alignment}-byte alignment" if alignment != 64 else "")
    return "torch 2.1-2.6 zip" if version >= (2, 1) else "torch 1.6-2.0 zip"


def run(*args):
    p = subprocess.run([UCFS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise AssertionError(f"ucfs {' '.join(args)}: exit {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


def check_export(ucfs_out, reference_out, options, byte_identical, crc):
    """Every file of ucfs's export of the variant against the original's export re-written as the variant."""
    names = files_below(ucfs_out)
    assert names == files_below(reference_out), f"{names} vs {files_below(reference_out)}"
    # The layout ucfs writes: the variant's, but never legacy and always the file's own stem.
    layout = tv.Variant(**{k: v for k, v in options.items() if k not in ("legacy", "archive_prefix", "crc")})
    layout.crc = crc
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            mine, ref = os.path.join(ucfs_out, name), os.path.join(reference_out, name)
            if name.endswith("_universal/" + name.rsplit("/", 1)[-1]) and "model_states" in name:
                continue  # passed through: checked by the caller
            if not name.endswith((".pt", ".bin")):
                assert open(mine, "rb").read() == open(ref, "rb").read(), name
                continue
            expected = os.path.join(tmp, name)
            if name.endswith(".bin") and options.get("ds_version", "0.14.5") >= "0.15.3":
                # zero_to_fp32 of DeepSpeed >= 0.15.3 saves a plain dict, not an OrderedDict.
                plain = os.path.join(tmp, "plain", os.path.basename(name))
                os.makedirs(os.path.dirname(plain), exist_ok=True)
                torch.save(dict(torch.load(ref, map_location="cpu")), plain)
                ref = plain
            tv.rewrite_file(ref, expected, layout)
            same_value(torch.load(mine, map_location="cpu"), torch.load(expected, map_location="cpu"), name)
            if byte_identical(name) and open(mine, "rb").read() != open(expected, "rb").read():
                raise AssertionError(f"{name}: not byte-identical to torch {options.get('torch')}'s layout")


def main():
    results = Results()
    with tempfile.TemporaryDirectory() as tmp:
        for fixture, n in CASES:
            original = os.path.join(tmp, fixture)
            subprocess.run(["cp", "-r", os.path.join(FIXTURES, fixture, "checkpoint"), original], check=True)
            # Only the rank files: the fixtures also hold DeepSpeed's own universal output.
            for extra in ("latest_universal", "global_step4_universal"):
                subprocess.run(["rm", "-rf", os.path.join(original, extra)], check=True)
            ref = {}
            for mode, flags in (("universal", ["--crc"]), ("reshard", ["--crc", "--world-size", str(n)]),
                                ("fp32", ["--crc", "--fp32"]), ("reshard_nocrc", ["--world-size", str(n)]),
                                ("universal_nocrc", []), ("fp32_nocrc", ["--fp32"])):
                ref[mode] = os.path.join(tmp, f"{fixture}.ref.{mode}")
                run("export", "--no-cache", *flags, original, ref[mode])
            inspect_original = run("inspect", original)

            for variant, options in VARIANTS:
                ckpt = os.path.join(tmp, f"{fixture}.{variant}")
                tv.rewrite_tree(original, ckpt, tv.Variant(**options))
                crc = [] if options.get("crc", True) is False else ["--crc"]
                suffix = "_nocrc" if not crc else ""

                def inspect_verify(ckpt=ckpt):
                    got = run("inspect", ckpt).replace(ckpt, "CKPT")
                    want = inspect_original.replace(original, "CKPT")
                    lines = [(g, w) for g, w in zip(got.splitlines(), want.splitlines()) if g != w]
                    # Only the DeepSpeed version and the container format may differ.
                    assert all(g.startswith(("DeepSpeed", "format")) for g, _ in lines), lines
                    assert f"\nformat      {expected_format(options)}\n" in got, got
                    assert len(got.splitlines()) == len(want.splitlines())
                    run("verify", ckpt)
                results.check(f"{fixture} {variant}: inspect and verify", inspect_verify)

                def universal(ckpt=ckpt, variant=variant, options=options, crc=crc, suffix=suffix):
                    out = os.path.join(tmp, f"{fixture}.{variant}.universal")
                    run("export", "--no-cache", *crc, ckpt, out)
                    # The universal view passes the model-states files through: the variant's own.
                    tag_dir = os.path.join(ckpt, "global_step4")
                    for f in os.listdir(tag_dir):
                        if f.endswith("model_states.pt"):
                            passed = os.path.join(out, "global_step4_universal", f)
                            assert open(passed, "rb").read() == open(os.path.join(tag_dir, f), "rb").read(), f
                    check_export(out, ref["universal" + suffix], options, lambda name: not options.get("legacy"),
                                 crc=bool(crc))
                results.check(f"{fixture} {variant}: universal view", universal)

                def reshard(ckpt=ckpt, variant=variant, options=options, crc=crc, suffix=suffix):
                    out = os.path.join(tmp, f"{fixture}.{variant}.ws{n}")
                    run("export", "--no-cache", *crc, "--world-size", str(n), ckpt, out)
                    # DeepSpeed at N would tag its flats with other ds_ids: values only.
                    check_export(out, ref["reshard" + suffix], options, lambda name: False, crc=False)
                results.check(f"{fixture} {variant}: reshard view at N={n}", reshard)

                def fp32(ckpt=ckpt, variant=variant, options=options, crc=crc, suffix=suffix):
                    out = os.path.join(tmp, f"{fixture}.{variant}.fp32")
                    run("export", "--no-cache", *crc, "--fp32", ckpt, out)
                    check_export(out, ref["fp32" + suffix], options,
                                 lambda name: name.endswith(".bin") and not options.get("legacy"),
                                 crc=bool(crc))
                results.check(f"{fixture} {variant}: consolidated weights", fp32)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
