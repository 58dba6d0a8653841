#include "pickle_values.h"

#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "pickle_surgery.h"

namespace ucfs_fuzz {

namespace {

constexpr int64_t kInts[] = {
    0,
    1,
    -1,
    2,
    3,
    4,
    5,
    7,
    8,
    16,
    255,
    256,
    65535,
    65536,
    1000000000,
    int64_t{1} << 31,
    (int64_t{1} << 31) - 1,
    (int64_t{1} << 31) + 1,
    -(int64_t{1} << 31),
    (int64_t{1} << 32) - 1,
    int64_t{1} << 32,
    (int64_t{1} << 32) + 1,
    int64_t{1} << 53,
    (int64_t{1} << 53) + 1,
    int64_t{1} << 60,
    int64_t{1} << 61,
    int64_t{1} << 62,
    (int64_t{1} << 62) + 1,
    (int64_t{1} << 62) - 1,
    std::numeric_limits<int64_t>::max(),
    std::numeric_limits<int64_t>::max() - 1,
    std::numeric_limits<int64_t>::min(),
    std::numeric_limits<int64_t>::min() + 1,
    // 2^64 / 4 and / 2: products with an element size wrap to 0.
    (int64_t{1} << 62) + (int64_t{1} << 32),
    int64_t{0x4000000000000001},
    int64_t{0x2000000000000000},
};

}  // namespace

int64_t IntValue(uint8_t which, int64_t old, uint64_t raw) {
  const auto u = static_cast<uint64_t>(old);
  switch (which % 10) {
    case 0:
      return static_cast<int64_t>(u + 1);
    case 1:
      return static_cast<int64_t>(u - 1);
    case 2:
      return static_cast<int64_t>(u * 2);
    case 3:
      return old / 2;
    case 4:
      return static_cast<int64_t>(0 - u);
    case 5:
      return static_cast<int64_t>(raw);
    case 6:
      return static_cast<int64_t>(u + (uint64_t{1} << 32));
    default:  // 7, 8, 9: three banks, so every entry has a byte
      return kInts[static_cast<size_t>(which / 10 * 3 + which % 10 - 7) % std::size(kInts)];
  }
}

double FloatValue(uint8_t which, double old) {
  switch (which % 16) {
    case 0:
      return std::numeric_limits<double>::quiet_NaN();
    case 1:
      return std::numeric_limits<double>::infinity();
    case 2:
      return -std::numeric_limits<double>::infinity();
    case 3:
      return 0.0;
    case 4:
      return -0.0;
    case 5:
      return 1e308;
    case 6:
      return 5e-324;
    case 7:
      return old + 1;
    case 8:
      return -old;
    case 9:
      return 0.5;
    case 10:
      return 1e9;
    case 11:
      return 9.3e18;  // past int64
    case 12:
      return -1.0;
    case 13:
      return 4294967296.0;
    case 14:
      return std::numeric_limits<double>::signaling_NaN();
    default:
      return old * 1e300;
  }
}

std::string StrValue(uint8_t which, std::string_view old) {
  static const char* const kStrs[] = {
      "",
      "x",
      "/",
      "a/b",
      ".",
      "..",
      ".wh.x",
      ".wh..wh..opq",
      "\xff\xfe",
      "\xc3\x28",
      "\xc3\xa9t\xc3\xa9",
      "fp32",
      "exp_avg",
      "exp_avg_sq",
      "step",
      "params",
      "storage",
      "cpu",
      "cuda:0",
      "0",
      "1",
      "99",
      "-1",
      "latest",
      "global_step4",
      "zero",
      "optimizer_state",
      "embed.weight",
      "fc1.bias",
      "weights",
      "disabled",
      "optimizer_states",
      "max_stage",
      "module",
      "param_groups",
      "data.pkl",
      "../../etc/passwd",
      "a\\b",
      " ",
      "optimizer_state.pt",
      "fp32.pt",
      "latest_universal",
      "0.15.3",  // ds_version: zero_to_fp32 shards its .bin files from here on
      "0.16.4+a1b2c3",
      "99999999999.0",
  };
  switch (which % 12) {
    case 0:
      return std::string("\0", 1);
    case 1:
      return std::string(old) + std::string("\0x", 2);
    case 2:
      return std::string(4097, 'a');
    case 3:
      return std::string(old) + "/..";
    case 4:
      return std::string(old) + std::string(old);
    case 5:
      return std::string(old.substr(0, old.size() / 2));
    case 6:
      return ".wh." + std::string(old);
    case 7:
      return std::string(old) + "\xff";
    case 8:
      return std::string(old) + "_";
    default:  // 9, 10, 11: three banks, so every entry has a byte
      return kStrs[static_cast<size_t>(which / 12 * 3 + which % 12 - 9) % std::size(kStrs)];
  }
}

std::pair<const char*, const char*> GlobalValue(uint8_t which) {
  static const std::pair<const char*, const char*> kGlobals[] = {
      {"torch", "FloatStorage"},
      {"torch", "BFloat16Storage"},
      {"torch", "HalfStorage"},
      {"torch", "DoubleStorage"},
      {"torch", "LongStorage"},
      {"torch", "IntStorage"},
      {"torch", "ShortStorage"},
      {"torch", "CharStorage"},
      {"torch", "ByteStorage"},
      {"torch", "BoolStorage"},
      {"torch", "ComplexFloatStorage"},
      {"torch", "ComplexDoubleStorage"},
      {"torch", "QInt8Storage"},
      {"torch", "QUInt8Storage"},
      {"torch", "QInt32Storage"},
      {"torch", "QUInt4x2Storage"},
      {"torch", "QUInt2x4Storage"},
      {"torch", "UntypedStorage"},
      {"torch", "NoSuchStorage"},
      {"torch", "Size"},
      {"torch", "float32"},
      {"torch", "bfloat16"},
      {"torch", "float16"},
      {"torch", "int64"},
      {"torch._utils", "_rebuild_tensor_v2"},
      {"torch._utils", "_rebuild_tensor_v3"},
      {"torch._utils", "_rebuild_parameter"},
      {"torch._tensor", "_rebuild_from_type_v2"},
      {"collections", "OrderedDict"},
      {"__builtin__", "getattr"},
      {"builtins", "getattr"},
      {"__builtin__", "set"},
      {"deepspeed.runtime.zero.config", "ZeroStageEnum"},
      {"os", "system"},
      {"", ""},
  };
  return kGlobals[which % std::size(kGlobals)];
}

NodeId AddLong(Document& doc, uint8_t which) {
  Node n;
  n.kind = Kind::kLong;
  switch (which % 3) {
    case 0:  // 2^64
      n.text = std::string("\0\0\0\0\0\0\0\0\x01", 9);
      break;
    case 1:  // 2^63
      n.text = std::string("\0\0\0\0\0\0\0\x80\0", 9);
      break;
    default:  // -2^64 - 1
      n.text = std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xfe", 9);
      break;
  }
  return doc.Add(std::move(n));
}

NodeId MakeValue(Document& doc, uint8_t gen, uint8_t x, uint64_t raw, NodeId into,
                 const Document* other) {
  switch (gen % 16) {
    case 0:
      return doc.AddNone();
    case 1:
      return doc.AddBool((x & 1) != 0);
    case 2:
      return doc.AddInt(IntValue(x, 0, raw));
    case 3:
      return doc.AddFloat(FloatValue(x, 1.0));
    case 4:
      return doc.AddStr(StrValue(x, "p"));
    case 5:
      return doc.AddTuple({});
    case 6:
      return doc.AddList({});
    case 7:
      return doc.AddDict({});
    case 8: {
      auto [module, name] = GlobalValue(x);
      return doc.Global(module, name);
    }
    case 9: {  // torch.Size((d,)) or torch.Size(())
      std::vector<NodeId> dims;
      if (x & 1) dims.push_back(doc.AddInt(IntValue(static_cast<uint8_t>(x >> 1), 1, raw)));
      return doc.AddReduce(doc.Global("torch", "Size"),
                           doc.AddTuple({doc.AddTuple(std::move(dims))}));
    }
    case 10: {  // a tuple of x % 5 ints
      std::vector<NodeId> dims;
      for (int i = 0; i < x % 5; ++i)
        dims.push_back(doc.AddInt(IntValue(static_cast<uint8_t>(x + i * 37), 1, raw)));
      return doc.AddTuple(std::move(dims));
    }
    case 11:
    case 12: {  // an existing node, shared
      if (doc.size() == 0) return kNoNode;
      const NodeId c = static_cast<NodeId>((raw ^ x) % doc.size());
      if (into != kNoNode && Reaches(doc, c, into)) return kNoNode;
      return c;
    }
    case 13:
      return AddLong(doc, x);
    case 14: {  // the same node of another rank's file, copied
      if (other == nullptr || other->size() == 0) return kNoNode;
      std::vector<NodeId> copied;
      return doc.CopyFrom(*other, static_cast<NodeId>((raw ^ x) % other->size()), &copied);
    }
    default:
      return doc.AddStr(std::string(1, static_cast<char>(x)));
  }
}

}  // namespace ucfs_fuzz
