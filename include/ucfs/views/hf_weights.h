// Hugging Face weights where from_pretrained looks for them.
//
// HF Trainer under ZeRO-3 with stage3_gather_16bit_weights_on_model_save
// false (the common setting) saves config.json in checkpoint-N/ and no
// weights: the weights exist only as fp32 master partitions. A root that
// holds a config.json and no weights of its own shows beside it what
// save_pretrained would have written with that setting on:
//
//   ROOT/model.safetensors                  one file, or past 5 GB
//   ROOT/model-0000k-of-0000n.safetensors   shards split as save_pretrained
//   ROOT/model.safetensors.index.json       splits them, with their index
//
// every trainable param in the training dtype (bfloat16/float16 cast from
// the fp32 master weights, rounded to nearest even as torch's .to() does;
// an fp32 run's in fp32), the persistent buffers and frozen params as
// saved, tied params once (save_pretrained drops tied duplicates), so that
// AutoModel.from_pretrained(ROOT) loads with no conversion. Casts are made
// as the bytes are read; nothing is kept.
#ifndef UCFS_VIEWS_HF_WEIGHTS_H_
#define UCFS_VIEWS_HF_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/views/consolidated_view.h"

namespace ucfs {

struct HfWeightsOptions {
  // The weights' dtype; nullopt: the training dtype (the checkpoint's
  // lp_dtype), or float32 when it trained in fp32.
  std::optional<DType> dtype;
  // save_pretrained's max_shard_size, "5GB" in transformers 4.
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Whether a directory, by its listing, wants weights: it has a config.json
// and no weights of its own (model.safetensors, pytorch_model.bin, their
// shard indexes, a PEFT adapter_model.*).
bool WantsHfWeights(const std::vector<DirEntry>& entries);

// The files, for `checkpoint` (which they keep alive); `env` reads its
// rank files and must outlive them. NotSupported for an AutoEP run, whose
// engine names are not the model's (native MoE's experts are served under
// the global names its expert files use, the model's own).
Result<std::vector<NamedContent>> HfWeightsFiles(Env& env,
                                                 std::shared_ptr<const Checkpoint> checkpoint,
                                                 const HfWeightsOptions& options = {});

}  // namespace ucfs

#endif  // UCFS_VIEWS_HF_WEIGHTS_H_
