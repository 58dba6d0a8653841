#include "ucfs/checkpoint/whole_params.h"

#include <algorithm>

namespace ucfs {

WholeParamsLayout PlaceWholeParams(uint64_t partition_numel, uint32_t world,
                                   std::span<const uint64_t> offsets,
                                   std::span<const uint64_t> numels) {
  WholeParamsLayout layout;
  layout.rank_numel.assign(world, 0);
  layout.first_rank.assign(offsets.size(), 0);
  layout.offset.assign(offsets.size(), 0);
  if (partition_numel == 0 || world == 0) return layout;
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (numels[i] == 0) continue;
    // params_in_partition (stage_1_and_2.py get_partition_info): every param
    // with an element in [r·P, r·P + P). The ranks a param touches are
    // consecutive; walking them costs the param count plus W in all, as
    // consecutive params share at most their boundary rank.
    const uint64_t first = offsets[i] / partition_numel;
    const uint64_t last =
        std::min<uint64_t>((offsets[i] + numels[i] - 1) / partition_numel, uint64_t{world} - 1);
    if (first >= world) continue;
    layout.first_rank[i] = static_cast<uint32_t>(first);
    layout.offset[i] = layout.rank_numel[first];
    for (uint64_t r = first; r <= last; ++r) layout.rank_numel[r] += numels[i];
  }
  return layout;
}

}  // namespace ucfs
