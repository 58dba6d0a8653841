#include "checkpoint/inspect_format.h"

#include <algorithm>
#include <cstdio>

namespace ucfs::inspect {

std::string FormatStep(const Checkpoint& c) {
  for (const auto& s :
       c.scalar_states().empty() ? std::vector<ScalarState>{} : c.scalar_states()[0]) {
    if (s.name == "step") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", s.value);
      return buf;
    }
  }
  return "-";
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
    std::string numels, partitions;
    for (const SubGroupInfo& sg : c.sub_groups()) {
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
  return out + ", " + std::to_string(c.sub_groups().size()) + " sub-group(s)" +
         (c.configured_sub_group_size()
              ? ", sub_group_size " + std::to_string(*c.configured_sub_group_size())
              : "");
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
