// `ucfs inspect` of a tensor- and pipeline-parallel grid: what the shard
// groups are and how the universal layout merges them.
#include <cstdio>

#include "checkpoint/inspect_format.h"
#include "ucfs/checkpoint/batch_size.h"
#include "ucfs/checkpoint/inspect_report.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {
namespace {

using json = nlohmann::ordered_json;
using inspect::Table;

// The rule's name in the JSON report.
const char* RuleName(MergeRule rule) {
  switch (rule) {
    case MergeRule::kReplicated:
      return "replicated";
    case MergeRule::kAverage:
      return "average";
    case MergeRule::kTwoSubParamsDim0:
      return "two_sub_params_cat_dim_0";
    case MergeRule::kSubParams:
      return "sub_params";
    case MergeRule::kConcat:
      return "concat";
    case MergeRule::kAffine:
      return "affine_map";
  }
  return "?";
}

// How the text report says a param merges: "cat dim 1 (row parallel)",
// "replicated (slice 0)", "cat dim 0, vocab rows cut to 13".
std::string MergeText(const MergedParam& p, const UniversalInfo& info) {
  std::string out;
  switch (p.merge.rule) {
    case MergeRule::kReplicated:
      out = "replicated (slice 0)";
      break;
    case MergeRule::kAverage:
      out = "average";
      break;
    case MergeRule::kTwoSubParamsDim0:
      out = "2 sub-params, cat dim 0";
      break;
    case MergeRule::kSubParams:
      out = "sub-params, cat dim " + std::to_string(p.merge.sub_param_shape->partition_dim);
      break;
    case MergeRule::kConcat:
      out = "cat dim " + std::to_string(p.merge.cat_dim) +
            (p.merge.cat_dim == 1 ? " (row parallel)" : "");
      break;
    case MergeRule::kAffine: {
      // AutoTP's geometry: the ranks' shard shapes say the split.
      out = "affine map";
      std::string shards;
      for (const auto& shard : p.merge.affine->shards) {
        shards += (shards.empty() ? "" : " + ") + ShapeString(shard.shape);
      }
      out += ", shards " + shards;
      break;
    }
  }
  if (p.merge.vocab && info.original_vocab_size) {
    out += ", vocab rows cut to " + std::to_string(*info.original_vocab_size);
  }
  return out;
}

std::string StagesText(const MergedParam& p) {
  std::string out = std::to_string(p.stage);
  for (uint32_t s : p.copies_on) out += "," + std::to_string(s);
  return out;
}

uint64_t Elements(const Checkpoint& c) {
  uint64_t total = 0;
  for (const ParamInfo& p : c.params()) total += p.numel;
  return total;
}

// "0.2 (original_vocab_size 13, padded_vocab_size 16)".
std::string InfoText(const UniversalInfo& info) {
  char version[32] = "?";
  if (info.version) std::snprintf(version, sizeof version, "%g", *info.version);
  std::string out = version;
  std::string sizes;
  if (info.original_vocab_size) {
    sizes += "original_vocab_size " + std::to_string(*info.original_vocab_size);
  }
  if (info.padded_vocab_size) {
    sizes += (sizes.empty() ? "" : ", ") + std::string("padded_vocab_size ") +
             std::to_string(*info.padded_vocab_size);
  }
  if (!info.affine.params.empty()) {
    // AutoTP's geometry, which the converter takes before every pattern.
    sizes += (sizes.empty() ? "" : ", ") + std::string("AutoTP affine_map of ") +
             std::to_string(info.affine.params.size()) + " params";
  }
  return sizes.empty() ? out : out + " (" + sizes + ")";
}

json UniversalJson(const ParallelCheckpoint& g) {
  const bool ok = g.merge_status().ok();
  const auto& supplied = g.supplied_universal_info();
  json u;
  u["universal_checkpoint_info"] = g.has_universal_info();
  u["supplied"] = supplied ? json(supplied->path) : json(nullptr);
  if (ok) {
    const UniversalInfo& info = g.rules().info();
    u["version"] = info.version ? json(*info.version) : json(nullptr);
    u["original_vocab_size"] =
        info.original_vocab_size ? json(*info.original_vocab_size) : json(nullptr);
    u["padded_vocab_size"] = info.padded_vocab_size ? json(*info.padded_vocab_size) : json(nullptr);
  }
  u["available"] = ok;
  u["error"] = ok ? json(nullptr) : json(g.merge_status().message());
  const auto& unsafe = g.unsafe_at_another_tensor_degree();
  u["unsafe_at_another_tensor_degree"] = unsafe ? json(*unsafe) : json(nullptr);
  json params = json::array();
  for (const MergedParam& p : g.params()) {
    json entry = {{"name", p.name},
                  {"stage", p.stage},
                  {"copies_on", p.copies_on},
                  {"merge", RuleName(p.merge.rule)}};
    if (p.merge.rule == MergeRule::kConcat || p.merge.rule == MergeRule::kTwoSubParamsDim0) {
      entry["cat_dim"] = p.merge.cat_dim;
    }
    if (p.merge.sub_param_shape) {
      entry["sub_param_shape"] = {{"shape", p.merge.sub_param_shape->shape},
                                  {"partition_dim", p.merge.sub_param_shape->partition_dim}};
    }
    entry["vocab"] = p.merge.vocab;
    entry["local_shape"] = p.local_shape;
    entry["storage_shape"] = p.storage_shape;
    entry["shape"] = p.shape;
    params.push_back(std::move(entry));
  }
  u["params"] = std::move(params);
  return u;
}

// The universal layout's lines of the text report: its state, the
// warning, the name table.
std::string UniversalText(const ParallelCheckpoint& g) {
  std::vector<std::vector<std::string>> head;
  std::string state;
  if (!g.merge_status().ok()) {
    state = "unavailable: " + Printable(g.merge_status().message(), 4096);
  } else {
    state = std::to_string(g.params().size()) + " params, merged by " +
            (g.has_universal_info() ? "universal_checkpoint_info " + InfoText(g.rules().info())
                                    : std::string("concatenation (no universal_checkpoint_info)"));
    if (const auto& supplied = g.supplied_universal_info()) {
      state += ", with --universal-info " + Printable(supplied->path, 4096);
    }
  }
  head.push_back({"universal", state});
  if (const auto& unsafe = g.unsafe_at_another_tensor_degree()) {
    head.push_back({"WARNING", "unsafe to load at another tensor-parallel degree: " +
                                   Printable(*unsafe, 4096)});
  }
  std::string out = Table(head, "");
  if (g.params().empty()) return out;
  out += "\nuniversal params: " + std::to_string(g.params().size()) + "\n";
  std::vector<std::vector<std::string>> rows = {{"name", "stage", "local shape", "merge", "shape"}};
  for (const MergedParam& p : g.params()) {
    rows.push_back({Printable(p.name), StagesText(p), ShapeString(p.local_shape),
                    MergeText(p, g.rules().info()), ShapeString(p.shape)});
  }
  return out + Table(rows, "  ");
}

uint64_t CountFiles(const std::vector<std::string>& files) {
  uint64_t n = 0;
  for (const std::string& f : files) n += !f.empty();
  return n;
}

}  // namespace

