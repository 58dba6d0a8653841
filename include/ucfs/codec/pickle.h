// Python pickles as a value tree, read and written without executing anything.
//
// torch.save stores its object graph as a protocol-2 pickle (data.pkl).
// Parse() turns one into a Document: a graph of Nodes in which a value the
// pickle referenced twice (through its memo) is one shared node. Globals stay
// names (module, name); REDUCE/NEWOBJ stay "call this with these arguments"
// records; nothing is imported, called or evaluated. Write() is the inverse
// and emulates CPython's Pickler at protocol 2 — memo numbering, batching of
// APPENDS/SETITEMS, integer encodings — so that Write(Parse(x)) == x for
// every pickle Python wrote, and an edited Document (a changed
// partition_count, a replaced list of tensors) comes out as Python would
// have written the edited object.
#ifndef UCFS_CODEC_PICKLE_H_
#define UCFS_CODEC_PICKLE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/status.h"

namespace ucfs::pickle {

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,   // fits int64
  kLong,  // larger: `text` holds its little-endian two's-complement bytes
  kFloat,
  kStr,           // UTF-8 in `text`
  kBytes,         // raw bytes in `text`
  kTuple,         // items
  kList,          // items
  kDict,          // items = key0, value0, key1, value1, ... (insertion order)
  kSet,           // items
  kFrozenSet,     // items
  kGlobal,        // `text` = module, `name` = qualified name
  kReduce,        // callable(*args): a = callable, b = args (a tuple)
  kNewObj,        // cls.__new__(cls, *args): a = cls, b = args
  kPersistentId,  // a = the persistent id object (torch: a 5-tuple)
};

std::string_view KindName(Kind kind);

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = 0xffffffffu;

struct Node {
  Kind kind = Kind::kNone;
  NodeId a = kNoNode;  // reduce/newobj callable or class; persistent id
  NodeId b = kNoNode;  // reduce/newobj arguments
  // For kReduce/kNewObj: the object's state from BUILD.
  NodeId state = kNoNode;
  // kBool: 0/1. kInt: the value. kFloat: the bit pattern of the double.
  int64_t scalar = 0;
  std::string text;
  std::string name;
  // Container elements; for kReduce/kNewObj the items added after creation:
  // first `list_items` APPEND(S) values, then SETITEM(S) key/value pairs.
  std::vector<NodeId> items;
  uint32_t list_items = 0;

  double float_value() const;
};

struct ParseLimits {
  uint64_t max_bytes = uint64_t{1} << 31;
  // A node costs about 120 bytes, and one opcode byte can make one: 4M
  // nodes (~500 MB) keeps a hostile pickle within a command's memory and is
  // ~20 values per parameter for models of 200k parameters.
  uint64_t max_nodes = uint64_t{1} << 22;
  // Nesting depth of containers; CPython's own recursion limit is 1000.
  uint32_t max_depth = 1000;
};

// Nodes never move: a Node reference (and a view of its text) stays valid for
// the document's lifetime, whatever is added after it, so building code may
// hold one across Add* calls. Only changing that node itself (mutable_node,
// Append, AppendPair) can invalidate iterators into its `items`.
class Document {
 public:
  const Node& node(NodeId id) const { return nodes_[id]; }
  Node& mutable_node(NodeId id) { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }
  NodeId root() const { return root_; }
  void set_root(NodeId id) { root_ = id; }

  // --- building -----------------------------------------------------------
  NodeId Add(Node node);
  NodeId AddNone();
  NodeId AddBool(bool v);
  NodeId AddInt(int64_t v);
  NodeId AddFloat(double v);
  NodeId AddStr(std::string v);
  NodeId AddTuple(std::vector<NodeId> items);
  NodeId AddList(std::vector<NodeId> items);
  // kv = key0, value0, key1, value1, ...
  NodeId AddDict(std::vector<NodeId> kv);
  // One node per (module, name), as CPython memoizes a class once per pickle.
  NodeId Global(std::string_view module, std::string_view name);
  NodeId AddReduce(NodeId callable, NodeId args);
  NodeId AddPersistentId(NodeId pid);
  // Adds `item` to a list, tuple or set node.
  void Append(NodeId container, NodeId item);
  // Adds key -> value to a dict node (or an object built by SETITEMS).
  void AppendPair(NodeId mapping, NodeId key, NodeId value);
  // Copies the subgraph at `id` of `other` into this document, keeping its
  // sharing (a node reached twice is copied once) and interning globals.
  // `copied` maps other's ids to ours across calls; pass the same map to
  // share nodes between several copied subgraphs.
  NodeId CopyFrom(const Document& other, NodeId id, std::vector<NodeId>* copied);

  // --- reading helpers ----------------------------------------------------
  bool IsGlobal(NodeId id, std::string_view module, std::string_view name) const;
  // The key/value pairs of a dict, or of an object built by SETITEMS on a
  // REDUCE result (collections.OrderedDict); nullopt for anything else.
  std::optional<std::vector<std::pair<NodeId, NodeId>>> MappingItems(NodeId id) const;
  // The value under string key `key` of a mapping, or kNoNode.
  NodeId Get(NodeId mapping, std::string_view key) const;
  // Elements of a tuple or list (or the APPENDS items of a REDUCE result).
  std::optional<std::vector<NodeId>> SequenceItems(NodeId id) const;
  std::optional<int64_t> AsInt(NodeId id) const;    // int or bool
  std::optional<double> AsNumber(NodeId id) const;  // int, bool or float
  // The view points into the node: valid until that node is changed.
  std::optional<std::string_view> AsStr(NodeId id) const;
  // A Python-like rendering for messages and debugging, cut at max_chars.
  std::string Repr(NodeId id, size_t max_chars = 200) const;

 private:
  // A deque, not a vector: growing it never moves a node (see above).
  std::deque<Node> nodes_;
  NodeId root_ = kNoNode;
  struct GlobalKey {
    std::string module, name;
    NodeId id;
  };
  std::vector<GlobalKey> globals_;
};

// Parses a pickle. Every malformed input is an error naming the byte offset;
// nothing in it is ever executed.
Result<Document> Parse(std::string_view data, const ParseLimits& limits = {});
// Parses the pickle at the start of `data`, which may go on past its STOP
// (torch's legacy format is pickles back to back); *end is the offset just
// after STOP.
Result<Document> ParsePrefix(std::string_view data, size_t* end, const ParseLimits& limits = {});
// Whether a Parse error says only that the input ended before STOP, so that
// more bytes might complete it.
bool IsTruncation(const Status& status);

// Rejects a reference cycle and values nested more than `max_depth` deep
// below the root, so that everything that walks a Document recursively
// (the writer, Repr, CopyFrom) is bounded: what Parse checks last.
Status CheckShallowAndAcyclic(const Document& doc, uint32_t max_depth);

// Serialises `doc` from its root as CPython's Pickler at protocol 2 would.
// With `persistent_ids`, also lists the persistent-id nodes in the order
// they are written (the order torch.save numbers its storages in).
Result<std::string> Write(const Document& doc, std::vector<NodeId>* persistent_ids = nullptr);

}  // namespace ucfs::pickle

#endif  // UCFS_CODEC_PICKLE_H_
