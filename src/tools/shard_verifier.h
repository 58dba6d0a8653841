// `ucfs verify` of one data-parallel checkpoint: a checkpoint ucfs reads as
// it is, or one shard group (p, t) of a tensor- and pipeline-parallel grid.
// Every rank file on its own (present, a readable torch.save zip, every
// tensor inside its record, partition_count / dp_world_size, the Adam
// steps), the files against each other, the checkpoint as a whole
// (Checkpoint::OpenShard), and the NaN/Inf scan. Internal to verify.cc.
#ifndef UCFS_TOOLS_SHARD_VERIFIER_H_
#define UCFS_TOOLS_SHARD_VERIFIER_H_

#include <memory>

#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/tools/verify.h"

namespace ucfs {

struct ShardVerdict {
  // Its files' problems in rank order, each rank's optimizer file before
  // its model states.
  VerifyReport report;
  // The checkpoint as opened, or null where it does not open.
  std::shared_ptr<const Checkpoint> checkpoint;
};

// `files` as ListParallelCheckpointFiles lists them: a missing file is "".
ShardVerdict VerifyShard(Env& env, const VerifyOptions& options, CheckpointFiles files);

}  // namespace ucfs

#endif  // UCFS_TOOLS_SHARD_VERIFIER_H_
