// Surgery on a parsed pickle (ucfs::pickle::Document), for the checkpoint
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

struct Place {
  ucfs::pickle::NodeId node = ucfs::pickle::kNoNode;
  ucfs::pickle::NodeId parent = ucfs::pickle::kNoNode;  // kNoNode: the root
  size_t slot = 0;                                      // in Children(parent)
};

// A node's children in a fixed order: a, b, state, then items.
std::vector<ucfs::pickle::NodeId*> Children(ucfs::pickle::Document& doc, ucfs::pickle::NodeId id);
void Replace(ucfs::pickle::Document& doc, const Place& at, ucfs::pickle::NodeId with);
// Whether `target` is reachable from `from` (sharing `from` below `target`
// would make a cycle).
bool Reaches(const ucfs::pickle::Document& doc, ucfs::pickle::NodeId from,
             ucfs::pickle::NodeId target);

// Places (node kNoNode when there is none).

// The first parent of `id` in document order (node kNoNode when unreachable:
// editing it would change nothing).
Place PlaceOf(ucfs::pickle::Document& doc, ucfs::pickle::NodeId id);
// Child j (mod their number) of `parent`, in Children's order.
Place ChildPlace(ucfs::pickle::Document& doc, ucfs::pickle::NodeId parent, size_t j);
bool IsMappingNode(const ucfs::pickle::Document& doc, ucfs::pickle::NodeId id);
// The k-th value of a mapping, or the k-th item of a sequence.
Place Element(ucfs::pickle::Document& doc, ucfs::pickle::NodeId id, size_t k);
// The value under string key `key` of a mapping.
Place Field(ucfs::pickle::Document& doc, ucfs::pickle::NodeId id, std::string_view key);
// A path of keys from the root, "*" taking the next of k1, k2 as an element
// index; `index` picks the path (mod their number).
using NamedPath = const char* const[5];
Place NamedPlace(ucfs::pickle::Document& doc, std::span<const NamedPath> paths, size_t index,
                 uint8_t k1, uint8_t k2);

// Tensors (torch rebuild calls, as ucfs::MatchTensor sees them).
bool IsTensorCall(const ucfs::pickle::Document& doc, ucfs::pickle::NodeId id);
// The plain tensor call of a tensor node (through _rebuild_parameter).
ucfs::pickle::NodeId PlainCall(const ucfs::pickle::Document& doc, ucfs::pickle::NodeId id);
// One of 14 parts of a tensor rebuild call: storage class, key, location,
// numel, offset, size, stride, requires_grad, the argument tuple, ...
Place TensorPart(ucfs::pickle::Document& doc, ucfs::pickle::NodeId call, uint8_t part);
// Every tensor call at or below `id`, in document order.
std::vector<ucfs::pickle::NodeId> TensorsBelow(const ucfs::pickle::Document& doc,
                                               ucfs::pickle::NodeId id);

// The k-th node (mod their number) of a kind, tensor, torch.Size; kNoNode if none.
ucfs::pickle::NodeId KthOfKind(const ucfs::pickle::Document& doc, ucfs::pickle::Kind kind,
                               size_t k);
ucfs::pickle::NodeId KthTensor(const ucfs::pickle::Document& doc, size_t k);
ucfs::pickle::NodeId KthSize(const ucfs::pickle::Document& doc, size_t k);

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_PICKLE_SURGERY_H_
