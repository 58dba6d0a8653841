#include "ucfs/checkpoint/expert_topology.h"

#include <charconv>

namespace ucfs {

uint32_t ExpertTopology::EpRank(uint32_t rank) const {
  if (ep == 0) return 0;
  return data_first ? rank / edp_size() : rank % ep;
}

uint32_t ExpertTopology::EdpRank(uint32_t rank) const {
  if (ep == 0) return rank;
  return data_first ? rank % edp_size() : rank / ep;
}

uint32_t ExpertTopology::Rank(uint32_t e, uint32_t k) const {
  return data_first ? e * edp_size() + k : k * ep + e;
}

std::vector<uint32_t> ExpertTopology::Members(uint32_t e) const {
  std::vector<uint32_t> members;
  for (uint32_t k = 0; k < edp_size(); ++k) members.push_back(Rank(e, k));
  return members;
}

std::optional<uint32_t> ExpertGroupSize(std::string_view group_name) {
  constexpr std::string_view kPrefix = "ep_size_";
  if (!group_name.starts_with(kPrefix)) return std::nullopt;
  const std::string_view digits = group_name.substr(kPrefix.size());
  uint32_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n == 0) return std::nullopt;
  return n;
}

}  // namespace ucfs
