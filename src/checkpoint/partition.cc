#include "ucfs/checkpoint/partition.h"

#include <algorithm>
#include <numeric>

namespace ucfs {

uint64_t PartitionNumel(uint64_t numel, uint32_t world) {
  return world == 0 ? 0 : (numel + world - 1) / world;
}

uint64_t ValidNumel(uint64_t numel, uint32_t world, uint32_t rank) {
  const uint64_t p = PartitionNumel(numel, world);
  const uint64_t start = p * rank;
  return start >= numel ? 0 : std::min(p, numel - start);
}

std::vector<RankPiece> SplitByRank(uint64_t numel, uint32_t world, uint64_t begin, uint64_t end) {
  std::vector<RankPiece> pieces;
  end = std::min(end, numel);
  if (begin >= end) return pieces;
  const uint64_t p = PartitionNumel(numel, world);
  for (uint64_t pos = begin; pos < end;) {
    const auto rank = static_cast<uint32_t>(pos / p);
    const uint64_t slot_start = static_cast<uint64_t>(rank) * p;
    const uint64_t slot_end = std::min(slot_start + p, end);
    pieces.push_back({rank, pos - slot_start, slot_end - pos, pos});
    pos = slot_end;
  }
  return pieces;
}

uint64_t FlatPartitionNumel(uint64_t group_numel, uint32_t world) {
  if (world == 0) return 0;
  const uint64_t align = 2 * static_cast<uint64_t>(world);
  return (group_numel + align - 1) / align * 2;
}

uint64_t FlatGroupPadding(uint64_t group_numel, uint32_t world) {
  return FlatPartitionNumel(group_numel, world) * world - group_numel;
}

uint64_t FlatValidNumel(uint64_t group_numel, uint32_t world, uint32_t rank) {
  const uint64_t p = FlatPartitionNumel(group_numel, world);
  const uint64_t start = p * rank;
  return start >= group_numel ? 0 : std::min(p, group_numel - start);
}

uint64_t ZeroOptimizerSavedNumel(uint64_t group_numel, uint32_t world, uint32_t rank) {
  const uint64_t p = FlatPartitionNumel(group_numel, world);
  const uint64_t padding = rank + 1 == world ? FlatGroupPadding(group_numel, world) : 0;
  if (padding <= p) return p - padding;
  // partition[:-k] keeps p - k elements, none when k >= p.
  const uint64_t k = padding - p;
  return k >= p ? 0 : p - k;
}

uint64_t ParamAlignmentElements(uint64_t element_size) {
  return element_size == 0 ? 1 : 16 / std::gcd(uint64_t{16}, element_size);
}

std::vector<uint64_t> ParamAlignmentPaddings(std::span<const uint64_t> numels, uint64_t alignment) {
  // stage_1_and_2.py: padding = 0 if last else (-current_offset) % alignment,
  // current_offset counting the paddings before.
  std::vector<uint64_t> paddings;
  uint64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    offset += numels[i];
    const uint64_t rem = alignment <= 1 ? 0 : offset % alignment;
    const uint64_t padding = i + 1 == numels.size() || rem == 0 ? 0 : alignment - rem;
    paddings.push_back(padding);
    offset += padding;
  }
  return paddings;
}

std::vector<RankPiece> SplitFlatByRank(uint64_t partition_numel, uint64_t begin, uint64_t end) {
  std::vector<RankPiece> pieces;
  if (begin >= end || partition_numel == 0) return pieces;
  for (uint64_t pos = begin; pos < end;) {
    const uint64_t rank = pos / partition_numel;
    const uint64_t slot_start = rank * partition_numel;
    const uint64_t slot_end = std::min(slot_start + partition_numel, end);
    pieces.push_back({static_cast<uint32_t>(rank), pos - slot_start, slot_end - pos, pos});
    pos = slot_end;
  }
  return pieces;
}

std::optional<FlatFragment> FragmentOnRank(uint64_t partition_numel, uint64_t offset,
                                           uint64_t numel, uint32_t rank) {
  const uint64_t part_begin = rank * partition_numel;
  const uint64_t begin = std::max(part_begin, offset);
  const uint64_t end = std::min(part_begin + partition_numel, offset + numel);
  if (begin >= end) return std::nullopt;
  return FlatFragment{begin - part_begin, begin - offset, end - begin};
}

std::vector<uint32_t> SplitSubGroups(std::span<const uint64_t> partition_numels,
                                     uint64_t sub_group_size) {
  std::vector<uint32_t> sizes;
  if (partition_numels.empty()) return sizes;
  const uint64_t total =
      std::accumulate(partition_numels.begin(), partition_numels.end(), uint64_t{0});
  if (sub_group_size >= total) {
    sizes.push_back(static_cast<uint32_t>(partition_numels.size()));
    return sizes;
  }
  uint32_t count = 0;
  uint64_t sum = 0;
  for (size_t i = 0; i < partition_numels.size(); ++i) {
    ++count;
    sum += partition_numels[i];
    if (sum >= sub_group_size || i + 1 == partition_numels.size()) {
      sizes.push_back(count);
      count = 0;
      sum = 0;
    }
  }
  return sizes;
}

}  // namespace ucfs
