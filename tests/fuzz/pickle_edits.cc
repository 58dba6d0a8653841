#include "pickle_edits.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>

#include "pickle_values.h"

namespace ucfs_fuzz {

namespace {

constexpr size_t kMaxItems = 4096;  // a sequence edit never grows past this

// The editable run of items of a node: pairs of a mapping, items of a
// sequence, or a call's APPENDS items; a call with none is edited through its
// argument tuple.
struct Region {
  NodeId node = kNoNode;
  size_t begin = 0, end = 0, unit = 1;
  bool appends = false;  // a call's APPENDS items: list_items follows the size
};

Region RegionOf(const Document& doc, NodeId id) {
  Region r;
  if (id == kNoNode) return r;
  const Node& n = doc.node(id);
  switch (n.kind) {
    case Kind::kDict:
      r = {id, 0, n.items.size() & ~size_t{1}, 2, false};
      return r;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kSet:
    case Kind::kFrozenSet:
      r = {id, 0, n.items.size(), 1, false};
      return r;
    case Kind::kReduce:
    case Kind::kNewObj:
      if (n.items.size() > n.list_items) {
        r = {id, n.list_items, n.list_items + ((n.items.size() - n.list_items) & ~size_t{1}), 2,
             false};
        return r;
      }
      if (n.list_items > 0) {
        r = {id, 0, n.list_items, 1, true};
        return r;
      }
      return RegionOf(doc, n.b);
    case Kind::kPersistentId:
      return RegionOf(doc, n.a);
    default:
      return r;
  }
}

enum Action : uint8_t {
  kDescend,
  kReplace,
  kScalar,
  kSequence,
  kMapping,
  kWrap,
  kUnwrap,
  kSetGlobal,
  kNumActions,
};

Step ReadStep(Program& prog) {
  Step s;
  s.action = prog.U8() % kNumActions;
  s.a = prog.U8();
  s.b = prog.U8();
  if (s.action != kDescend) {
    s.c = prog.U8();
    s.d = prog.U8();
  }
  // Raw 64-bit operands only where asked for, so programs stay short.
  if ((s.action == kReplace || s.action == kScalar) && (s.b & 0x80)) s.raw = prog.U64();
  return s;
}

// Sequence and mapping edits on the units of a region. Returns whether the
// Document changed.
bool EditRegion(Document& doc, const Region& r, const Step& s, bool mapping_ops,
                const Document* other) {
  if (r.node == kNoNode) return false;
  std::vector<std::vector<NodeId>> units;
  {
    const Node& n = doc.node(r.node);
    for (size_t i = r.begin; i + r.unit <= r.end; i += r.unit) {
      units.emplace_back(n.items.begin() + static_cast<std::ptrdiff_t>(i),
                         n.items.begin() + static_cast<std::ptrdiff_t>(i + r.unit));
    }
  }
  const size_t count = units.size();
  const size_t i = count ? s.b % count : 0;
  const size_t j = count ? s.c % count : 0;
  auto new_unit = [&](uint8_t gen, uint8_t x) {
    std::vector<NodeId> u;
    if (r.unit == 2) {
      // A key: a string (a name, a special one) or an int.
      u.push_back(gen & 1 ? doc.AddInt(IntValue(x, static_cast<int64_t>(count), s.raw))
                          : doc.AddStr(StrValue(x, "new")));
      NodeId v = count ? units[i][1] : kNoNode;
      if (gen & 2 || v == kNoNode)
        v = MakeValue(doc, static_cast<uint8_t>(gen >> 2), x, s.raw, r.node, other);
      u.push_back(v == kNoNode ? doc.AddNone() : v);
    } else {
      NodeId v = MakeValue(doc, gen, x, s.raw, r.node, other);
      u.push_back(v == kNoNode ? doc.AddNone() : v);
    }
    return u;
  };
  const uint8_t mode = mapping_ops ? static_cast<uint8_t>(s.a % 8 + 12) : s.a % 12;
  switch (mode) {
    case 0:  // drop item i
      if (!count) return false;
      units.erase(units.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1:  // duplicate item i after itself (shared)
      if (!count) return false;
      units.insert(units.begin() + static_cast<std::ptrdiff_t>(i), units[i]);
      break;
    case 2:  // append a new item
      units.push_back(new_unit(s.c, s.d));
      break;
    case 3:  // keep the first b items
      if (s.b >= count) return false;
      units.resize(s.b);
      break;
    case 4:  // empty it
      if (!count) return false;
      units.clear();
      break;
    case 5:  // swap two items
      if (i == j) return false;
      std::swap(units[i], units[j]);
      break;
    case 6:  // reverse
      if (count < 2) return false;
      std::reverse(units.begin(), units.end());
      break;
    case 7: {  // repeat the items up to c+1 more times
      if (!count) return false;
      const size_t times = std::min<size_t>(s.c % 64 + 1, kMaxItems / count);
      const auto copy = units;
      for (size_t t = 0; t < times; ++t) units.insert(units.end(), copy.begin(), copy.end());
      break;
    }
    case 8:  // insert a new item at i
      units.insert(units.begin() + static_cast<std::ptrdiff_t>(i), new_unit(s.c, s.d));
      break;
    case 9:  // append d % 32 new items (grow a list by many)
      for (int k = 0; k < s.d % 32 + 1 && units.size() < kMaxItems; ++k) {
        units.push_back(new_unit(s.c, static_cast<uint8_t>(s.d + k)));
      }
      break;
    case 10:  // move the last item to the front
      if (count < 2) return false;
      std::rotate(units.begin(), units.end() - 1, units.end());
      break;
    case 11:  // replace item i by a copy of item j
      if (!count || i == j) return false;
      units[i] = units[j];
      break;
    // Mapping edits: units are (key, value).
    case 12:  // rename key i
      if (!count || r.unit != 2) return false;
      units[i][0] = s.d & 1 ? doc.AddInt(IntValue(s.d, static_cast<int64_t>(i), s.raw))
                            : doc.AddStr(StrValue(s.d, doc.AsStr(units[i][0]).value_or("k")));
      break;
    case 13:  // duplicate entry i under a new key
      if (!count || r.unit != 2) return false;
      units.push_back(
          {doc.AddStr(StrValue(s.d, doc.AsStr(units[i][0]).value_or("k"))), units[i][1]});
      break;
    case 14:  // duplicate entry i under the same key
      if (!count) return false;
      units.push_back(units[i]);
      break;
    case 15:  // swap the values of entries i and j
      if (!count || r.unit != 2 || i == j) return false;
      std::swap(units[i][1], units[j][1]);
      break;
    case 16:  // remove entry i
      if (!count) return false;
      units.erase(units.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 17:  // add an entry
      units.push_back(new_unit(s.c, s.d));
      break;
    case 18:  // value i: a new value
      if (!count || r.unit != 2) return false;
      {
        NodeId v = MakeValue(doc, s.c, s.d, s.raw, r.node, other);
        if (v == kNoNode) return false;
        units[i][1] = v;
      }
      break;
    default:  // entry i to the front
      if (i == 0) return false;
      std::rotate(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(i),
                  units.begin() + static_cast<std::ptrdiff_t>(i + 1));
      break;
  }
  std::vector<NodeId> flat;
  for (const auto& u : units) flat.insert(flat.end(), u.begin(), u.end());
  Node& n = doc.mutable_node(r.node);
  std::vector<NodeId> items(n.items.begin(),
                            n.items.begin() + static_cast<std::ptrdiff_t>(r.begin));
  items.insert(items.end(), flat.begin(), flat.end());
  items.insert(items.end(), n.items.begin() + static_cast<std::ptrdiff_t>(r.end), n.items.end());
  n.items = std::move(items);
  if (r.appends) n.list_items = static_cast<uint32_t>(flat.size());
  return true;
}

// Applies one step's terminal action at `at`. Returns whether it changed.
bool Apply(Document& doc, const Place& at, const Step& s, const Document* other) {
  if (at.node == kNoNode || at.node >= doc.size()) return false;
  const Node node = doc.node(at.node);  // a copy: adding nodes below may not move it, but edits do
  switch (s.action) {
    case kReplace: {
      const NodeId v = MakeValue(doc, s.a, s.c, s.raw | s.d, at.parent, other);
      if (v == kNoNode || v == at.node) return false;
      if (at.parent != kNoNode && Reaches(doc, v, at.parent)) return false;
      Replace(doc, at, v);
      return true;
    }
    case kScalar: {
      NodeId v = kNoNode;
      switch (node.kind) {
        case Kind::kInt:
        case Kind::kBool:
          switch (s.c % 8) {
            case 5:  // the same number as a float
              v = doc.AddFloat(static_cast<double>(IntValue(s.a, node.scalar, s.raw)));
              break;
            case 6:
              v = AddLong(doc, s.a);
              break;
            case 7:
              v = doc.AddFloat(FloatValue(s.a, static_cast<double>(node.scalar)));
              break;
            default:
              v = doc.AddInt(IntValue(s.a, node.scalar, s.raw));
              break;
          }
          break;
        case Kind::kLong:
          v = s.c & 1 ? AddLong(doc, s.a) : doc.AddInt(IntValue(s.a, 0, s.raw));
          break;
        case Kind::kFloat:
          v = s.c & 1 ? doc.AddInt(IntValue(s.a, 0, s.raw))
                      : doc.AddFloat(FloatValue(s.a, node.float_value()));
          break;
        case Kind::kStr:
        case Kind::kBytes: {
          Node n;
          n.kind = s.c % 4 == 3 ? Kind::kBytes : node.kind;
          n.text = StrValue(s.a, node.text);
          v = doc.Add(std::move(n));
          if (s.c % 4 == 1) v = doc.AddInt(IntValue(s.a, 0, s.raw));
          break;
        }
        case Kind::kNone:
          v = doc.AddInt(IntValue(s.a, 0, s.raw));
          break;
        default:
          return false;
      }
      Replace(doc, at, v);
      return true;
    }
    case kSequence:
    case kMapping:
      return EditRegion(doc, RegionOf(doc, at.node), s, s.action == kMapping, other);
    case kWrap: {
      std::vector<NodeId> items = {at.node};
      if (s.a & 2) items.push_back(at.node);
      const NodeId w = s.a & 1 ? doc.AddTuple(std::move(items)) : doc.AddList(std::move(items));
      if (s.a & 4) {
        // As the argument of a call to a global: torch.Size(x), OrderedDict(x) ...
        auto [module, name] = GlobalValue(s.b);
        Replace(doc, at, doc.AddReduce(doc.Global(module, name), doc.AddTuple({w})));
      } else {
        Replace(doc, at, w);
      }
      return true;
    }
    case kUnwrap: {
      Place child = ChildPlace(doc, at.node, s.a);
      if (child.node == kNoNode || child.node == at.node) return false;
      if (at.parent != kNoNode && Reaches(doc, child.node, at.parent)) return false;
      Replace(doc, at, child.node);
      return true;
    }
    case kSetGlobal: {
      auto [module, name] = GlobalValue(s.a);
      Replace(doc, at, doc.Global(module, name));
      return true;
    }
    default:
      return false;
  }
}

Place Select(Document& doc, const Edit& e, std::span<const NamedPath> paths) {
  switch (e.selector % 6) {
    case 0: {
      Place p;
      p.node = doc.root();
      return p;
    }
    case 1:
      return NamedPlace(doc, paths, e.k1, e.k2, static_cast<uint8_t>(e.k2 >> 4));
    case 2: {
      const auto kind = static_cast<Kind>(e.k1 % (static_cast<int>(Kind::kPersistentId) + 1));
      const NodeId id = KthOfKind(doc, kind, e.k2);
      return id == kNoNode ? Place{} : PlaceOf(doc, id);
    }
    case 3:
      return TensorPart(doc, KthTensor(doc, e.k2), e.k1);
    case 4: {
      const NodeId size = KthSize(doc, e.k2);
      if (size == kNoNode) return Place{};
      // The dims tuple inside torch.Size((...)), or the call itself.
      if (e.k1 & 1) return PlaceOf(doc, size);
      auto args = doc.SequenceItems(doc.node(size).b);
      if (!args || args->empty()) return Place{};
      return Element(doc, doc.node(size).b, 0);
    }
    default: {
      if (doc.size() == 0) return Place{};
      return PlaceOf(doc, static_cast<NodeId>((e.k1 | (e.k2 << 8)) % doc.size()));
    }
  }
}

}  // namespace

Edit ReadEdit(Program& prog) {
  Edit e;
  e.target = prog.U8();
  e.selector = prog.U8();
  e.k1 = prog.U8();
  e.k2 = prog.U8();
  for (int depth = 0; depth < 8; ++depth) {
    Step s = ReadStep(prog);
    e.steps.push_back(s);
    if (s.action != kDescend) break;
  }
  return e;
}

bool ApplyEdit(Document& doc, const Edit& e, const Document* other,
               std::span<const NamedPath> paths) {
  Place at = Select(doc, e, paths);
  for (const Step& s : e.steps) {
    if (at.node == kNoNode) return false;
    if (s.action == kDescend) {
      at = IsMappingNode(doc, at.node) && (s.b & 1) ? Element(doc, at.node, s.a)
                                                    : ChildPlace(doc, at.node, s.a);
      continue;
    }
    return Apply(doc, at, s, other);
  }
  return false;
}

}  // namespace ucfs_fuzz
