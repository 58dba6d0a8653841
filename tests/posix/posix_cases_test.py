#!/usr/bin/python3
"""Named POSIX cases of the writable mount, each one a behaviour pjdfstest
caught or the overlay's code was written for (git log: 883df09 "POSIX
semantics in the overlay core (pjdfstest)", 85d4950, f93321f "pjdfstest
chmod/12"; the comments of src/overlay/ and src/fuse/operations.cc), or
one tests/posix/differential_test.py found.

Each case runs in a fresh writable ucfs mount of the fixture at its own
world size, shared with -o allow_other, the daemon root with umask 077 (as
posix_testing.UcfsMount starts it). Where the case is a property of any
local file system it runs on kernel overlayfs and on tmpfs over the same
tree too, so the expectation itself is held to the kernel's: a case that
fails there is wrong, not ucfs. Other users are posix_testing.USERS,
switched to in forked children (setgroups/setresgid/setresuid, umask).

Cases named in KNOWN_FAILING are bugs found and not yet fixed: they run,
and their failure on ucfs is reported but does not fail the test; should
one pass, the test fails until it is taken off the list. --strict fails
on them.

The cases are in posix_cases_modes.py (set-id bits, owners, sticky
directories), posix_cases_names.py (names, links, renames, directories) and
posix_cases_files.py (open files, times, xattrs, special files, read-only
parts); what they share in posix_cases_lib.py.

usage: posix_cases_test.py UCFS_BIN FIXTURES_DIR [--strict] [--targets=ucfs,...] [CASE...]
  --targets=K,...  run on these of ucfs, overlayfs, tmpfs only (all three by default)
Ends with the line "N passed, M failed".
"""
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import posix_testing as pt  # noqa: E402

# The cases, registered in posix_cases_lib.CASES as they are imported.
import posix_cases_modes  # noqa: E402,F401
import posix_cases_names  # noqa: E402,F401
import posix_cases_files  # noqa: E402,F401
from posix_cases_lib import CASES, EVERYWHERE, Target  # noqa: E402

# Bugs found by differential_test.py (its KNOWN_BUGS has each one's
# reproducer, and says why it stays): cases that fail on ucfs until they are
# fixed.
KNOWN_FAILING = {
    "chown_nothing_by_non_member_of_setgid_file": "setgid-chown-nothing",
}


# --- Running ----------------------------------------------------------------------


class Env:
    def __init__(self, ucfs, fixtures, work):
        self.ucfs, self.work = ucfs, work
        self.lower = pt.Lower(ucfs, fixtures, work)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    strict = "--strict" in sys.argv or os.environ.get("UCFS_POSIX_STRICT") == "1"
    kinds = set(EVERYWHERE)
    for a in sys.argv[1:]:
        if a.startswith("--targets="):
            kinds = set(a.split("=", 1)[1].split(","))
    ucfs, fixtures, wanted = os.path.realpath(args[0]), os.path.realpath(args[1]), set(args[2:])
    unknown = wanted - {name for name, *_ in CASES}
    assert not unknown, f"no such case: {sorted(unknown)}"
    assert set(KNOWN_FAILING) <= {name for name, *_ in CASES}
    os.umask(0o022)
    work = pt.new_work_dir("ucfs_posix_cases_")
    passed = failed = known = 0
    started = time.time()
    try:
        env = Env(ucfs, fixtures, work)
        for name, targets, origin, fn in CASES:
            if wanted and name not in wanted:
                continue
            for kind in (k for k in targets if k in kinds):
                label = f"{name} [{kind}]"
                error = None
                try:
                    t = Target(kind, env)
                    try:
                        fn(t)
                    finally:
                        t.close()
                except Exception as e:  # noqa: BLE001 - reported below
                    import traceback
                    error = traceback.format_exc()
                    error_line = f"{type(e).__name__}: {e}"
                bug = KNOWN_FAILING.get(name) if kind == "ucfs" else None
                if error is None and bug and not strict:
                    failed += 1
                    print(f"FAILED: {label} passes: take it off KNOWN_FAILING ({bug} is fixed?)")
                elif error is None:
                    passed += 1
                    print(f"ok: {label}")
                elif bug and not strict:
                    known += 1
                    print(f"known bug: {label} ({bug}): {error_line}")
                else:
                    failed += 1
                    print(f"FAILED: {label} ({origin})\n{error}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(CASES)} cases; {known} known bugs seen; {time.time() - started:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
