#include "ucfs/checkpoint/rank_families.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "ucfs/checkpoint/checkpoint_layout.h"

namespace ucfs {
namespace {

// accelerate numbers the objects registered for checkpointing from 0
// (custom_checkpoint_{i}.pkl), not the ranks: a run of two such objects on
// two GPUs must not be taken for a family. Its other numbered files
// (pytorch_model_{i}.bin, optimizer_{i}.bin, scheduler_{i}.bin,
// sampler_{i}.bin, dl_state_dict_{i}.bin) start at 1 and so never are.
constexpr std::string_view kPerObjectPrefixes[] = {"custom_checkpoint_"};

// A rank as a name writes it: decimal, no sign, no leading zero, at most
// nine digits.
bool ParseRank(std::string_view digits, uint32_t* rank) {
  if (digits.empty() || digits.size() > 9) return false;
  if (digits.size() > 1 && digits[0] == '0') return false;
  uint32_t value = 0;
  for (char c : digits) value = value * 10 + static_cast<uint32_t>(c - '0');
  *rank = value;
  return true;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::string RankFamily::NameFor(uint32_t rank) const {
  return prefix + std::to_string(rank) + suffix;
}

std::string SingleRankName(const RankFamily& family) {
  if (family.prefix == "rng_state_" && family.suffix == ".pth") return "rng_state.pth";
  return "";
}

RankFamilies FindRankFamilies(const std::vector<std::string>& names, uint32_t world_size) {
  // Every (prefix, suffix) a name can be split into around one run of
  // digits, with the ranks seen for it.
  std::map<std::pair<std::string, std::string>, std::set<uint32_t>> groups;
  for (const std::string& name : names) {
    // DeepSpeed's own: its rank files are built at N, its expert files are
    // per expert at any N.
    if (ParseRankFileName(name) || IsExpertFileName(name)) continue;
    for (size_t i = 0; i < name.size();) {
      if (!IsDigit(name[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < name.size() && IsDigit(name[j])) ++j;
      uint32_t rank = 0;
      if (ParseRank(std::string_view(name).substr(i, j - i), &rank)) {
        groups[{name.substr(0, i), name.substr(j)}].insert(rank);
      }
      i = j;
    }
  }
  RankFamilies out;
  std::set<std::string> claimed;  // a name belongs to one family at most
  for (const auto& [key, ranks] : groups) {
    const std::string& prefix = key.first;
    const std::string& suffix = key.second;
    const bool per_object =
        std::any_of(std::begin(kPerObjectPrefixes), std::end(kPerObjectPrefixes),
                    [&prefix](std::string_view p) { return prefix == p; });
    if (per_object || !ranks.contains(0)) continue;
    const RankFamily family{prefix, suffix};
    const bool exact =
        world_size > 0 && ranks.size() == world_size && *ranks.rbegin() + 1 == world_size;
    if (exact) {
      bool free = true;
      for (uint32_t r = 0; r < world_size; ++r) free = free && !claimed.contains(family.NameFor(r));
      if (!free) continue;
      for (uint32_t r = 0; r < world_size; ++r) claimed.insert(family.NameFor(r));
      out.complete.push_back(family);
      continue;
    }
    if (ranks.size() < 2) continue;  // one numbered file is no family
    std::string problem = prefix + "{r}" + suffix + ": ";
    uint32_t missing = 0;
    while (ranks.contains(missing)) ++missing;
    if (missing < world_size && missing < *ranks.rbegin()) {
      problem += family.NameFor(missing) + " is missing";
    } else {
      problem += "ranks 0.." + std::to_string(*ranks.rbegin()) + " saved";
    }
    problem += " (the checkpoint has " + std::to_string(world_size) +
               " data-parallel ranks); passed through as saved";
    out.problems.push_back(std::move(problem));
  }
  return out;
}

}  // namespace ucfs
