#include "ucfs/checkpoint/inspect_report.h"

#include <algorithm>
#include <cstdio>

#include "checkpoint/inspect_format.h"
#include "ucfs/checkpoint/partition.h"

namespace ucfs {
namespace {

using inspect::ContainerText;
using inspect::FlatGroups;
using inspect::FormatStep;
using inspect::GroupsText;
using inspect::OptimizerText;
using inspect::StatesText;
using inspect::Table;

// A ZeRO-3 frozen param's fragment sizes.
std::vector<uint64_t> ValidPerRank(uint64_t numel, uint32_t world) {
  std::vector<uint64_t> v(world);
  for (uint32_t r = 0; r < world; ++r) v[r] = ValidNumel(numel, world, r);
  return v;
}

// "26×2 25": run-length, so a world size of 1024 stays one short line.
std::string RunLength(const std::vector<uint64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    if (!out.empty()) out += ' ';
    out += std::to_string(v[i]);
    if (j - i > 1) out += "\u00d7" + std::to_string(j - i);
    i = j;
  }
  return out;
}

}  // namespace

nlohmann::ordered_json InspectJson(const Checkpoint& c) {
  using json = nlohmann::ordered_json;
  json j;
  j["root"] = c.files().root;
  j["tag"] = c.files().tag;
  j["tag_dir"] = c.files().tag_dir;
  j["ds_version"] = c.ds_version();
  j["zero_stage"] = c.zero_stage();
  j["optimizer_class"] = c.optimizer_class();
  j["partitioning"] = FlatGroups(c) ? "flat_group" : "per_param";
  j["format"] = ContainerText(c);
  j["world_size"] = c.world_size();
  j["dtype"] = c.lp_dtype() ? json(Info(*c.lp_dtype()).torch_name) : json(nullptr);
  j["optimizer_file_prefix"] = c.files().optim_prefix;
  j["global_steps"] = c.global_steps() ? json(*c.global_steps()) : json(nullptr);
  json step = nullptr;
  // The first group's that keeps one (a Muon group keeps none).
  for (const auto& group : c.scalar_states()) {
    for (const auto& s : group) {
      if (s.name == "step" && step.is_null()) step = s.value;
    }
  }
  j["step"] = step;
  j["optimizer_type"] = c.optimizer_type().empty() ? json(nullptr) : json(c.optimizer_type());
  j["sub_group_size"] =
      c.configured_sub_group_size() ? json(*c.configured_sub_group_size()) : json(nullptr);
  const BatchConfig& batch = c.batch();
  auto opt = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); };
  j["batch"] = {{"train_batch_size", opt(batch.train_batch_size)},
                {"train_micro_batch_size_per_gpu", opt(batch.micro_batch_per_gpu)},
                {"gradient_accumulation_steps", opt(batch.gradient_accumulation)}};
  j["param_groups"] = c.param_group_count();
  j["expert_parallel"] = c.expert_parallel();
  j["experts"] = c.expert_parallel() == 1 ? json(nullptr)
                 : c.autoep()             ? json("autoep")
                                          : json("native_moe");
  j["data_before_expert_parallelism"] = c.data_before_expert_parallelism();
  j["param_alignment"] = c.param_alignment();
  json states = json::array();
  for (const auto& s : c.states())
    states.push_back({{"name", s.name}, {"dtype", Info(s.dtype).torch_name}});
  j["states"] = states;
  json sub_groups = json::array();
  for (const auto& sg : c.sub_groups()) {
    json names = json::array();
    for (uint32_t p : sg.params) names.push_back(c.params()[p].name);
    json states_of = json::array();
    for (const SubGroupState& s : c.sub_group_states(sub_groups.size())) {
      states_of.push_back(
          {{"name", c.states()[s.state].name},
           {"layout", s.layout == StateLayout::kWholeParams ? "whole_params" : "partition"}});
    }
    sub_groups.push_back({{"param_group", sg.param_group},
                          {"states", states_of},
                          {"numel", sg.numel},
                          {"partition_numel", sg.partition_numel},
                          {"expert_parallel", sg.expert_parallel},
                          {"ep_rank", sg.family},
                          {"ranks", sg.members},
                          {"params", names}});
  }
  j["sub_groups"] = sub_groups;
  json params = json::array();
  for (size_t i = 0; i < c.params().size(); ++i) {
    const ParamInfo& p = c.params()[i];
    params.push_back({{"name", p.name},
                      {"shape", p.shape},
                      {"dtype", Info(c.states()[0].dtype).torch_name},
                      {"numel", p.numel},
                      {"partition_numel", p.partition_numel},
                      {"param_group", p.param_group},
                      {"sub_group", p.sub_group},
                      {"offset", p.offset},
                      {"ep_rank", p.family},
                      {"valid_per_rank", c.ElementsPerRank(i)}});
  }
  j["params"] = params;
  json frozen = json::array();
  for (const auto& f : c.frozen_params()) {
    json entry = {{"name", f.name},
                  {"shape", f.shape},
                  {"dtype", Info(f.dtype).torch_name},
                  {"numel", f.numel},
                  {"partition_numel", f.partition_numel}};
    // ZeRO-1/2 keep frozen params whole, in the model states.
    if (FlatGroups(c)) {
      entry["in_model_states"] = true;
    } else {
      entry["valid_per_rank"] = ValidPerRank(f.numel, c.world_size());
    }
    frozen.push_back(std::move(entry));
  }
  j["frozen"] = frozen;
  json tied = json::array();
  for (const auto& t : c.tied_params())
    tied.push_back({{"alias", t.alias}, {"canonical", t.canonical}});
  j["tied"] = tied;
  json buffers = json::array();
  for (const auto& b : c.buffers()) {
    buffers.push_back({{"name", b.name}, {"shape", b.shape}, {"dtype", Info(b.dtype).torch_name}});
  }
  j["buffers"] = buffers;
  return j;
}

