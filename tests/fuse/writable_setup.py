"""What the writable-mount tests (writable_mount_test.py, writable_posix_test.py) mount: the reshard view of one
fixture at N = 3 with an upper directory, without the per-node cache. Import after tests/tools is on sys.path."""
import os

import mount_testing

FIXTURE = "z3_fp32_ws2"
N = 3
TAG = "global_step4"


def source_of(fixtures):
    return os.path.join(fixtures, FIXTURE, "checkpoint")


def mount(ucfs, source, upper, *extra):
    """`ucfs mount --world-size 3 --upper UPPER SOURCE MNT`, plus `extra` (a mount_testing.Mount)."""
    return mount_testing.Mount(ucfs, source, "latest", "--no-cache", "--world-size", str(N), "--upper", upper,
                               *extra)
