#!/usr/bin/env python3
"""What the overlay and export write goes through one seam (WriteEnv,
include/ucfs/base/write_env.h), so that tests can fail any of it: no file of
src/overlay/ (but its tests) nor src/tools/export.cc calls a system call
that writes — write(2), renameat2(2), fsync(2), mkdirat(2), fchmod(2) ... —
or opens a file to write, or changes the disk through std::filesystem.

    write_seam_test.py [SOURCE_DIR]     checks SOURCE_DIR (default: this repo)

Each raw call is reported as FILE:LINE: the call. The checker also runs over
small texts of its own, so that a checker that stopped seeing them fails too.
"""
import os
import re
import sys
import unittest

WRITES = (
    "write pwrite pwritev writev rename renameat renameat2 fsync fdatasync syncfs sync_file_range "
    "ftruncate truncate fallocate posix_fallocate mkdir mkdirat mknod mknodat unlink unlinkat rmdir "
    "link linkat symlink symlinkat chmod fchmod fchmodat chown fchown fchownat lchown utimensat "
    "futimens utimes copy_file_range setxattr fsetxattr lsetxattr removexattr fremovexattr "
    "lremovexattr creat"
).split()
RAW_WRITE = re.compile(r"(?<![\w.>])::\s*(" + "|".join(WRITES) + r")\s*\(")
RAW_OPEN = re.compile(r"(?<![\w.>])::\s*(open|openat|openat2)\s*\(")
WRITE_FLAGS = re.compile(r"\bO_(CREAT|WRONLY|RDWR|TRUNC|TMPFILE|APPEND)\b")
FILESYSTEM_WRITE = re.compile(
    r"\b(?:std::filesystem|fs)::(create_directory|create_directories|remove|remove_all|rename|"
    r"resize_file|copy|copy_file|permissions|last_write_time|create_symlink|create_hard_link|"
    r"create_directory_symlink)\s*\(")


def without_comments(text):
    """`text` with its comments blanked, lines kept (string literals are left:
    none of ours holds a call)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def call_text(text, start):
    """The call beginning at `start` up to its closing parenthesis."""
    depth = 0
    for i in range(text.index("(", start), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    return text[start:]


def raw_writes(name, text):
    text = without_comments(text)
    found = []

    def where(pos):
        return f"{name}:{text.count(chr(10), 0, pos) + 1}"

    for m in RAW_WRITE.finditer(text):
        found.append(f"{where(m.start())}: ::{m.group(1)}(...)")
    for m in RAW_OPEN.finditer(text):
        call = call_text(text, m.start())
        if WRITE_FLAGS.search(call):
            found.append(f"{where(m.start())}: {' '.join(call.split())}")
    for m in FILESYSTEM_WRITE.finditer(text):
        found.append(f"{where(m.start())}: {m.group(0)}...)")
    return found


def sources(root):
    overlay = os.path.join(root, "src", "overlay")
    for f in sorted(os.listdir(overlay)):
        if f.endswith((".cc", ".h")) and not f.endswith("_test.cc"):
            yield os.path.join("src", "overlay", f)
    yield os.path.join("src", "tools", "export.cc")


def check(root):
    problems = []
    for rel in sources(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            problems += raw_writes(rel, f.read())
    return problems


class CheckerFindsRawWrites(unittest.TestCase):
    def test_each_kind(self):
        text = """
            // ::write(fd, "in a comment", 1) is no call
            UniqueFd fd(::openat(dir, name.c_str(),
                                 O_WRONLY | O_CREAT, 0644));
            if (::renameat2(a, b, c, d, 0) != 0) return;
            ::fsync(fd);
            fs::create_directories(dir, ec);
            UniqueFd read(::openat(dir, ".", O_RDONLY | O_DIRECTORY));
            writer.Write(fd, data, 0);  /* ::ftruncate(fd, 0) in a comment */
            st.write(x);
        """
        found = raw_writes("x.cc", text)
        self.assertEqual(len(found), 4, found)
        self.assertTrue(found[0].startswith("x.cc:5: ::renameat2"), found)
        self.assertTrue(found[1].startswith("x.cc:6: ::fsync"), found)
        self.assertIn("x.cc:3: ::openat(dir, name.c_str(), O_WRONLY | O_CREAT, 0644)", found)
        self.assertTrue(any("fs::create_directories" in x for x in found), found)


class ThisTreeWritesThroughTheSeam(unittest.TestCase):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def test_no_raw_writes_in_the_overlay_and_export(self):
        files = list(sources(self.root))
        self.assertGreater(len(files), 8, "found too few sources to be this tree")
        problems = check(self.root)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        ThisTreeWritesThroughTheSeam.root = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
