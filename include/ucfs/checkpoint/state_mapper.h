// StateMapper: where the bytes of a param's full state (or a frozen param's
// value) lie in the source files, for files ucfs synthesises. A Checkpoint
// is one (shard 0); a ParallelCheckpoint maps through its shard groups, so
// one synthesised file can gather the T slices of a tensor-parallel param.
#ifndef UCFS_CHECKPOINT_STATE_MAPPER_H_
#define UCFS_CHECKPOINT_STATE_MAPPER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucfs/base/status.h"

namespace ucfs {

struct Extent;

class StateMapper {
 public:
  virtual ~StateMapper() = default;
  // Extents of bytes [begin, end) of state `state` of param `param` of
  // shard group `shard` (Checkpoint::MapState); Extent::file indexes the
  // mapper's sources.
  virtual Status MapShardState(uint32_t shard, size_t param, size_t state, uint64_t begin,
                               uint64_t end, std::vector<Extent>* out) const = 0;
  // The same for frozen param `frozen`'s value (Checkpoint::MapFrozen).
  virtual Status MapShardFrozen(uint32_t shard, size_t frozen, uint64_t begin, uint64_t end,
                                std::vector<Extent>* out) const = 0;
};

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_STATE_MAPPER_H_
