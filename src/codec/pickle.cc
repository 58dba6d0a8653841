#include "ucfs/codec/pickle.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ucfs::pickle {

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kLong:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kStr:
      return "str";
    case Kind::kBytes:
      return "bytes";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kSet:
      return "set";
    case Kind::kFrozenSet:
      return "frozenset";
    case Kind::kGlobal:
      return "global";
    case Kind::kReduce:
      return "reduce";
    case Kind::kNewObj:
      return "object";
    case Kind::kPersistentId:
      return "persistent id";
  }
  return "?";
}

double Node::float_value() const { return std::bit_cast<double>(scalar); }

NodeId Document::Add(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<NodeId>(nodes_.size() - 1);
}

NodeId Document::AddNone() { return Add(Node{}); }

NodeId Document::AddBool(bool v) {
  Node n;
  n.kind = Kind::kBool;
  n.scalar = v ? 1 : 0;
  return Add(std::move(n));
}

NodeId Document::AddInt(int64_t v) {
  Node n;
  n.kind = Kind::kInt;
  n.scalar = v;
  return Add(std::move(n));
}

NodeId Document::AddFloat(double v) {
  Node n;
  n.kind = Kind::kFloat;
  n.scalar = std::bit_cast<int64_t>(v);
  return Add(std::move(n));
}

NodeId Document::AddStr(std::string v) {
  Node n;
  n.kind = Kind::kStr;
  n.text = std::move(v);
  return Add(std::move(n));
}

namespace {
Node Container(Kind kind, std::vector<NodeId> items) {
  Node n;
  n.kind = kind;
  n.items = std::move(items);
  return n;
}
}  // namespace

NodeId Document::AddTuple(std::vector<NodeId> items) {
  return Add(Container(Kind::kTuple, std::move(items)));
}
NodeId Document::AddList(std::vector<NodeId> items) {
  return Add(Container(Kind::kList, std::move(items)));
}
NodeId Document::AddDict(std::vector<NodeId> kv) {
  return Add(Container(Kind::kDict, std::move(kv)));
}

NodeId Document::Global(std::string_view module, std::string_view name) {
  for (const auto& g : globals_) {
    if (g.module == module && g.name == name) return g.id;
  }
  GlobalKey key{std::string(module), std::string(name), kNoNode};
  Node n;
  n.kind = Kind::kGlobal;
  n.text = key.module;
  n.name = key.name;
  key.id = Add(std::move(n));
  globals_.push_back(std::move(key));
  return globals_.back().id;
}

NodeId Document::AddReduce(NodeId callable, NodeId args) {
  Node n;
  n.kind = Kind::kReduce;
  n.a = callable;
  n.b = args;
  return Add(std::move(n));
}

NodeId Document::AddPersistentId(NodeId pid) {
  Node n;
  n.kind = Kind::kPersistentId;
  n.a = pid;
  return Add(std::move(n));
}

void Document::Append(NodeId container, NodeId item) { nodes_[container].items.push_back(item); }

void Document::AppendPair(NodeId mapping, NodeId key, NodeId value) {
  std::vector<NodeId>& items = nodes_[mapping].items;
  items.push_back(key);
  items.push_back(value);
}

NodeId Document::CopyFrom(const Document& other, NodeId id, std::vector<NodeId>* copied) {
  if (id == kNoNode) return kNoNode;
  if (copied->size() < other.size()) copied->resize(other.size(), kNoNode);
  if ((*copied)[id] != kNoNode) return (*copied)[id];
  const Node& src = other.node(id);
  if (src.kind == Kind::kGlobal) return (*copied)[id] = Global(src.text, src.name);
  // Reserve our node first so cycles through it resolve to it.
  NodeId mine = Add(Node{});
  (*copied)[id] = mine;
  Node n = src;
  n.a = CopyFrom(other, src.a, copied);
  n.b = CopyFrom(other, src.b, copied);
  n.state = CopyFrom(other, src.state, copied);
  for (auto& item : n.items) item = CopyFrom(other, item, copied);
  nodes_[mine] = std::move(n);
  return mine;
}

bool Document::IsGlobal(NodeId id, std::string_view module, std::string_view name) const {
  if (id == kNoNode) return false;
  const Node& n = nodes_[id];
  return n.kind == Kind::kGlobal && n.text == module && n.name == name;
}