std::string InspectText(const Checkpoint& c) {
  std::string out;
  uint64_t total = 0;
  for (const auto& p : c.params()) total += p.numel;
  std::vector<std::vector<std::string>> head = {
      {"checkpoint", Printable(c.files().root.empty() ? c.files().tag_dir : c.files().root, 4096)},
      {"tag", Printable(c.files().tag) + "  (" + Printable(c.files().tag_dir, 4096) + ")"},
      {"DeepSpeed", (c.ds_version().empty() ? "?" : Printable(c.ds_version())) + ", ZeRO stage " +
                        std::to_string(c.zero_stage()) + " (" + OptimizerText(c) + ")"},
      {"format", ContainerText(c)},
      {"world size", std::to_string(c.world_size())},
      {"dtype", std::string(c.lp_dtype() ? Info(*c.lp_dtype()).torch_name : "?") + " (master " +
                    std::string(Info(c.states()[0].dtype).torch_name) + ")"},
      {"step",
       FormatStep(c) +
           (c.global_steps() ? "  (global_steps " + std::to_string(*c.global_steps()) + ")" : "")},
      {"groups", GroupsText(c)},
  };
  if (std::string batch = DescribeBatch(c.batch(), c.world_size()); !batch.empty()) {
    head.push_back({"batch", batch});
  }
  if (std::string experts = inspect::ExpertsText(c); !experts.empty()) {
    head.push_back({"experts", experts});
  }
  head.push_back({"states", StatesText(c)});
  out += Table(head, "");

  out += "\nparams: " + std::to_string(c.params().size()) + " trainable, " + std::to_string(total) +
         " elements\n";
  // ZeRO-3 places a param by its sub-group; ZeRO-1/2 by its offset in its
  // group's flat buffer, which decides which ranks hold it.
  std::vector<std::vector<std::string>> rows = {{"name", "shape", "dtype", "numel", "group",
                                                 FlatGroups(c) ? "offset" : "sub-group",
                                                 "valid elements per rank"}};
  for (size_t i = 0; i < c.params().size(); ++i) {
    const ParamInfo& p = c.params()[i];
    // An expert param is listed once per EP rank.
    const bool expert = c.sub_groups()[p.sub_group].expert_parallel > 1;
    rows.push_back(
        {Printable(p.name) + (expert ? " [EP rank " + std::to_string(p.family) + "]" : ""),
         ShapeString(p.shape), std::string(Info(c.states()[0].dtype).torch_name),
         std::to_string(p.numel), std::to_string(p.param_group),
         std::to_string(FlatGroups(c) ? p.offset : p.sub_group), RunLength(c.ElementsPerRank(i))});
  }
  out += Table(rows, "  ");
  if (!c.frozen_params().empty()) {
    out += "\nfrozen: " + std::to_string(c.frozen_params().size()) +
           (FlatGroups(c) ? " (whole, in the model states)" : "") + "\n";
    std::vector<std::vector<std::string>> fr = {{"name", "shape", "dtype", "numel"}};
    if (!FlatGroups(c)) fr[0].push_back("valid elements per rank");
    for (const auto& f : c.frozen_params()) {
      fr.push_back({Printable(f.name), ShapeString(f.shape), std::string(Info(f.dtype).torch_name),
                    std::to_string(f.numel)});
      if (!FlatGroups(c)) fr.back().push_back(RunLength(ValidPerRank(f.numel, c.world_size())));
    }
    out += Table(fr, "  ");
  }
  if (!c.tied_params().empty()) {
    out += "\ntied: " + std::to_string(c.tied_params().size()) + "\n";
    for (const auto& t : c.tied_params())
      out += "  " + Printable(t.alias) + " -> " + Printable(t.canonical) + "\n";
  }
  if (!c.buffers().empty()) {
    out += "\nbuffers: " + std::to_string(c.buffers().size()) + "\n";
    std::vector<std::vector<std::string>> br = {{"name", "shape", "dtype"}};
    for (const auto& b : c.buffers()) {
      br.push_back(
          {Printable(b.name), ShapeString(b.shape), std::string(Info(b.dtype).torch_name)});
    }
    out += Table(br, "  ");
  }
  return out;
}

}  // namespace ucfs
