#include "views/native_expert_names.h"

namespace ucfs {

std::optional<LocalExpert> ParseLocalExpert(const std::string& name) {
  // Greedy ".*" first: the last occurrence followed by a digit.
  for (size_t at = name.rfind(kNativeExpertPrefix); at != std::string::npos;
       at = at == 0 ? std::string::npos : name.rfind(kNativeExpertPrefix, at - 1)) {
    const size_t digits = at + kNativeExpertPrefix.size();
    size_t end = digits;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end > digits) return LocalExpert{name.substr(0, at), name.substr(digits, end - digits)};
  }
  return std::nullopt;
}

std::string GlobalExpertName(const std::string& name, const LocalExpert& local, uint32_t ep_rank,
                             uint64_t local_experts) {
  const std::string from = std::string(kNativeExpertPrefix) + local.id;
  const std::string to = std::string(kNativeExpertPrefix) +
                         std::to_string(ep_rank * local_experts + std::stoull(local.id));
  std::string out;
  size_t at = 0;
  for (size_t hit = name.find(from); hit != std::string::npos; hit = name.find(from, at)) {
    out += name.substr(at, hit - at) + to;
    at = hit + from.size();
  }
  return out + name.substr(at);
}

}  // namespace ucfs
