// The universal view: what DeepSpeed's ds_to_universal.py writes, shown
// lazily over the rank shards.
//
//   ROOT/                        the source checkpoint root, passed through
//   ROOT/latest_universal        "<tag>_universal"
//   ROOT/<tag>_universal/zero/<param>/{fp32,exp_avg,exp_avg_sq,...}.pt
//                                ZeRO-3: a bare 1-D tensor of exactly numel
//                                elements; ZeRO-1/2: {'cat_dim': 0, 'param':
//                                the tensor at its shape}, and a step.pt
//   ROOT/<tag>_universal/zero/optimizer_state.pt
//                                rank 0's optimizer_state_dict + param_groups
//   ROOT/<tag>_universal/{zero_pp_rank_*_,}mp_rank_00_model_states.pt
//                                the source model-state files
//
// Every byte DeepSpeed would write is reproduced: with real CRCs
// (UniversalViewOptions::compute_crc) the per-param files and
// optimizer_state.pt are byte-identical to ds_to_universal's, except where
// its abs() bug made them longer.
#ifndef UCFS_VIEW_UNIVERSAL_VIEW_H_
#define UCFS_VIEW_UNIVERSAL_VIEW_H_

#include <memory>
#include <optional>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/view/consolidated_view.h"
#include "ucfs/view/view.h"

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

Result<std::unique_ptr<View>> BuildUniversalView(Env& env,
                                                 std::shared_ptr<const Checkpoint> checkpoint,
                                                 const UniversalViewOptions& options = {});

// The universal tag for a checkpoint tag ("global_step4_universal").
std::string UniversalTag(const std::string& tag);

}  // namespace ucfs

#endif  // UCFS_VIEW_UNIVERSAL_VIEW_H_