std::optional<std::vector<std::pair<NodeId, NodeId>>> Document::MappingItems(NodeId id) const {
  if (id == kNoNode) return std::nullopt;
  const Node& n = nodes_[id];
  size_t begin = 0;
  if (n.kind == Kind::kReduce || n.kind == Kind::kNewObj) {
    begin = n.list_items;
  } else if (n.kind != Kind::kDict) {
    return std::nullopt;
  }
  std::vector<std::pair<NodeId, NodeId>> out;
  out.reserve((n.items.size() - begin) / 2);
  for (size_t i = begin; i + 1 < n.items.size(); i += 2)
    out.emplace_back(n.items[i], n.items[i + 1]);
  return out;
}

NodeId Document::Get(NodeId mapping, std::string_view key) const {
  auto items = MappingItems(mapping);
  if (!items) return kNoNode;
  for (const auto& [k, v] : *items) {
    auto s = AsStr(k);
    if (s && *s == key) return v;
  }
  return kNoNode;
}

std::optional<std::vector<NodeId>> Document::SequenceItems(NodeId id) const {
  if (id == kNoNode) return std::nullopt;
  const Node& n = nodes_[id];
  switch (n.kind) {
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kSet:
    case Kind::kFrozenSet:
      return n.items;
    case Kind::kReduce:
    case Kind::kNewObj:
      return std::vector<NodeId>(n.items.begin(), n.items.begin() + n.list_items);
    default:
      return std::nullopt;
  }
}

std::optional<int64_t> Document::AsInt(NodeId id) const {
  if (id == kNoNode) return std::nullopt;
  const Node& n = nodes_[id];
  if (n.kind == Kind::kInt || n.kind == Kind::kBool) return n.scalar;
  return std::nullopt;
}

std::optional<double> Document::AsNumber(NodeId id) const {
  if (id == kNoNode) return std::nullopt;
  const Node& n = nodes_[id];
  if (n.kind == Kind::kFloat) return n.float_value();
  if (n.kind == Kind::kInt || n.kind == Kind::kBool) return static_cast<double>(n.scalar);
  return std::nullopt;
}

std::optional<std::string_view> Document::AsStr(NodeId id) const {
  if (id == kNoNode || nodes_[id].kind != Kind::kStr) return std::nullopt;
  return nodes_[id].text;
}

