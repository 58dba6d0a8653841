// The universal view: what DeepSpeed's ds_to_universal.py writes, shown
// lazily over the rank shards, of a data-parallel checkpoint (the 1 x 1 x D
// grid) or a tensor- and pipeline-parallel one, laid out from the
// ParallelCheckpoint's name table.
//
//   ROOT/                        the source checkpoint root, passed through
//   ROOT/latest_universal        "<tag>_universal"
//   ROOT/<tag>_universal/zero/<param>/{fp32,exp_avg,exp_avg_sq,...}.pt
//                                ZeRO-3 at T = 1: a bare 1-D tensor of
//                                exactly numel elements; else {cat_dim?,
//                                param_n_sub_params?, vocab_tensor?, 'param':
//                                the merged tensor} (tp-pp.md 3.2), and a
//                                step.pt, the param group's
//   ROOT/<tag>_universal/zero/optimizer_state.pt
//                                rank 0's optimizer_state_dict + param_groups
//                                (shard group 0's, as at T = 1)
//   ROOT/<tag>_universal/{zero_pp_rank_*_,}mp_rank_NN_model_states.pt
//                                every model-states file, copied; no layer
//                                file, as the converter copies none
//
// Each merge is pread arithmetic: a concatenation on dim 0 (and a
// vocabulary, whose storage keeps its padded rows) is the T slices' states
// one after another; on a later dimension one interleaved run
// (storage_spec.h); two sub-params the slices' first halves, then their
// second halves; a replicated param slice 0; an averaged one computed on
// read. ZeRO-3 with TP takes the stage-1/2 layout (DeepSpeed 0.14.5's
// converter writes wrong tensors there, without an error).
//
// Every byte DeepSpeed would write is reproduced: with real CRCs
// (UniversalViewOptions::compute_crc) the per-param files and
// optimizer_state.pt are byte-identical to ds_to_universal's, except where
// its abs() bug made them longer.
#ifndef UCFS_VIEWS_UNIVERSAL_VIEW_H_
#define UCFS_VIEWS_UNIVERSAL_VIEW_H_

#include <memory>
#include <optional>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/consolidated_view.h"

namespace ucfs {

struct UniversalViewOptions {
  // Real CRC-32s in the zip records, for readers that check them (Python's
  // zipfile). Costs a read of every byte at mount time; torch.load never
  // checks them.
  bool compute_crc = false;
  // <tag>_fp32/ beside the universal tag (its CRCs its own to ask for);
  // nullopt for none (a writable mount without --views).
  std::optional<ConsolidatedOptions> consolidated = ConsolidatedOptions{};
};

Result<std::unique_ptr<View>> BuildUniversalView(
    Env& env, std::shared_ptr<const ParallelCheckpoint> checkpoint,
    const UniversalViewOptions& options = {});
// The same of a data-parallel checkpoint, the 1 x 1 x D grid.
Result<std::unique_ptr<View>> BuildUniversalView(Env& env,
                                                 std::shared_ptr<const Checkpoint> checkpoint,
                                                 const UniversalViewOptions& options = {});

// The universal tag for a checkpoint tag ("global_step4_universal").
std::string UniversalTag(const std::string& tag);

}  // namespace ucfs

#endif  // UCFS_VIEWS_UNIVERSAL_VIEW_H_
