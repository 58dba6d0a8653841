// Muon's momentum at ZeRO-1/2: the "whole params touched" partitioning.
//
// DeepSpeed 0.19.8's DeepSpeedZeroOptimizer keeps one momentum_buffer per
// Muon param group on each rank (stage_1_and_2.py _muon_momentum_buffer):
// torch.zeros(sum(t.numel() for t in params_in_partition)), the WHOLE params
// that rank's flat partition touches, concatenated in flat order, because
// Newton-Schulz needs each matrix whole. A param crossing a partition
// boundary is thus held, whole, by every rank it touches (replicas that
// the ranks keep equal by all-reducing its update). ucfs reads each param
// from the lowest rank holding it.
#ifndef UCFS_CHECKPOINT_WHOLE_PARAMS_H_
#define UCFS_CHECKPOINT_WHOLE_PARAMS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace ucfs {

struct WholeParamsLayout {
  // Per rank: the elements of its buffer (0 where the partition touches no
  // param, and DeepSpeed then keeps no buffer at all).
  std::vector<uint64_t> rank_numel;
  // Per param (in the order given): the lowest rank whose partition touches
  // it, and where the param starts in that rank's buffer. A param of no
  // elements touches no rank: first_rank 0, offset 0.
  std::vector<uint32_t> first_rank;
  std::vector<uint64_t> offset;
};

// The buffers of one flat group of W = `world` partitions of
// `partition_numel` elements, whose params start at `offsets` (elements
// from the start of the group's flat buffer; increasing: the flat order)
// and have `numels` elements each. Params past the last partition count on
// no rank (the caller bounds them).
WholeParamsLayout PlaceWholeParams(uint64_t partition_numel, uint32_t world,
                                   std::span<const uint64_t> offsets,
                                   std::span<const uint64_t> numels);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_WHOLE_PARAMS_H_
