// Native DeepSpeed MoE's expert params by name: a rank's params name its
// local experts (…deepspeed_experts.<local id>…), its layer_*_expert_*
// files the global ones. Private to src/views/.
#ifndef UCFS_VIEWS_NATIVE_EXPERT_NAMES_H_
#define UCFS_VIEWS_NATIVE_EXPERT_NAMES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ucfs {

inline constexpr std::string_view kNativeExpertPrefix = ".deepspeed_moe.experts.deepspeed_experts.";

struct LocalExpert {
  std::string module;  // the name up to the prefix
  std::string id;      // the local expert id, digits
};

// The last "<prefix><digits>" of `name`, as engine.py _save_moe_checkpoint
// finds it (re.match(".*<prefix>([0-9]+).*")); nullopt where none.
std::optional<LocalExpert> ParseLocalExpert(const std::string& name);

// The global name DeepSpeed saves a local expert's param under in its
// layer_*_expert_* file: every "<prefix><local id>" replaced by
// "<prefix><EP rank · local experts + local id>" (Python's str.replace).
std::string GlobalExpertName(const std::string& name, const LocalExpert& local, uint32_t ep_rank,
                             uint64_t local_experts);

}  // namespace ucfs

#endif  // UCFS_VIEWS_NATIVE_EXPERT_NAMES_H_