json InspectJson(const ParallelCheckpoint& g) {
  const ParallelDegrees& d = g.degrees();
  if (d.mp() == 1) {
    json j = InspectJson(g.shard(0));
    if (g.has_universal_info() || !g.merge_status().ok()) j["universal"] = UniversalJson(g);
    return j;
  }
  // What every shard group shares, from shard group 0; its own tables go
  // with it below.
  const json first = InspectJson(g.shard(0));
  json j;
  for (const char* key :
       {"root", "tag", "tag_dir", "ds_version", "zero_stage", "optimizer_class", "partitioning",
        "format", "dtype", "optimizer_file_prefix", "global_steps", "step", "batch", "states"}) {
    j[key] = first[key];
  }
  j["degrees"] = {{"pp", d.pp}, {"tp", d.tp}, {"dp", d.dp}};
  j["world_size"] = uint64_t{d.mp()} * d.dp;
  j["layer_files"] = g.files().layer_files.size();
  json shards = json::array();
  for (uint32_t m = 0; m < d.mp(); ++m) {
    const Checkpoint& c = g.shard(m);
    json report = InspectJson(c);
    shards.push_back({{"mp_rank", m},
                      {"stage", g.files().Stage(m)},
                      {"tp_rank", g.files().TpRank(m)},
                      {"params", c.params().size()},
                      {"elements", Elements(c)},
                      {"step", report["step"]},
                      {"optimizer_files", c.files().optim_files},
                      {"model_files", c.files().model_files},
                      {"report", std::move(report)}});
  }
  j["shard_groups"] = std::move(shards);
  j["universal"] = UniversalJson(g);
  return j;
}

