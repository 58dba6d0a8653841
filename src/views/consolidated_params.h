// The master weights of the consolidated state dict (consolidated_view.h):
// every trainable param, in the name table's order, as zero_to_fp32.py
// makes it where it can, and experts as their files name them. Private to
// src/views/.
#ifndef UCFS_VIEWS_CONSOLIDATED_PARAMS_H_
#define UCFS_VIEWS_CONSOLIDATED_PARAMS_H_

#include <memory>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/consolidated_view.h"

namespace ucfs {

// Appends every trainable param's tensor to *out, its bytes as runs of the
// shard groups' states (cast or widened on read where the options say).
Status AddParams(const ParallelCheckpoint& c, OtherTensors others, const StateDictOptions& options,
                 const std::shared_ptr<SourceFiles>& files, std::vector<ConsolidatedTensor>* out);

}  // namespace ucfs

#endif  // UCFS_VIEWS_CONSOLIDATED_PARAMS_H_
