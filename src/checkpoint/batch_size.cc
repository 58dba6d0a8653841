#include "ucfs/checkpoint/batch_size.h"

namespace ucfs {
namespace {

// The global batch the run trained with: train_batch_size, else the
// product DeepSpeed would have made it.
std::optional<int64_t> GlobalBatch(const BatchConfig& b, uint32_t world_size) {
  if (b.train_batch_size && *b.train_batch_size > 0) return b.train_batch_size;
  if (b.micro_batch_per_gpu && *b.micro_batch_per_gpu > 0) {
    return *b.micro_batch_per_gpu * b.gradient_accumulation.value_or(1) * world_size;
  }
  return std::nullopt;
}

}  // namespace

std::string DescribeBatch(const BatchConfig& b, uint32_t world_size) {
  const std::optional<int64_t> global = GlobalBatch(b, world_size);
  if (!global) return "";
  std::string out = "train_batch_size " + std::to_string(*global);
  if (b.micro_batch_per_gpu) {
    out += " = micro batch " + std::to_string(*b.micro_batch_per_gpu) +
           " \u00d7 gradient accumulation " + std::to_string(b.gradient_accumulation.value_or(1)) +
           " \u00d7 " + std::to_string(world_size) + " ranks";
  }
  return out;
}

std::string BatchAdvice(const BatchConfig& b, uint32_t saved, uint32_t n) {
  const std::optional<int64_t> global = GlobalBatch(b, saved);
  if (!global || !b.micro_batch_per_gpu || *b.micro_batch_per_gpu <= 0 || n == 0) return "";
  const int64_t micro = *b.micro_batch_per_gpu;
  const int64_t accumulation = b.gradient_accumulation.value_or(1);
  const int64_t per_step = micro * n;
  const std::string saved_text = "the run was saved with " + DescribeBatch(b, saved);
  if (*global % per_step != 0) {
    return saved_text + "; at " + std::to_string(n) + " ranks no gradient accumulation keeps the " +
           "global batch of " + std::to_string(*global) + " with micro batch " +
           std::to_string(micro) + " (" + std::to_string(micro) + " \u00d7 " + std::to_string(n) +
           " does not divide it): DeepSpeed asserts train_batch_size = micro \u00d7 accumulation "
           "\u00d7 "
           "world size, so change the micro batch or the global batch";
  }
  const int64_t keep = *global / per_step;
  if (keep == accumulation) return "";
  return saved_text + "; at " + std::to_string(n) + " ranks set gradient_accumulation_steps to " +
         std::to_string(keep) + " to keep the global batch (" + std::to_string(micro) + " \u00d7 " +
         std::to_string(keep) + " \u00d7 " + std::to_string(n) + " = " + std::to_string(*global) +
         "); a fixed train_batch_size with the saved accumulation fails (HF Trainer raises, "
         "DeepSpeed asserts)";
}

}  // namespace ucfs