std::string InspectText(const ParallelCheckpoint& g) {
  const ParallelDegrees& d = g.degrees();
  if (d.mp() == 1) {
    std::string out = InspectText(g.shard(0));
    if (g.has_universal_info() || !g.merge_status().ok()) out += "\n" + UniversalText(g);
    return out;
  }
  const Checkpoint& c = g.shard(0);
  uint64_t optim = 0, model = 0;
  for (uint32_t m = 0; m < d.mp(); ++m) {
    optim += CountFiles(g.shard(m).files().optim_files);
    model += CountFiles(g.shard(m).files().model_files);
  }
  std::vector<std::vector<std::string>> head = {
      {"checkpoint", Printable(c.files().root.empty() ? c.files().tag_dir : c.files().root, 4096)},
      {"tag", Printable(c.files().tag) + "  (" + Printable(c.files().tag_dir, 4096) + ")"},
      {"DeepSpeed", (c.ds_version().empty() ? "?" : Printable(c.ds_version())) + ", ZeRO stage " +
                        std::to_string(c.zero_stage()) + " (" + inspect::OptimizerText(c) + ")"},
      {"format", inspect::ContainerText(c)},
      {"grid", DescribeDegrees(d) + " (" + std::to_string(uint64_t{d.mp()} * d.dp) + " ranks)"},
      {"files", std::to_string(optim) + " optimizer, " + std::to_string(model) + " model-states, " +
                    std::to_string(g.files().layer_files.size()) + " layer files"},
      {"dtype", std::string(c.lp_dtype() ? Info(*c.lp_dtype()).torch_name : "?") + " (master " +
                    std::string(Info(c.states()[0].dtype).torch_name) + ")"},
      {"step",
       inspect::FormatStep(c) +
           (c.global_steps() ? "  (global_steps " + std::to_string(*c.global_steps()) + ")" : "")},
  };
  if (std::string batch = DescribeBatch(c.batch(), d.dp); !batch.empty()) {
    head.push_back({"batch", batch});
  }
  head.push_back({"states", inspect::StatesText(c)});
  std::string out = Table(head, "") + "\n" + UniversalText(g);

  out += "\nshard groups: " + std::to_string(d.mp()) + " (each a data-parallel checkpoint of " +
         std::to_string(d.dp) + " ranks; `ucfs inspect --json` has each one's tables)\n";
  std::vector<std::vector<std::string>> rows = {
      {"mp_rank", "stage", "tp rank", "params", "elements", "step", "groups"}};
  for (uint32_t m = 0; m < d.mp(); ++m) {
    const Checkpoint& s = g.shard(m);
    rows.push_back({std::to_string(m), std::to_string(g.files().Stage(m)),
                    std::to_string(g.files().TpRank(m)), std::to_string(s.params().size()),
                    std::to_string(Elements(s)), inspect::FormatStep(s), inspect::GroupsText(s)});
  }
  return out + Table(rows, "  ");
}

}  // namespace ucfs
