// Pickle parsing: a stack machine over the opcodes of protocols 2-4 that
// builds Nodes instead of Python objects. No opcode can make it import,
// call or look anything up: GLOBAL yields a name, REDUCE a record.
#include <array>
#include <bit>
#include <cstring>
#include <initializer_list>
#include <unordered_map>

#include "base/byte_order.h"
#include "ucfs/codec/pickle.h"

namespace ucfs::pickle {
namespace {

constexpr NodeId kMark = 0xfffffffeu;
// How every "the input ended early" error starts (IsTruncation).
constexpr std::string_view kTruncated = "pickle: truncated";

class Reader {
 public:
  Reader(std::string_view data, const ParseLimits& limits) : data_(data), limits_(limits) {}

  Result<Document> Run();
  // Just after STOP, once Run has succeeded.
  size_t position() const { return pos_; }

 private:
  Status Fail(const std::string& what) const {
    return Status::Corruption("pickle: " + what + " (opcode at byte " + std::to_string(op_pos_) +
                              ")");
  }
  Status Need(size_t n) const {
    if (data_.size() - pos_ < n)
      return Fail("truncated: needs " + std::to_string(n) + " more bytes");
    return Status::OK();
  }
  Result<NodeId> Pop() {
    if (stack_.empty() || stack_.back() == kMark) return Fail("stack underflow");
    NodeId id = stack_.back();
    stack_.pop_back();
    return id;
  }
  Result<NodeId> Top() const {
    if (stack_.empty() || stack_.back() == kMark) return Fail("stack underflow");
    return stack_.back();
  }
  // Items above the topmost MARK, removing them and the mark.
  Result<std::vector<NodeId>> PopMark() {
    if (marks_.empty()) return Fail("no MARK on the stack");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<NodeId> items(stack_.begin() + static_cast<ptrdiff_t>(m) + 1, stack_.end());
    stack_.resize(m);
    return items;
  }
  Status Push(Node node) {
    if (doc_.size() >= limits_.max_nodes)
      return Fail("more than " + std::to_string(limits_.max_nodes) + " values");
    stack_.push_back(doc_.Add(std::move(node)));
    return Status::OK();
  }
  Result<uint64_t> ReadUInt(size_t width) {
    UCFS_RETURN_IF_ERROR(Need(width));
    const char* p = data_.data() + pos_;
    pos_ += width;
    switch (width) {
      case 1:
        return static_cast<uint8_t>(*p);
      case 2:
        return LoadLE16(p);
      case 4:
        return LoadLE32(p);
      default:
        return LoadLE64(p);
    }
  }
  Result<std::string_view> ReadBytes(uint64_t n) {
    if (n > data_.size() - pos_)
      return Fail("truncated: a " + std::to_string(n) + "-byte string runs past the end");
    std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Result<std::string_view> ReadLine() {
    size_t nl = data_.find('\n', pos_);
    if (nl == std::string_view::npos) return Fail("truncated: unterminated line");
    std::string_view s = data_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }
  Status Memoize(uint64_t index) {
    UCFS_ASSIGN_OR_RETURN(NodeId top, Top());
    memo_[index] = top;
    return Status::OK();
  }
  Status Recall(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Fail("memo key " + std::to_string(index) + " was never stored");
    stack_.push_back(it->second);
    return Status::OK();
  }
  Status PushString(Kind kind, uint64_t len) {
    UCFS_ASSIGN_OR_RETURN(std::string_view s, ReadBytes(len));
    Node n;
    n.kind = kind;
    n.text = std::string(s);
    return Push(std::move(n));
  }
  Status PushGlobal(std::string_view module, std::string_view name) {
    stack_.push_back(doc_.Global(module, name));
    return Status::OK();
  }
  // APPEND(S) onto a list, or onto an object made by REDUCE (list subclasses).
  Status Append(NodeId target, const std::vector<NodeId>& values) {
    Node& t = doc_.mutable_node(target);
    if (t.kind == Kind::kList) {
      t.items.insert(t.items.end(), values.begin(), values.end());
    } else if (t.kind == Kind::kReduce || t.kind == Kind::kNewObj) {
      t.items.insert(t.items.begin() + t.list_items, values.begin(), values.end());
      t.list_items += static_cast<uint32_t>(values.size());
    } else {
      return Fail(std::string("APPEND to a ") + std::string(KindName(t.kind)));
    }
    return Status::OK();
  }
  Status SetItems(NodeId target, const std::vector<NodeId>& kv) {
    if (kv.size() % 2 != 0) return Fail("SETITEMS with an odd number of items");
    Node& t = doc_.mutable_node(target);
    if (t.kind != Kind::kDict && t.kind != Kind::kReduce && t.kind != Kind::kNewObj) {
      return Fail(std::string("SETITEM on a ") + std::string(KindName(t.kind)));
    }
    t.items.insert(t.items.end(), kv.begin(), kv.end());
    return Status::OK();
  }
  Status Step(uint8_t op);
  // One family of opcodes each (kFamilyOf says which); any other opcode is
  // unsupported.
  Status FramingOrStackOp(uint8_t op);
  Status PushNumberOp(uint8_t op);
  Status PushStringOp(uint8_t op);
  Status MakeContainerOp(uint8_t op);
  Status FillContainerOp(uint8_t op);
  Status GlobalOrCallOp(uint8_t op);
  Status PersistentIdOp(uint8_t op);
  Status MemoOp(uint8_t op);
  Status UnsupportedOpcode(uint8_t op) const;

  std::string_view data_;
  ParseLimits limits_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  Document doc_;
  std::vector<NodeId> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, NodeId> memo_;
  bool stopped_ = false;
};

enum class Family : uint8_t {
  kUnsupported,
  kFramingOrStack,
  kPushNumber,
  kPushString,
  kMakeContainer,
  kFillContainer,
  kGlobalOrCall,
  kPersistentId,
  kMemo,
};

// The family of every opcode: a table, so that dispatching costs one lookup.
constexpr std::array<Family, 256> kFamilyOf = [] {
  std::array<Family, 256> family_of{};
  auto set = [&family_of](Family family, std::initializer_list<uint8_t> ops) {
    for (uint8_t op : ops) family_of[op] = family;
  };
  set(Family::kFramingOrStack, {0x80, 0x95, '.', '(', '0', '1', '2'});
  set(Family::kPushNumber, {'N', 0x88, 0x89, 'J', 'K', 'M', 0x8a, 0x8b, 'G'});
  set(Family::kPushString, {'X', 0x8c, 0x8d, 'T', 'U', 'B', 'C', 0x8e, 0x96});
  set(Family::kMakeContainer, {')', 't', 0x85, 0x86, 0x87, ']', '}', 0x8f, 'l', 'd', 0x91});
  set(Family::kFillContainer, {'a', 'e', 0x90, 's', 'u'});
  set(Family::kGlobalOrCall, {'c', 0x93, 'R', 0x81, 'b'});
  set(Family::kPersistentId, {'Q', 'P'});
  set(Family::kMemo, {'q', 'r', 0x94, 'h', 'j'});
  return family_of;
}();

Status Reader::Step(uint8_t op) {
  switch (kFamilyOf[op]) {
    case Family::kFramingOrStack:
      return FramingOrStackOp(op);
    case Family::kPushNumber:
      return PushNumberOp(op);
    case Family::kPushString:
      return PushStringOp(op);
    case Family::kMakeContainer:
      return MakeContainerOp(op);
    case Family::kFillContainer:
      return FillContainerOp(op);
    case Family::kGlobalOrCall:
      return GlobalOrCallOp(op);
    case Family::kPersistentId:
      return PersistentIdOp(op);
    case Family::kMemo:
      return MemoOp(op);
    case Family::kUnsupported:
      break;
  }
  return UnsupportedOpcode(op);
}

// PROTO, FRAME, STOP and the opcodes that only move stack entries.
Status Reader::FramingOrStackOp(uint8_t op) {
  switch (op) {
    case 0x80: {  // PROTO
      UCFS_ASSIGN_OR_RETURN(uint64_t proto, ReadUInt(1));
      if (proto > 5) return Fail("unsupported pickle protocol " + std::to_string(proto));
      return Status::OK();
    }
    case 0x95:  // FRAME: a length prefix only
      return ReadUInt(8).status();
    case '.':  // STOP
      stopped_ = true;
      return Status::OK();
    case '(':  // MARK
      marks_.push_back(stack_.size());
      stack_.push_back(kMark);
      return Status::OK();
    case '0':  // POP
      if (!stack_.empty() && stack_.back() == kMark) {
        stack_.pop_back();
        marks_.pop_back();
        return Status::OK();
      }
      return Pop().status();
    case '1':  // POP_MARK
      return PopMark().status();
    case '2': {  // DUP
      UCFS_ASSIGN_OR_RETURN(NodeId top, Top());
      stack_.push_back(top);
      return Status::OK();
    }
    default:
      return UnsupportedOpcode(op);
  }
}

// None, bools, ints of every width and floats.
Status Reader::PushNumberOp(uint8_t op) {
  switch (op) {
    case 'N':
      return Push(Node{});
    case 0x88:
    case 0x89: {  // NEWTRUE, NEWFALSE
      Node n;
      n.kind = Kind::kBool;
      n.scalar = op == 0x88;
      return Push(std::move(n));
    }
    case 'J':
    case 'K':
    case 'M': {  // BININT, BININT1, BININT2
      size_t width = op == 'J' ? 4 : op == 'K' ? 1 : 2;
      UCFS_ASSIGN_OR_RETURN(uint64_t v, ReadUInt(width));
      Node n;
      n.kind = Kind::kInt;
      n.scalar =
          op == 'J' ? static_cast<int64_t>(static_cast<int32_t>(v)) : static_cast<int64_t>(v);
      return Push(std::move(n));
    }
    case 0x8a:
    case 0x8b: {  // LONG1, LONG4: little-endian two's complement
      UCFS_ASSIGN_OR_RETURN(uint64_t len, ReadUInt(op == 0x8a ? 1 : 4));
      UCFS_ASSIGN_OR_RETURN(std::string_view bytes, ReadBytes(len));
      Node n;
      if (len <= 8) {
        uint64_t v = 0;
        for (size_t i = 0; i < len; ++i)
          v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
        if (len > 0 && len < 8 && (static_cast<uint8_t>(bytes[len - 1]) & 0x80))
          v |= ~uint64_t{0} << (8 * len);
        n.kind = Kind::kInt;
        n.scalar = static_cast<int64_t>(v);
      } else {
        n.kind = Kind::kLong;
        n.text = std::string(bytes);
      }
      return Push(std::move(n));
    }
    case 'G': {  // BINFLOAT: big-endian IEEE double
      UCFS_RETURN_IF_ERROR(Need(8));
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(data_[pos_ + i]);
      pos_ += 8;
      Node n;
      n.kind = Kind::kFloat;
      n.scalar = static_cast<int64_t>(bits);
      return Push(std::move(n));
    }
    default:
      return UnsupportedOpcode(op);
  }
}

// Length-prefixed str and bytes.
Status Reader::PushStringOp(uint8_t op) {
  switch (op) {
    case 'X':
    case 0x8c:
    case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
      UCFS_ASSIGN_OR_RETURN(uint64_t len, ReadUInt(op == 'X' ? 4 : op == 0x8c ? 1 : 8));
      return PushString(Kind::kStr, len);
    }
    case 'T':
    case 'U': {  // BINSTRING, SHORT_BINSTRING (Python 2 str; read as str)
      UCFS_ASSIGN_OR_RETURN(uint64_t len, ReadUInt(op == 'T' ? 4 : 1));
      return PushString(Kind::kStr, len);
    }
    case 'B':
    case 'C':
    case 0x8e:
    case 0x96: {  // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
      UCFS_ASSIGN_OR_RETURN(uint64_t len, ReadUInt(op == 'B' ? 4 : op == 'C' ? 1 : 8));
      return PushString(Kind::kBytes, len);
    }
    default:
      return UnsupportedOpcode(op);
  }
}

// Tuples, lists, dicts and sets: empty, or made of the items on the stack.
Status Reader::MakeContainerOp(uint8_t op) {
  switch (op) {
    case ')': {
      Node n;
      n.kind = Kind::kTuple;
      return Push(std::move(n));
    }
    case 't': {
      UCFS_ASSIGN_OR_RETURN(auto items, PopMark());
      Node n;
      n.kind = Kind::kTuple;
      n.items = std::move(items);
      return Push(std::move(n));
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      size_t count = op - 0x84u;
      Node n;
      n.kind = Kind::kTuple;
      n.items.resize(count);
      for (size_t i = count; i-- > 0;) {
        UCFS_ASSIGN_OR_RETURN(n.items[i], Pop());
      }
      return Push(std::move(n));
    }
    case ']':
    case '}':
    case 0x8f: {  // EMPTY_LIST, EMPTY_DICT, EMPTY_SET
      Node n;
      n.kind = op == ']' ? Kind::kList : op == '}' ? Kind::kDict : Kind::kSet;
      return Push(std::move(n));
    }
    case 'l':
    case 'd':
    case 0x91: {  // LIST, DICT, FROZENSET from marked items
      UCFS_ASSIGN_OR_RETURN(auto items, PopMark());
      Node n;
      n.kind = op == 'l' ? Kind::kList : op == 'd' ? Kind::kDict : Kind::kFrozenSet;
      if (op == 'd' && items.size() % 2 != 0) return Fail("DICT with an odd number of items");
      n.items = std::move(items);
      return Push(std::move(n));
    }
    default:
      return UnsupportedOpcode(op);
  }
}

// Adding items to the container below them on the stack.
Status Reader::FillContainerOp(uint8_t op) {
  switch (op) {
    case 'a': {  // APPEND
      UCFS_ASSIGN_OR_RETURN(NodeId value, Pop());
      UCFS_ASSIGN_OR_RETURN(NodeId target, Top());
      return Append(target, {value});
    }
    case 'e': {  // APPENDS
      UCFS_ASSIGN_OR_RETURN(auto values, PopMark());
      UCFS_ASSIGN_OR_RETURN(NodeId target, Top());
      return Append(target, values);
    }
    case 0x90: {  // ADDITEMS
      UCFS_ASSIGN_OR_RETURN(auto values, PopMark());
      UCFS_ASSIGN_OR_RETURN(NodeId target, Top());
      Node& t = doc_.mutable_node(target);
      if (t.kind != Kind::kSet) return Fail("ADDITEMS to a " + std::string(KindName(t.kind)));
      t.items.insert(t.items.end(), values.begin(), values.end());
      return Status::OK();
    }
    case 's': {  // SETITEM
      UCFS_ASSIGN_OR_RETURN(NodeId value, Pop());
      UCFS_ASSIGN_OR_RETURN(NodeId key, Pop());
      UCFS_ASSIGN_OR_RETURN(NodeId target, Top());
      return SetItems(target, {key, value});
    }
    case 'u': {  // SETITEMS
      UCFS_ASSIGN_OR_RETURN(auto kv, PopMark());
      UCFS_ASSIGN_OR_RETURN(NodeId target, Top());
      return SetItems(target, kv);
    }
    default:
      return UnsupportedOpcode(op);
  }
}

// Globals and the calls made of them, recorded and never made.
Status Reader::GlobalOrCallOp(uint8_t op) {
  switch (op) {
    case 'c': {  // GLOBAL module\nname\n
      UCFS_ASSIGN_OR_RETURN(std::string_view module, ReadLine());
      UCFS_ASSIGN_OR_RETURN(std::string_view name, ReadLine());
      return PushGlobal(module, name);
    }
    case 0x93: {  // STACK_GLOBAL
      UCFS_ASSIGN_OR_RETURN(NodeId name, Pop());
      UCFS_ASSIGN_OR_RETURN(NodeId module, Pop());
      auto m = doc_.AsStr(module);
      auto n = doc_.AsStr(name);
      if (!m || !n) return Fail("STACK_GLOBAL needs two strings");
      if (m->find('\n') != std::string_view::npos || n->find('\n') != std::string_view::npos) {
        return Fail("STACK_GLOBAL names a module or class with a newline");
      }
      return PushGlobal(*m, *n);
    }
    case 'R':
    case 0x81: {  // REDUCE, NEWOBJ: record the call, never make it
      UCFS_ASSIGN_OR_RETURN(NodeId args, Pop());
      UCFS_ASSIGN_OR_RETURN(NodeId callable, Pop());
      if (doc_.node(args).kind != Kind::kTuple) {
        return Fail(std::string(op == 'R' ? "REDUCE" : "NEWOBJ") + " arguments are a " +
                    std::string(KindName(doc_.node(args).kind)) + ", not a tuple");
      }
      Node n;
      n.kind = op == 'R' ? Kind::kReduce : Kind::kNewObj;
      n.a = callable;
      n.b = args;
      return Push(std::move(n));
    }
    case 'b': {  // BUILD
      UCFS_ASSIGN_OR_RETURN(NodeId state, Pop());
      UCFS_ASSIGN_OR_RETURN(NodeId target, Top());
      Node& t = doc_.mutable_node(target);
      if (t.kind != Kind::kReduce && t.kind != Kind::kNewObj) {
        return Fail("BUILD on a " + std::string(KindName(t.kind)));
      }
      if (t.state != kNoNode) return Fail("a second BUILD on one object");
      t.state = state;
      return Status::OK();
    }
    default:
      return UnsupportedOpcode(op);
  }
}

// BINPERSID and PERSID: references to data outside the pickle.
Status Reader::PersistentIdOp(uint8_t op) {
  switch (op) {
    case 'Q': {  // BINPERSID
      UCFS_ASSIGN_OR_RETURN(NodeId pid, Pop());
      Node n;
      n.kind = Kind::kPersistentId;
      n.a = pid;
      return Push(std::move(n));
    }
    case 'P': {  // PERSID (protocol 0): the id is a line of text
      UCFS_ASSIGN_OR_RETURN(std::string_view line, ReadLine());
      Node pid;
      pid.kind = Kind::kStr;
      pid.text = std::string(line);
      NodeId pid_id = doc_.Add(std::move(pid));
      Node n;
      n.kind = Kind::kPersistentId;
      n.a = pid_id;
      return Push(std::move(n));
    }
    default:
      return UnsupportedOpcode(op);
  }
}

// Storing the top of the stack in the memo (PUT) and pushing it back (GET).
Status Reader::MemoOp(uint8_t op) {
  switch (op) {
    case 'q': {
      UCFS_ASSIGN_OR_RETURN(uint64_t idx, ReadUInt(1));
      return Memoize(idx);
    }
    case 'r': {
      UCFS_ASSIGN_OR_RETURN(uint64_t idx, ReadUInt(4));
      return Memoize(idx);
    }
    case 0x94:  // MEMOIZE
      return Memoize(memo_.size());
    case 'h': {
      UCFS_ASSIGN_OR_RETURN(uint64_t idx, ReadUInt(1));
      return Recall(idx);
    }
    case 'j': {
      UCFS_ASSIGN_OR_RETURN(uint64_t idx, ReadUInt(4));
      return Recall(idx);
    }
    default:
      return UnsupportedOpcode(op);
  }
}

Status Reader::UnsupportedOpcode(uint8_t op) const {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", op);
  return Status::NotSupported("pickle: unsupported opcode " + std::string(buf) + " at byte " +
                              std::to_string(op_pos_));
}

Result<Document> Reader::Run() {
  if (data_.size() > limits_.max_bytes) {
    return Status::InvalidArgument("pickle: " + std::to_string(data_.size()) +
                                   " bytes, more than the limit of " +
                                   std::to_string(limits_.max_bytes));
  }
  while (!stopped_) {
    op_pos_ = pos_;
    if (pos_ >= data_.size()) return Fail("truncated: no STOP opcode");
    uint8_t op = static_cast<uint8_t>(data_[pos_++]);
    UCFS_RETURN_IF_ERROR(Step(op));
  }
  if (stack_.size() != 1 || !marks_.empty()) {
    return Fail("STOP with " + std::to_string(stack_.size()) + " values on the stack, not 1");
  }
  doc_.set_root(stack_.back());
  UCFS_RETURN_IF_ERROR(CheckShallowAndAcyclic(doc_, limits_.max_depth));
  return std::move(doc_);
}

}  // namespace

Result<Document> Parse(std::string_view data, const ParseLimits& limits) {
  return Reader(data, limits).Run();
}

Result<Document> ParsePrefix(std::string_view data, size_t* end, const ParseLimits& limits) {
  Reader reader(data, limits);
  UCFS_ASSIGN_OR_RETURN(Document doc, reader.Run());
  *end = reader.position();
  return doc;
}

bool IsTruncation(const Status& status) {
  return status.code() == Status::Code::kCorruption &&
         std::string_view(status.message()).starts_with(kTruncated);
}

}  // namespace ucfs::pickle
