#include "checkpoint/inspect_format.h"

#include <algorithm>
#include <cstdio>

namespace ucfs::inspect {

std::string FormatStep(const Checkpoint& c) {
  for (const auto& group : c.scalar_states()) {
    for (const auto& s : group) {
      if (s.name != "step") continue;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", s.value);
      return buf;
    }
  }
  return "-";
}

std::string StatesText(const Checkpoint& c) {
  auto names = [&c](size_t k) {
    std::string out;
    for (const SubGroupState& s : c.sub_group_states(k)) {
      out += (out.empty() ? "" : ", ") + Printable(c.states()[s.state].name);
      if (s.layout == StateLayout::kWholeParams) out += " (whole params per rank)";
    }
    return out;
  };
  const size_t groups = c.sub_groups().size();
  bool uniform = true;
  for (size_t k = 1; k < groups; ++k) uniform = uniform && names(k) == names(0);
  if (uniform) return groups == 0 ? std::string() : names(0);
  // Per param group: its first sub-group's (ZeRO-3's sub-groups of one
  // group keep the same states).
  std::string out;
  std::vector<bool> seen(c.param_group_count() + 1, false);
  for (size_t k = 0; k < groups; ++k) {
    const uint32_t g = c.sub_groups()[k].param_group;
    if (g < seen.size() && seen[g]) continue;
    if (g < seen.size()) seen[g] = true;
    out += (out.empty() ? "" : "; ") + std::string("group ") + std::to_string(g) + ": " + names(k);
  }
  return out;
}

std::string OptimizerText(const Checkpoint& c) {
  if (c.optimizer_type().empty()) return c.optimizer_class();
  return Printable(c.optimizer_type()) + " via " + c.optimizer_class();
}

std::string Table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> width;
  auto display_width = [](const std::string& s) {
    size_t w = 0;
    for (unsigned char ch : s) w += (ch & 0xc0) != 0x80;  // count UTF-8 code points
    return w;
  };
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size());
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], display_width(row[i]));
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - display_width(row[i]) + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string GroupsText(const Checkpoint& c) {
  std::string out = std::to_string(c.param_group_count()) + " param group(s)";
  if (FlatGroups(c)) {
    // The file's groups (an expert group's other EP ranks' buffers are its
    // equals: experts() names them).
    std::string numels, partitions;
    for (uint32_t k = 0; k < c.param_group_count(); ++k) {
      const SubGroupInfo& sg = c.sub_groups()[k];
      numels += (numels.empty() ? "" : ", ") + std::to_string(sg.numel);
      partitions += (partitions.empty() ? "" : ", ") + std::to_string(sg.partition_numel);
    }
    out += " of " + numels + " elements, in partitions of " + partitions + " per rank";
    if (c.param_alignment() > 1) {
      // zero_optimization.parameter_alignment: the groups' lengths above
      // count the paddings between params.
      out += "; parameter alignment: each param starts at a multiple of " +
             std::to_string(c.param_alignment()) + " elements (param_alignment_paddings)";
    }
    return out;
  }
  return out + ", " + std::to_string(c.file_buffer_count()) + " sub-group(s)" +
         (c.configured_sub_group_size()
              ? ", sub_group_size " + std::to_string(*c.configured_sub_group_size())
              : "");
}

std::string ExpertsText(const Checkpoint& c) {
  std::string out;
  for (uint32_t k = 0; k < c.param_group_count(); ++k) {
    const SubGroupInfo& sg = c.sub_groups()[k];
    if (sg.expert_parallel == 1) continue;
    std::string groups;
    for (const SubGroupInfo& family : c.sub_groups()) {
      if (family.param_group != k) continue;
      std::string ranks;
      for (uint32_t r : family.members) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      groups += (groups.empty() ? "" : " ") + std::string("[") + ranks + "]";
    }
    out += std::string(out.empty() ? "" : "; ") + "group " + std::to_string(k) + " over EP " +
           std::to_string(sg.expert_parallel) + " x EDP " + std::to_string(sg.partition_world()) +
           ", each EP rank's experts cut over its EDP group " + groups;
  }
  if (out.empty()) return out;
  return std::string(c.autoep() ? "AutoEP" : "native MoE") + " (" +
         (c.data_before_expert_parallelism()
              ? "data before expert parallelism: EP rank = rank div D"
              : "EP rank = rank mod EP") +
         "): " + out;
}

std::string ContainerText(const Checkpoint& c) {
  if (c.rank0_optim_summary().legacy) return "torch legacy (non-zip) format";
  const ContainerStyle& style = c.container_style();
  std::string text = std::string(StyleName(style)) + " zip";
  if (style.alignment != ContainerStyle{}.alignment) {
    text += ", " + std::to_string(style.alignment) + "-byte alignment";
  }
  return text;
}

}  // namespace ucfs::inspect
