// The batch arithmetic of a resharded run.
//
// DeepSpeed asserts train_batch_size = micro batch × gradient accumulation ×
// world size, and HF Trainer raises when a fixed train_batch_size does not
// match that product at the new world size. A run resumed on N GPUs keeps
// its loss curve only if the global batch stays the same, which the saved
// micro batch allows only when micro × N divides it.
#ifndef UCFS_CHECKPOINT_BATCH_SIZE_H_
#define UCFS_CHECKPOINT_BATCH_SIZE_H_

#include <cstdint>
#include <optional>
#include <string>

namespace ucfs {

// The ds_config's batch fields as saved (absent, or HF's "auto" left
// unfilled: nullopt).
struct BatchConfig {
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> micro_batch_per_gpu;  // train_micro_batch_size_per_gpu
  std::optional<int64_t> gradient_accumulation;
};

// "train_batch_size 16 = micro batch 4 × gradient accumulation 2 × 2 ranks",
// or what of it is known; "" when nothing is.
std::string DescribeBatch(const BatchConfig& batch, uint32_t world_size);

// What resuming at `new_world_size` does to the global batch, to warn with:
// the accumulation that keeps it, or that none does; "" when nothing
// changes (or too little is known to say).
std::string BatchAdvice(const BatchConfig& batch, uint32_t saved_world_size,
                        uint32_t new_world_size);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_BATCH_SIZE_H_
