#!/usr/bin/python3
"""Writes the Python-made pickles the pickle codec tests read back.

Run from this directory; the outputs are committed so the tests need no
Python. Protocol 2 is what torch.save writes; the protocol-4 files only
have to parse.
"""
import collections
import pickle

cases = {
    "ints": [0, 1, 255, 256, 65535, 65536, -1, -256, 2**31 - 1, -2**31, 2**31, -2**31 - 1,
             2**63 - 1, -2**63, 2**64, -2**70, 10**30, True, False, None],
    "floats": [0.0, -0.0, 1.5, 1e300, float("inf"), float("-inf"), 3.4028234663852886e38],
    "strings": ["", "a", "\u00e9t\u00e9", "x" * 300, "line\nbreak"],
    "bytes": [b"", b"\x00\x01\xff", bytes(range(256)) * 2],
    "batches": {"list": list(range(2500)), "list1000": list(range(1000)),
                "list1001": list(range(1001)), "dict": {str(i): i for i in range(1001)},
                "dict1000": {str(i): 0 for i in range(1000)}, "one": [7], "set": {1, 2, 3},
                "frozen": frozenset({4}), "single": {"k": None}, "set1": {9},
                "set1000": set(range(1000)),
                "odict1000": collections.OrderedDict((str(i), 0) for i in range(1000)),
                "odict1001": collections.OrderedDict((str(i), 0) for i in range(1001))},
    "memo": [str(i) for i in range(400)] + ["shared"] * 3,
    "shared": (lambda l: {"a": l, "b": l, "t": (l, l)})([1, 2, 3]),
    "ordered": collections.OrderedDict([("x", 1), ("y", [1.0, 2.0]), ("z", collections.OrderedDict())]),
    "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), ((),)],
    "nested": [[[[[[[[[[{"deep": (1,)}]]]]]]]]]],
}

for name, value in cases.items():
    with open(f"{name}.p2.pkl", "wb") as f:
        pickle.dump(value, f, protocol=2)
    with open(f"{name}.p4.pkl", "wb") as f:
        pickle.dump(value, f, protocol=4)
