// The model-states files of an AutoEP run: its universal checkpoint's, and
// what each rank's says of its place at another world size. Private to
// src/views/.
#ifndef UCFS_VIEWS_EXPERT_MODEL_STATES_H_
#define UCFS_VIEWS_EXPERT_MODEL_STATES_H_

#include <memory>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/torch_file_content.h"

namespace ucfs {

// A model-states file of an AutoEP run as DeepSpeed 0.19.8's
// ds_to_universal.py rewrites it (expert-layouts.md §3.6): the saved pickle
// (`model`, of `ckpt`'s source `source`), torch.load'ed and torch.save'd
// again, with two values of its universal_checkpoint_info set (appended
// where absent). At ZeRO-1/2 (mp_rank_00): 'expert_parameter_patterns' =
// ['\.experts\.w[123]$'] and 'ds_autoep_layers' = the lightweight
// metadata of every layer of the top-level ds_autoep_layers (moe_layer_id,
// module_path, expert_key_prefix, num_experts, num_local_experts, ep_size:
// those an entry has, in that order), from a load of its own. At ZeRO-3
// (each rank's file): ['.*\.experts\.w[123]$'] and the top-level list
// itself, one object twice in the pickle.
Result<std::shared_ptr<TorchFileContent>> AutoEpUniversalModelStates(
    std::shared_ptr<const Checkpoint> ckpt, const pickle::Document& model,
    const TorchFileSummary& summary, uint32_t source, SourceFiles* crc_reader);

// Every entry of an AutoEP model-states pickle's ds_autoep_layers (the
// top-level list and universal_checkpoint_info's) as rank `rank` of
// `world` data-parallel ranks saves it (engine.py _save_moe_checkpoint):
// its EP rank, EDP rank and EDP size, and the global experts it holds
// (global_expert_start/end, num_local_experts of them from EP rank ·
// num_local_experts). Entries without an ep_size, and keys an entry does
// not have, are left as they are.
void SetAutoEpLayersRank(pickle::Document& doc, pickle::NodeId root, uint32_t world, uint32_t rank,
                         bool data_before_expert_parallelism);

}  // namespace ucfs

#endif  // UCFS_VIEWS_EXPERT_MODEL_STATES_H_
