// The consolidated weights of a tensor- and pipeline-parallel checkpoint,
// which zero_to_fp32.py refuses ("Expected 2 ... found 4 files", "not a
// zero checkpoint"): <tag>_fp32/ as consolidated_view.h lays it out, each
// trainable param its fp32 master weights merged over the T slices at full
// shape (the ParallelCheckpoint's name table: the universal files' tensors),
// named as in param_shapes, in the stages' order.
//
// A padded vocabulary is cut to original_vocab_size rows, as the universal
// files cut it: the padding depends on the saving T (Megatron pads to a
// multiple of make_vocab_size_divisible_by * T), so the same model saved at
// T = 2 and at T = 4 gives the same tensors. (zero_to_fp32.py at T = 1 keeps
// the padded rows: without universal_checkpoint_info it cannot know them.)
// Buffers come from tensor rank 0 of each stage, the first stage's where
// stages share a name; tied aliases as each stage lists them. Frozen params
// at T > 1 are refused: how their slices merge is not in the name table.
#ifndef UCFS_VIEW_PARALLEL_CONSOLIDATED_VIEW_H_
#define UCFS_VIEW_PARALLEL_CONSOLIDATED_VIEW_H_

#include <memory>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/view/consolidated_view.h"
#include "ucfs/view/view.h"

namespace ucfs {

// The state dict, in zero_to_fp32's order (buffers, frozen params, params,
// tied aliases); its runs are mapped through `checkpoint`. `env` (which must
// outlive the result) reads buffers to convert on their first read.
Result<std::vector<ConsolidatedTensor>> ParallelConsolidatedStateDict(
    Env& env, const ParallelCheckpoint& checkpoint);

// Adds <tag>_fp32 under the root. The consolidated weights are an extra:
// a checkpoint they cannot be made for still mounts, with a warning.
void AddParallelConsolidatedDirOrWarn(Env& env, View& view,
                                      std::shared_ptr<const ParallelCheckpoint> checkpoint,
                                      const ConsolidatedOptions& options = {});

}  // namespace ucfs

#endif  // UCFS_VIEW_PARALLEL_CONSOLIDATED_VIEW_H_
