// What `ucfs inspect` prints about a checkpoint, as text or JSON.
#ifndef UCFS_CHECKPOINT_INSPECT_REPORT_H_
#define UCFS_CHECKPOINT_INSPECT_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"

namespace ucfs {

nlohmann::ordered_json InspectJson(const Checkpoint& ckpt);
std::string InspectText(const Checkpoint& ckpt);

// A tensor- and pipeline-parallel grid: its degrees, each shard group, and
// the universal name table (how each param's slices merge, or why they
// cannot), with the warning that a load at another tensor-parallel degree
// would be wrong. A 1 x 1 x D grid (ParallelCheckpoint::OfDataParallel) is
// reported as the checkpoint it is, with its universal_checkpoint_info's
// name table when it has one (a Megatron-DeepSpeed run saved at T = 1).
nlohmann::ordered_json InspectJson(const ParallelCheckpoint& grid);
std::string InspectText(const ParallelCheckpoint& grid);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_INSPECT_REPORT_H_
