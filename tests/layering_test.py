#!/usr/bin/env python3
"""The direction of includes is a rule (src/README.md): a layer includes its
own headers and those of the layers below it, never one above.

    base < vfs < codec < checkpoint < views < overlay < tools < mount < fuse < cli

Every `#include "..."` of src/ and include/ must name a file that exists: a
public header (ucfs/<layer>/x.h, include/), a private one of a layer
(<layer>/x.h, src/), or, from a *_test.cc only, the test support in tests/.
A layer's own test support (<layer>/x_test_support.h) counts as a test: it may
include tests/' support, and only tests may include it.
Public headers include public headers only (they are what the core exports).
Of the system's libraries, libfuse belongs to the FUSE adapter, CLI11 to the
command line, LMDB to the index (src/checkpoint/index.cc), and LibTorch to
none of them (tests/ alone).

    layering_test.py [SOURCE_DIR]     checks SOURCE_DIR (default: this repo)

Each broken rule is reported as FILE:LINE: the include and the rule it breaks.
The checker also runs over small trees of its own that break each rule, so
that a checker that stopped seeing them fails too.
"""
import os
import re
import shutil
import sys
import tempfile
import unittest

LAYERS = ["base", "vfs", "codec", "checkpoint", "views", "overlay", "tools", "mount", "fuse", "cli"]
RANK = {layer: i for i, layer in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# <system header prefix>: the files (relative to the root) that may include it.
SYSTEM_OWNERS = {
    "fuse": lambda rel: layer_of(rel) == "fuse",
    "CLI/": lambda rel: layer_of(rel) == "cli",
    "lmdb.h": lambda rel: rel in ("src/checkpoint/index.cc",),
    "torch/": lambda rel: False,
    "ATen/": lambda rel: False,
}


def layer_of(rel):
    """The layer a file of src/ or include/ucfs/ belongs to, from its path."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["include", "ucfs"] and len(parts) > 3:
        return parts[2]
    return None


def sources(root):
    for top in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith((".cc", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def check(root):
    """Every broken rule under root, as 'FILE:LINE: message' strings."""
    problems = []
    for rel in sorted(sources(root)):
        layer = layer_of(rel)
        if layer not in RANK:
            problems.append(f"{rel}: not in a layer's folder (src/<layer>/ or include/ucfs/<layer>/, "
                            f"layers: {', '.join(LAYERS)})")
            continue
        public = rel.startswith("include/")
        is_test = rel.endswith(("_test.cc", "_test_support.h"))
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                where = f"{rel}:{number}: #include {kind}{name}{'>' if kind == '<' else kind}"
                if kind == "<":
                    for prefix, allowed in SYSTEM_OWNERS.items():
                        if name.startswith(prefix) and not allowed(rel):
                            problems.append(f"{where}: {prefix.rstrip('/.h')} may not be used here")
                    continue
                first = name.split("/")[0]
                if first == "ucfs" and name.count("/") == 2:
                    target_layer = name.split("/")[1]
                    exists = os.path.isfile(os.path.join(root, "include", name))
                elif first in RANK and name.count("/") == 1:
                    target_layer = first
                    exists = os.path.isfile(os.path.join(root, "src", name))
                    if exists and public:
                        problems.append(f"{where}: a public header includes a private one of src/")
                        continue
                    if name.endswith("_test_support.h") and not is_test:
                        problems.append(f"{where}: test support, included outside a *_test.cc")
                        continue
                elif "/" not in name and os.path.isfile(os.path.join(root, "tests", name)):
                    if not is_test:
                        problems.append(f"{where}: test support, included outside a *_test.cc")
                    continue
                else:
                    problems.append(f"{where}: names no header of a layer "
                                    "(ucfs/<layer>/x.h or <layer>/x.h)")
                    continue
                if not exists:
                    problems.append(f"{where}: no such header")
                elif target_layer not in RANK:
                    problems.append(f"{where}: {target_layer} is not a layer")
                elif RANK[target_layer] > RANK[layer]:
                    problems.append(f"{where}: {layer} is below {target_layer} and may not include it "
                                    f"({' < '.join(LAYERS)})")
    return problems


class CheckerFindsBrokenRules(unittest.TestCase):
    """The checker over small trees that each break one rule."""

    def tree(self, files):
        root = tempfile.mkdtemp(prefix="layering_test.")
        self.addCleanup(shutil.rmtree, root)
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        return root

    BASE = {
        "include/ucfs/base/status.h": "#pragma once\n",
        "include/ucfs/codec/zip.h": '#include "ucfs/base/status.h"\n',
        "include/ucfs/vfs/view.h": '#include "ucfs/base/status.h"\n',
        "include/ucfs/views/universal_view.h": '#include "ucfs/vfs/view.h"\n'
                                               '#include "ucfs/codec/zip.h"\n',
        "src/base/byte_order.h": "#pragma once\n",
        "src/codec/zip.cc": '#include "ucfs/codec/zip.h"\n#include "base/byte_order.h"\n',
        "src/fuse/server.h": '#include <fuse3/fuse_lowlevel.h>\n#include "ucfs/vfs/view.h"\n',
        "tests/test_support.h": "#pragma once\n",
        "src/codec/zip_test.cc": '#include "test_support.h"\n#include "ucfs/codec/zip.h"\n',
    }

    def problems(self, extra):
        return check(self.tree({**self.BASE, **extra}))

    def test_a_tree_that_keeps_the_rules_passes(self):
        self.assertEqual(self.problems({}), [])

    def test_an_include_upwards_is_named_with_its_file_and_line(self):
        p = self.problems({"src/codec/pickle.cc": '#include "ucfs/base/status.h"\n'
                                                 '#include "ucfs/views/universal_view.h"\n'})
        self.assertEqual(len(p), 1, p)
        self.assertIn('src/codec/pickle.cc:2: #include "ucfs/views/universal_view.h"', p[0])
        self.assertIn("codec is below views", p[0])

    def test_the_view_machinery_knows_no_torch(self):
        # vfs/ (the tree, contents, sources) sits below the codecs: a
        # layout's torch files belong in views/.
        p = self.problems({"src/vfs/view.cc": '#include "ucfs/codec/zip.h"\n'})
        self.assertEqual(len(p), 1, p)
        self.assertIn("vfs is below codec", p[0])

    def test_a_private_header_of_a_higher_layer(self):
        p = self.problems({"src/base/env.cc": '#include "fuse/server.h"\n'})
        self.assertEqual(len(p), 1, p)
        self.assertIn("base is below fuse", p[0])

    def test_a_public_header_including_a_private_one(self):
        p = self.problems({"include/ucfs/codec/pickle.h": '#include "base/byte_order.h"\n'})
        self.assertEqual(len(p), 1, p)
        self.assertIn("a public header includes a private one", p[0])

    def test_libfuse_and_libtorch_outside_their_layers(self):
        p = self.problems({"src/vfs/view.cc": "#include <fuse3/fuse_lowlevel.h>\n",
                           "src/codec/pickle.cc": "#include <torch/torch.h>\n"})
        self.assertEqual(len(p), 2, p)
        self.assertTrue(any("src/vfs/view.cc:1" in x and "fuse" in x for x in p), p)
        self.assertTrue(any("src/codec/pickle.cc:1" in x and "torch" in x for x in p), p)

    def test_lmdb_outside_the_index(self):
        p = self.problems({"src/checkpoint/checkpoint.cc": "#include <lmdb.h>\n"})
        self.assertEqual(len(p), 1, p)

    def test_test_support_outside_a_test(self):
        p = self.problems({"src/codec/pickle.cc": '#include "test_support.h"\n'})
        self.assertEqual(len(p), 1, p)
        self.assertIn("outside a *_test.cc", p[0])

    def test_a_layers_test_support_is_for_tests_only(self):
        support = {"src/codec/zip_test_support.h": '#include "test_support.h"\n#include "ucfs/codec/zip.h"\n'}
        self.assertEqual(self.problems({**support, "src/codec/zip2_test.cc": '#include "codec/zip_test_support.h"\n'}),
                         [])
        p = self.problems({**support, "src/codec/pickle.cc": '#include "codec/zip_test_support.h"\n'})
        self.assertEqual(len(p), 1, p)
        self.assertIn("src/codec/pickle.cc:1", p[0])
        self.assertIn("outside a *_test.cc", p[0])

    def test_a_missing_header_an_unlayered_path_and_a_file_outside_the_layers(self):
        p = self.problems({"src/codec/a.cc": '#include "ucfs/codec/nothing.h"\n',
                           "src/codec/b.cc": '#include "ucfs/zip.h"\n',
                           "src/stray.cc": "\n"})
        self.assertEqual(len(p), 3, p)
        self.assertTrue(any("no such header" in x for x in p), p)
        self.assertTrue(any("names no header of a layer" in x for x in p), p)
        self.assertTrue(any(x.startswith("src/stray.cc: not in a layer") for x in p), p)


class ThisTreeKeepsTheRules(unittest.TestCase):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def test_every_include_of_src_and_include_points_down(self):
        files = list(sources(self.root))
        self.assertGreater(len(files), 50, "found too few sources to be this tree")
        problems = check(self.root)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        ThisTreeKeepsTheRules.root = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
