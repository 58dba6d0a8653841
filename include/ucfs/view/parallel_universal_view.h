// The universal view of a tensor- and pipeline-parallel checkpoint: what
// ds_to_universal.py writes for it, laid out from the ParallelCheckpoint's
// name table, every file's bytes mapped to the shard groups' rank files.
//
//   ROOT/latest_universal            "<tag>_universal"
//   ROOT/<tag>_universal/zero/<param>/{fp32,exp_avg,exp_avg_sq}.pt
//                                    {cat_dim?, param_n_sub_params?, vocab_tensor?,
//                                    'param': the merged tensor} (tp-pp.md 3.2)
//   ROOT/<tag>_universal/zero/<param>/step.pt
//   ROOT/<tag>_universal/zero/optimizer_state.pt   shard group 0's, as at T = 1
//   ROOT/<tag>_universal/mp_rank_NN_model_states.pt  every model-states file,
//                                    copied (ZeRO-3: every zero_pp_rank_* one);
//                                    no layer file, as the converter copies none
//
// Each merge is pread arithmetic: a concatenation on dim 0 (and a
// vocabulary, whose storage keeps its padded rows) is the T slices' states
// one after another; on a later dimension one interleaved run (storage_spec.h);
// two sub-params the slices' first halves, then their second halves; a
// replicated param slice 0. ZeRO-3 with TP takes the same layout (DeepSpeed
// 0.14.5's converter writes wrong tensors there, without an error).
// Averaged params and SubparamShape merges are refused, naming the param.
#ifndef UCFS_VIEW_PARALLEL_UNIVERSAL_VIEW_H_
#define UCFS_VIEW_PARALLEL_UNIVERSAL_VIEW_H_

#include <memory>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/view/universal_view.h"
#include "ucfs/view/view.h"

namespace ucfs {

Result<std::unique_ptr<View>> BuildParallelUniversalView(
    Env& env, std::shared_ptr<const ParallelCheckpoint> checkpoint,
    const UniversalViewOptions& options = {});

}  // namespace ucfs

#endif  // UCFS_VIEW_PARALLEL_UNIVERSAL_VIEW_H_