namespace {

void QuoteInto(std::string* out, std::string_view s) {
  out->push_back('\'');
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const auto next = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    if (static_cast<unsigned char>(c) == 0xc2 && next >= 0x80 && next <= 0x9f) {
      // A C1 control (U+0080..U+009F), as Python's repr shows it.
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", next);
      out->append(buf);
      ++i;
    } else if (c == '\'' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out->append(buf);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('\'');
}

// Python's repr of a float: the shortest digits that read back the same.
std::string FloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s(buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Document::Repr's text so far, and the nodes from the root to the current
// one: a cycle (possible in a Document built by hand) shows as "...". A list,
// not a bitmap of the document: Repr is called for messages about single
// values of documents of millions of nodes, and must cost what it prints, not
// the document.
class ReprPrinter {
 public:
  ReprPrinter(const Document& doc, size_t max_chars) : doc_(doc), max_chars_(max_chars) {}

  // Recursion is bounded: Parse limits depth, and `path_` cuts cycles.
  void Print(NodeId id) {
    if (out_.size() > max_chars_) return;
    if (id == kNoNode) {
      out_ += "<none>";
      return;
    }
    if (std::find(path_.begin(), path_.end(), id) != path_.end()) {
      out_ += "...";
      return;
    }
    path_.push_back(id);
    PrintNode(doc_.node(id));
    path_.pop_back();
  }

  // The text, cut at max_chars.
  std::string Finish() && {
    if (out_.size() > max_chars_) {
      out_.resize(max_chars_);
      out_ += "...";
    }
    return std::move(out_);
  }

 private:
  void PrintNode(const Node& n) {
    switch (n.kind) {
      case Kind::kNone:
        out_ += "None";
        break;
      case Kind::kBool:
        out_ += n.scalar ? "True" : "False";
        break;
      case Kind::kInt:
        out_ += std::to_string(n.scalar);
        break;
      case Kind::kLong:
        out_ += "<int of " + std::to_string(n.text.size()) + " bytes>";
        break;
      case Kind::kFloat:
        out_ += FloatRepr(n.float_value());
        break;
      case Kind::kStr:
        QuoteInto(&out_, n.text);
        break;
      case Kind::kBytes:
        out_ += "b";
        QuoteInto(&out_, n.text);
        break;
      case Kind::kTuple:
        PrintItems(n, "(", n.items.size() == 1 ? ",)" : ")", 0, n.items.size());
        break;
      case Kind::kList:
        PrintItems(n, "[", "]", 0, n.items.size());
        break;
      case Kind::kSet:
        PrintItems(n, "{", "}", 0, n.items.size());
        break;
      case Kind::kFrozenSet:
        PrintItems(n, "frozenset({", "})", 0, n.items.size());
        break;
      case Kind::kDict:
        PrintDict(n);
        break;
      case Kind::kGlobal:
        out_ += Printable(n.text) + "." + Printable(n.name);
        break;
      case Kind::kReduce:
      case Kind::kNewObj:
        PrintCall(n);
        break;
      case Kind::kPersistentId:
        out_ += "pid";
        Print(n.a);
        break;
    }
  }

  // n.items[begin, end), comma separated between `open` and `close`.
  void PrintItems(const Node& n, const char* open, const char* close, size_t begin, size_t end) {
    out_ += open;
    for (size_t i = begin; i < end; ++i) {
      if (i > begin) out_ += ", ";
      Print(n.items[i]);
      if (out_.size() > max_chars_) break;
    }
    out_ += close;
  }

  void PrintDict(const Node& n) {
    out_ += "{";
    for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
      if (i) out_ += ", ";
      Print(n.items[i]);
      out_ += ": ";
      Print(n.items[i + 1]);
      if (out_.size() > max_chars_) break;
    }
    out_ += "}";
  }

  // A REDUCE or NEWOBJ record: callable and arguments, then what APPENDS,
  // SETITEMS and BUILD added to its result.
  void PrintCall(const Node& n) {
    Print(n.a);
    Print(n.b);
    if (n.list_items) PrintItems(n, " + [", "]", 0, n.list_items);
    if (n.items.size() > n.list_items) PrintItems(n, " + {", "}", n.list_items, n.items.size());
    if (n.state != kNoNode) {
      out_ += " state=";
      Print(n.state);
    }
  }

  const Document& doc_;
  const size_t max_chars_;
  std::string out_;
  std::vector<NodeId> path_;
};

}  // namespace

std::string Document::Repr(NodeId root, size_t max_chars) const {
  ReprPrinter printer(*this, max_chars);
  printer.Print(root);
  return std::move(printer).Finish();
}

Status CheckShallowAndAcyclic(const Document& doc, uint32_t max_depth) {
  enum : uint8_t { kWhite, kGray, kBlack };
  std::vector<uint8_t> color(doc.size(), kWhite);
  std::vector<uint32_t> height(doc.size(), 0);
  struct Frame {
    NodeId id;
    size_t next;  // index into the child list
  };
  auto children = [&](NodeId id, std::vector<NodeId>* out) {
    const Node& n = doc.node(id);
    out->clear();
    for (NodeId c : {n.a, n.b, n.state}) {
      if (c != kNoNode) out->push_back(c);
    }
    out->insert(out->end(), n.items.begin(), n.items.end());
  };
  std::vector<Frame> stack;
  std::vector<std::vector<NodeId>> kids;
  stack.push_back({doc.root(), 0});
  kids.emplace_back();
  children(doc.root(), &kids.back());
  color[doc.root()] = kGray;
  while (!stack.empty()) {
    Frame& f = stack.back();
    std::vector<NodeId>& k = kids[stack.size() - 1];
    if (f.next < k.size()) {
      NodeId c = k[f.next++];
      if (color[c] == kGray) {
        return Status::NotSupported("pickle: the object graph has a reference cycle (through " +
                                    std::string(KindName(doc.node(c).kind)) + ")");
      }
      if (color[c] == kWhite) {
        color[c] = kGray;
        stack.push_back({c, 0});
        if (kids.size() < stack.size()) kids.emplace_back();
        children(c, &kids[stack.size() - 1]);
      }
      continue;
    }
    uint32_t h = 1;
    for (NodeId c : k) h = std::max(h, height[c] + 1);
    height[f.id] = h;
    color[f.id] = kBlack;
    if (h > max_depth) {
      return Status::NotSupported("pickle: values nested more than " + std::to_string(max_depth) +
                                  " deep");
    }
    stack.pop_back();
  }
  return Status::OK();
}

}  // namespace ucfs::pickle
