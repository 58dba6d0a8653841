// The bytes of a tensor-parallel param's merged state as runs of its T
// slices' states, and the keys of its universal file: the one place that
// lays out each universal_checkpoint_info merge rule (tp-pp.md 3.2), shared
// by the universal views' per-param files and the consolidated weights.
// Private to src/view/.
#ifndef UCFS_VIEWS_MERGED_RUNS_H_
#define UCFS_VIEWS_MERGED_RUNS_H_

#include <cstdint>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/storage_spec.h"
#include "ucfs/views/torch_pickle_builder.h"

namespace ucfs {

// State `state` of `param` merged, over its storage_shape (a vocabulary's
// padded rows included): a concatenation on dim 0 is the slices' runs one
// after another, on a later dimension one kGathered run, two sub-params
// the slices' first halves then their second halves, SubparamShape's
// sub-params each gathered from every slice in turn, a replicated param
// slice 0, an averaged one a kComputed run (AverageSlices) reading through
// `files` (null: NotSupported, naming the param), an affine map's one
// kGathered run of its blocks.
Result<std::vector<StorageRun>> MergedStateRuns(const ParallelCheckpoint& c,
                                                const MergedParam& param, size_t state,
                                                uint64_t element_size,
                                                const std::shared_ptr<SourceFiles>& files);

// The first `length` bytes of `runs` (a vocabulary's merge without its
// padded rows, which come last).
std::vector<StorageRun> FirstBytesOf(std::vector<StorageRun> runs, uint64_t length);

// The keys of the converter's per-param dict before 'param', in its order
// (cat_dim, param_n_sub_params, vocab_tensor) for `merge`.
std::vector<UniversalKey> UniversalKeysOf(const ParamMerge& merge);

}  // namespace ucfs

#endif  // UCFS_VIEWS_MERGED_RUNS_H_
