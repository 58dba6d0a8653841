#include "ucfs/views/hf_weights.h"

#include <string_view>

namespace ucfs {

bool WantsHfWeights(const std::vector<DirEntry>& entries) {
  bool config = false;
  for (const DirEntry& e : entries) {
    if (e.is_dir) continue;
    const std::string_view n = e.name;
    if (n == "config.json") config = true;
    // save_pretrained's and PEFT's weight names, sharded or not.
    for (std::string_view weights :
         {"model.safetensors", "pytorch_model.bin", "adapter_model.safetensors",
          "adapter_model.bin", "tf_model.h5", "flax_model.msgpack"}) {
      if (n == weights) return false;
    }
    if (n.ends_with(".safetensors.index.json") || n.ends_with(".bin.index.json")) return false;
    if ((n.starts_with("model-") && n.ends_with(".safetensors")) ||
        (n.starts_with("pytorch_model-") && n.ends_with(".bin"))) {
      return false;
    }
  }
  return config;
}

Result<std::vector<NamedContent>> HfWeightsFiles(Env& env,
                                                 std::shared_ptr<const Checkpoint> checkpoint,
                                                 const HfWeightsOptions& options) {
  if (checkpoint->autoep() && checkpoint->expert_parallel() > 1) {
    // AutoEP replaced the model's MoE blocks: its names are the engine's,
    // whose mapping to the model's lives in AutoEP's presets, not in the
    // checkpoint. Served under them, from_pretrained would start every
    // expert anew, with a warning easy to miss.
    return Status::NotSupported(
        checkpoint->files().model_files[0] +
        ": an AutoEP run names its experts' stacks <layer>.experts.w1/w2/w3 and its router "
        "<layer>.router.gate, not as the model's config.json does (Mixtral's gate_up_proj, "
        "down_proj, gate); <tag>_fp32/ holds them by the engine's names");
  }
  StateDictOptions dict;
  dict.others = OtherTensors::kAsSaved;
  dict.drop_aliases = true;
  dict.params_dtype = options.dtype ? options.dtype : checkpoint->lp_dtype();
  const auto grid = ParallelCheckpoint::SharedOfDataParallel(std::move(checkpoint));
  UCFS_ASSIGN_OR_RETURN(std::vector<ConsolidatedTensor> tensors,
                        ConsolidatedStateDict(env, *grid, dict));
  return SafetensorsFiles(grid, tensors, options.max_shard_bytes);
}

}  // namespace ucfs
