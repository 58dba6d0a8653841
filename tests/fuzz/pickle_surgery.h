// Surgery on a parsed pickle (Document), for the checkpoint
// fuzz targets' mutation programs: where a node sits (a Place: replacing it
// changes its parent's slot), ways to reach one (by path, by kind, by index,
// a part of a tensor's rebuild call), and putting another node there.
#ifndef UCFS_TESTS_FUZZ_PICKLE_SURGERY_H_
#define UCFS_TESTS_FUZZ_PICKLE_SURGERY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ucfs/codec/pickle.h"

namespace ucfs_fuzz {

// The pickle names every mutation file uses, said once.
using ucfs::pickle::Document;
using ucfs::pickle::Kind;
using ucfs::pickle::kNoNode;
using ucfs::pickle::Node;
using ucfs::pickle::NodeId;

struct Place {
  NodeId node = kNoNode;
  NodeId parent = kNoNode;  // kNoNode: the root
  size_t slot = 0;          // in Children(parent)
};

// A node's children in a fixed order: a, b, state, then items.
std::vector<NodeId*> Children(Document& doc, NodeId id);
void Replace(Document& doc, const Place& at, NodeId with);
// Whether `target` is reachable from `from` (sharing `from` below `target`
// would make a cycle).
bool Reaches(const Document& doc, NodeId from, NodeId target);

// Places (node kNoNode when there is none).

// The first parent of `id` in document order (node kNoNode when unreachable:
// editing it would change nothing).
Place PlaceOf(Document& doc, NodeId id);
// Child j (mod their number) of `parent`, in Children's order.
Place ChildPlace(Document& doc, NodeId parent, size_t j);
bool IsMappingNode(const Document& doc, NodeId id);
// The k-th value of a mapping, or the k-th item of a sequence.
Place Element(Document& doc, NodeId id, size_t k);
// The value under string key `key` of a mapping.
Place Field(Document& doc, NodeId id, std::string_view key);
// A path of keys from the root, "*" taking the next of k1, k2 as an element
// index; `index` picks the path (mod their number).
using NamedPath = const char* const[5];
Place NamedPlace(Document& doc, std::span<const NamedPath> paths, size_t index, uint8_t k1,
                 uint8_t k2);

// Tensors (torch rebuild calls, as ucfs::MatchTensor sees them).
bool IsTensorCall(const Document& doc, NodeId id);
// The plain tensor call of a tensor node (through _rebuild_parameter).
NodeId PlainCall(const Document& doc, NodeId id);
// One of 14 parts of a tensor rebuild call: storage class, key, location,
// numel, offset, size, stride, requires_grad, the argument tuple, ...
Place TensorPart(Document& doc, NodeId call, uint8_t part);
// Every tensor call at or below `id`, in document order.
std::vector<NodeId> TensorsBelow(const Document& doc, NodeId id);

// The k-th node (mod their number) of a kind, tensor, torch.Size; kNoNode if none.
NodeId KthOfKind(const Document& doc, Kind kind, size_t k);
NodeId KthTensor(const Document& doc, size_t k);
NodeId KthSize(const Document& doc, size_t k);

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_PICKLE_SURGERY_H_
