// The model-states file of an AutoEP run's universal checkpoint. Private
// to src/views/.
#ifndef UCFS_VIEWS_EXPERT_MODEL_STATES_H_
#define UCFS_VIEWS_EXPERT_MODEL_STATES_H_

#include <memory>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/torch_file_content.h"

namespace ucfs {

// mp_rank_00_model_states.pt as DeepSpeed 0.19.8's ds_to_universal.py
// rewrites it for an AutoEP run at ZeRO-1/2 (expert-layouts.md §3.6): the
// saved pickle, torch.load'ed and torch.save'd again, with two values of
// its universal_checkpoint_info set (appended where absent):
// 'expert_parameter_patterns' = ['\.experts\.w[123]$'] and
// 'ds_autoep_layers' = the lightweight metadata of every layer of the
// top-level ds_autoep_layers (moe_layer_id, module_path, expert_key_prefix,
// num_experts, num_local_experts, ep_size: those an entry has, in that
// order). Its sources are `ckpt`'s own indices.
Result<std::shared_ptr<TorchFileContent>> AutoEpUniversalModelStates(
    std::shared_ptr<const Checkpoint> ckpt, SourceFiles* crc_reader);

}  // namespace ucfs

#endif  // UCFS_VIEWS_EXPERT_MODEL_STATES_H_
