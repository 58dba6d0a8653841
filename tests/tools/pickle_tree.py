"""A pickle as a tree of stand-in nodes, and back: what the torch.save rewriters of the tests work on.

`parse` reads a pickle (protocol 2, as torch.save writes data.pkl) into Str, Tup, Lst, Dct, Glb, Obj and Pid
nodes without running anything from it, keeping the pickle's memo identity (a node referenced twice is one
object); `Pickler` writes a tree back as CPython's C pickler writes it at protocol 2 (Modules/_pickle.c
save_tuple, batch_list(_exact), batch_dict(_exact), save_long, memo_put), so an unchanged tree comes out byte
for byte. Below them, the tensors of a tree (torch._utils._rebuild_tensor_v2 calls, and
torch._tensor._rebuild_from_type_v2 around them).
"""
import pickletools
import struct


# ---------------------------------------------------------------- the pickle value tree

class Str:
    """A str, one node per pickled string object (memo identity = node identity)."""
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


class Tup:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class Lst:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class Dct:
    """An exact dict; items are [key, value] pairs in insertion order."""
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = [list(kv) for kv in items]

    def get(self, key):
        return next((v for k, v in self.items if isinstance(k, Str) and k.v == key), None)

    def keys(self):
        return [k.v if isinstance(k, Str) else k for k, _ in self.items]


class Glb:
    """GLOBAL module name; memoized by name, as pickle memoizes the one object the name denotes."""
    __slots__ = ("module", "name")

    def __init__(self, module, name):
        self.module, self.name = module, name


NO_STATE = object()


class Obj:
    """REDUCE (func, args) or NEWOBJ (cls, args), then APPENDS / SETITEMS of its list or dict items
    (save_reduce's listitems / dictitems iterators) and BUILD of `state`."""
    __slots__ = ("op", "func", "args", "listitems", "dictitems", "state")

    def __init__(self, op, func, args):
        self.op, self.func, self.args = op, func, args
        self.listitems, self.dictitems, self.state = [], [], NO_STATE


class Pid:
    """BINPERSID of a persistent-id tuple (a storage reference)."""
    __slots__ = ("tup",)

    def __init__(self, tup):
        self.tup = tup


