// ZeRO partition arithmetic, in one place: how each stage spreads a
// parameter's elements over the data-parallel ranks.
//
// ZeRO-3 (stage3.py) partitions each parameter on its own. A parameter of n elements on W
// data-parallel ranks is padded to W*P elements, P = ceil(n/W), and rank r holds global elements
// [r*P, r*P+P). The valid (non-padding) part of rank r's slot is max(0, min(P, n - r*P)) elements:
// padding can cover several trailing ranks when n is small (n=5, W=4: ranks hold 2, 2, 1, 0 valid
// elements). DeepSpeed 0.14.5's converter computes min(P, abs(n - r*P)) instead and exports
// padding; nothing here repeats that.
#ifndef UCFS_CHECKPOINT_PARTITION_H_
#define UCFS_CHECKPOINT_PARTITION_H_

#include <cstdint>
#include <optional>
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

// --- ZeRO stages 1 and 2 (stage_1_and_2.py, bf16_optimizer.py) ------------
//
// Each param group's trainable parameters are flattened, in param_shapes
// order, into one buffer of n elements, zero-padded to a multiple of 2·W
// (nccl_start_alignment_factor 2 times the world size), and cut into W equal
// partitions: rank r holds flat elements [r·P, r·P+P), P = padded / W. A
// parameter lies wherever its offset in the buffer puts it (after the
// alignment paddings of the params before it, if any), across any
// number of ranks. All padding is at the end, so only the last ranks hold
// it (`group_paddings` records it on the last rank only, even when it
// reaches into earlier ranks).

// P for a group of `group_numel` elements.
uint64_t FlatPartitionNumel(uint64_t group_numel, uint32_t world);
// The padding: W·P − n.
uint64_t FlatGroupPadding(uint64_t group_numel, uint32_t world);
// Valid (non-padding) elements of rank `rank`'s partition.
uint64_t FlatValidNumel(uint64_t group_numel, uint32_t world, uint32_t rank);
// The elements of rank `rank`'s fp32 partition DeepSpeedZeroOptimizer saves:
// it drops `group_paddings[rank]` from the end with a Python slice,
// partition[:P - padding], so a padding longer than P keeps P - (padding - P)
// elements, or none (BF16_Optimizer saves all P).
uint64_t ZeroOptimizerSavedNumel(uint64_t group_numel, uint32_t world, uint32_t rank);

// zero_optimization.parameter_alignment (DeepSpeed 0.19.x, stage_1_and_2.py,
// DeepSpeedZeroOptimizer only): inside each group's flat buffer a zero
// padding follows every param but the last, so that each param starts 16
// bytes aligned: 16 / gcd(16, element size) elements of the training dtype
// (4 for float32, 8 for 16-bit dtypes). The group's n above is then its
// params' elements with these paddings, and the end padding to 2·W follows
// from it as before: the paddings do not depend on W.
uint64_t ParamAlignmentElements(uint64_t element_size);
// The padding after each param of a group whose params have `numels`
// elements, in flat order, at `alignment` elements (1: none).
std::vector<uint64_t> ParamAlignmentPaddings(std::span<const uint64_t> numels, uint64_t alignment);

// Splits flat elements [begin, end) of a group's buffer, P elements per
// rank, into the ranks that hold them, in order (global_begin counts in the
// flat buffer).
std::vector<RankPiece> SplitFlatByRank(uint64_t partition_numel, uint64_t begin, uint64_t end);

// The part of a param — flat elements [offset, offset + numel) — that rank
// `rank`'s partition holds, as DeepSpeed records it in param_slice_mappings
// (tensor_fragment.py get_hp_fragment_mapping); nullopt if none.
struct FlatFragment {
  uint64_t partition_start = 0;  // where it starts in the rank's partition (fragment_address.start)
  uint64_t param_start = 0;      // ... and in the param
  uint64_t numel = 0;
};
std::optional<FlatFragment> FragmentOnRank(uint64_t partition_numel, uint64_t offset,
                                           uint64_t numel, uint32_t rank);

// DeepSpeed's default zero_optimization.sub_group_size.
inline constexpr uint64_t kDefaultSubGroupSize = 1000000000;

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_PARTITION_H_
