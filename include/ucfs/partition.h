// ZeRO-3 partition arithmetic, in one place.
//
// A parameter of n elements on W data-parallel ranks is padded to W*P
// elements, P = ceil(n/W), and rank r holds global elements [r*P, r*P+P).
// The valid (non-padding) part of rank r's slot is max(0, min(P, n - r*P))
// elements: padding can cover several trailing ranks when n is small
// (n=5, W=4: ranks hold 2, 2, 1, 0 valid elements). DeepSpeed 0.14.5's
// converter computes min(P, abs(n - r*P)) instead and exports padding;
// nothing here repeats that.
#ifndef UCFS_PARTITION_H_
#define UCFS_PARTITION_H_

#include <cstdint>
#include <span>
#include <vector>

namespace ucfs {

// P = ceil(n / world).
uint64_t PartitionNumel(uint64_t numel, uint32_t world);
// Valid elements of rank `rank`'s slot.
uint64_t ValidNumel(uint64_t numel, uint32_t world, uint32_t rank);

// One rank's part of a range of a parameter's global elements.
struct RankPiece {
  uint32_t rank = 0;
  uint64_t slot_offset = 0;  // first element, counted from the start of the rank's slot
  uint64_t count = 0;
  uint64_t global_begin = 0;  // the same first element, counted in the full parameter
};

// Splits global elements [begin, end) of a parameter of `numel` elements
// (end <= numel) into the ranks that hold them, in order.
std::vector<RankPiece> SplitByRank(uint64_t numel, uint32_t world, uint64_t begin, uint64_t end);

// DeepSpeed's sub-group split of one parameter group (stage3.py
// _create_fp16_sub_groups): walking the group's params in order, a
// sub-group closes when the sum of its params' partition sizes reaches
// `sub_group_size` or at the group's last param; a group whose whole
// partition fits in `sub_group_size` is a single sub-group. Returns the
// number of params in each sub-group.
std::vector<uint32_t> SplitSubGroups(std::span<const uint64_t> partition_numels,
                                     uint64_t sub_group_size);

// DeepSpeed's default zero_optimization.sub_group_size.
inline constexpr uint64_t kDefaultSubGroupSize = 1000000000;

}  // namespace ucfs

#endif  // UCFS_PARTITION_H_