def parse(data):
    """Parses a protocol-2 pickle into the tree above. Executes nothing: globals stay names."""
    stack, marks, memo = [], [], {}

    def pop_mark():
        i = marks.pop()
        items = stack[i:]
        del stack[i:]
        return items

    def add(items, pairs):  # APPEND(S) / SETITEM(S) on the object under them
        target = stack[-1]
        if isinstance(target, Obj):
            (target.dictitems if pairs else target.listitems).extend(items)
        elif isinstance(target, Dct if pairs else Lst):
            target.items.extend(items)
        else:
            raise ValueError(f"cannot add items to {type(target).__name__}")

    for op, arg, pos in pickletools.genops(data):
        name = op.name
        if name == "PROTO":
            if arg != 2:
                raise ValueError(f"protocol {arg}: only protocol-2 pickles are supported")
        elif name == "STOP":
            break
        elif name == "MARK":
            marks.append(len(stack))
        elif name == "BINUNICODE":
            stack.append(Str(arg))
        elif name in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "BINFLOAT"):
            stack.append(arg)
        elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
            stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
        elif name == "EMPTY_TUPLE":
            stack.append(Tup([]))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = stack[-n:]
            del stack[-n:]
            stack.append(Tup(items))
        elif name == "TUPLE":
            stack.append(Tup(pop_mark()))
        elif name == "EMPTY_LIST":
            stack.append(Lst([]))
        elif name == "EMPTY_DICT":
            stack.append(Dct([]))
        elif name in ("APPEND", "SETITEM"):
            items = stack[-1 - (name == "SETITEM"):]
            del stack[-len(items):]
            add([items] if name == "SETITEM" else items, pairs=name == "SETITEM")
        elif name in ("APPENDS", "SETITEMS"):
            items = pop_mark()
            add([list(kv) for kv in zip(items[::2], items[1::2])] if name == "SETITEMS" else items,
                pairs=name == "SETITEMS")
        elif name == "GLOBAL":
            module, gname = arg.split(" ", 1)
            stack.append(Glb(module, gname))
        elif name in ("REDUCE", "NEWOBJ"):
            args = stack.pop()
            stack.append(Obj(name, stack.pop(), args))
        elif name == "BUILD":
            state = stack.pop()
            if not isinstance(stack[-1], Obj):
                raise ValueError(f"BUILD on {type(stack[-1]).__name__} at {pos}")
            stack[-1].state = state
        elif name == "BINPERSID":
            stack.append(Pid(stack.pop()))
        elif name in ("BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        else:
            raise ValueError(f"unsupported opcode {name} at {pos}")
    if len(stack) != 1 or marks:
        raise ValueError("malformed pickle")
    return stack[0]


def walk(root):
    """Every node of the tree once (shared nodes once), parents before children."""
    seen, todo = set(), [root]
    while todo:
        x = todo.pop()
        if id(x) in seen or not isinstance(x, (Tup, Lst, Dct, Obj, Pid)):
            continue
        seen.add(id(x))
        yield x
        if isinstance(x, (Tup, Lst)):
            kids = x.items
        elif isinstance(x, Dct):
            kids = [c for kv in x.items for c in kv]
        elif isinstance(x, Obj):
            kids = [x.func, x.args, *x.listitems, *(c for kv in x.dictitems for c in kv)]
            kids += [] if x.state is NO_STATE else [x.state]
        else:
            kids = [x.tup]
        todo.extend(reversed(kids))


class Pickler:
    """Writes a tree as CPython's C pickler writes the objects it stands for, at protocol 2.
    `persistent(pid)` returns the node to save for a Pid (pickle's persistent_id); it may return fresh
    nodes, which are kept alive so that their ids are never reused within one pickle."""

    BATCHSIZE = 1000

    def __init__(self, persistent=None):
        self.persistent = persistent or (lambda pid: pid.tup)

    def dumps(self, root):
        self.out, self.memo = bytearray(b"\x80\x02"), {}
        self.save(root)
        self.out += b"."
        return bytes(self.out)

    def put(self, key, obj):
        i = len(self.memo)
        self.memo[key] = (i, obj)
        self.out += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)

    def save(self, x):
        out = self.out
        if x is None:
            out += b"N"
        elif x is True or x is False:
            out += b"\x88" if x else b"\x89"
        elif type(x) is int:
            if 0 <= x <= 0xFF:
                out += b"K" + bytes([x])
            elif 0 <= x <= 0xFFFF:
                out += b"M" + struct.pack("<H", x)
            elif -0x80000000 <= x <= 0x7FFFFFFF:
                out += b"J" + struct.pack("<i", x)
            else:
                b = x.to_bytes((x.bit_length() >> 3) + 1, "little", signed=True)
                if x < 0 and len(b) > 1 and b[-1] == 0xFF and b[-2] & 0x80:
                    b = b[:-1]
                out += (b"\x8a" + bytes([len(b)]) if len(b) < 256 else b"\x8b" + struct.pack("<I", len(b))) + b
        elif type(x) is float:
            out += b"G" + struct.pack(">d", x)
        elif isinstance(x, Pid):
            self.save(self.persistent(x))
            out += b"Q"
        else:
            key = ("g", x.module, x.name) if isinstance(x, Glb) else id(x)
            hit = self.memo.get(key)
            if hit:
                i = hit[0]
                out += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)
            elif isinstance(x, Str):
                b = x.v.encode("utf-8", "surrogatepass")
                out += b"X" + struct.pack("<I", len(b)) + b
                self.put(key, x)
            elif isinstance(x, Glb):
                out += b"c" + x.module.encode("ascii") + b"\n" + x.name.encode("ascii") + b"\n"
                self.put(key, x)
            elif isinstance(x, Tup):
                self.save_tuple(x, key)
            elif isinstance(x, Lst):
                out += b"]"
                self.put(key, x)
                self.batch(x.items, exact=True, pairs=False)
            elif isinstance(x, Dct):
                out += b"}"
                self.put(key, x)
                self.batch(x.items, exact=True, pairs=True)
            elif isinstance(x, Obj):
                self.save(x.func)
                self.save(x.args)
                out += b"R" if x.op == "REDUCE" else b"\x81"
                self.put(key, x)
                self.batch(x.listitems, exact=False, pairs=False)
                self.batch(x.dictitems, exact=False, pairs=True)
                if x.state is not NO_STATE:
                    self.save(x.state)
                    out += b"b"
            else:
                raise TypeError(f"cannot pickle {type(x).__name__}")

    def save_tuple(self, x, key):
        if not x.items:
            self.out += b")"  # the empty tuple is never memoized
            return
        if len(x.items) > 3:
            self.out += b"("
        for item in x.items:
            self.save(item)
        self.out += b"t" if len(x.items) > 3 else b"\x85\x86\x87"[len(x.items) - 1:len(x.items)]
        self.put(key, x)

    def batch(self, items, exact, pairs):
        """batch_list_exact / batch_dict_exact (exact list / dict) or batch_list / batch_dict (the
        iterators of save_reduce): chunks of 1000 between MARK and APPENDS / SETITEMS; a single item
        without MARK (iterators: a last chunk of one; exact: only a container of length one); an exact
        dict whose last chunk is full is followed by an empty MARK SETITEMS."""
        one, many = (b"s", b"u") if pairs else (b"a", b"e")
        n = len(items)
        if n == 0:
            return
        chunks = [items[i:i + self.BATCHSIZE] for i in range(0, n, self.BATCHSIZE)]
        if exact and pairs and n > 1 and n % self.BATCHSIZE == 0:
            chunks.append([])
        for chunk in chunks:
            single = len(chunk) == 1 and (not exact or n == 1)
            if not single:
                self.out += b"("
            for item in chunk:
                for x in (item if pairs else [item]):
                    self.save(x)
            self.out += one if single else many


# ---------------------------------------------------------------- tensors in the tree

REBUILD_V2 = ("torch._utils", "_rebuild_tensor_v2")
REBUILD_FROM_TYPE = ("torch._tensor", "_rebuild_from_type_v2")


def is_glb(x, qualname):
    return isinstance(x, Glb) and (x.module, x.name) == qualname


def is_tensor(x):
    return isinstance(x, Obj) and x.op == "REDUCE" and is_glb(x.func, REBUILD_V2)


def tensor_storage(t):
    """(key, storage class name, location) of a `_rebuild_tensor_v2` node."""
    pid = t.args.items[0].tup.items
    return pid[2].v, pid[1].name, pid[3].v


def scalar_value(t, records):
    """The value of a 0-dim tensor, read from its storage record."""
    key, cls, _ = tensor_storage(t)
    fmt = {"FloatStorage": "<f", "DoubleStorage": "<d", "LongStorage": "<q", "IntStorage": "<i"}[cls]
    offset = t.args.items[1] * struct.calcsize(fmt)
    return struct.unpack_from(fmt, records[f"data/{key}"], offset)[0]
