#include "ucfs/checkpoint/merge_rules.h"

#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace ucfs {

Result<std::shared_ptr<const SuppliedUniversalInfo>> ReadSuppliedUniversalInfo(
    Env& env, const std::optional<std::string>& path) {
  if (!path) return std::shared_ptr<const SuppliedUniversalInfo>();
  auto json = env.ReadSmallFile(*path, 16 << 20);
  if (!json.ok()) {
    return Status::InvalidArgument("--universal-info " + *path + ": cannot be read")
        .WithFile(*path);
  }
  auto info = std::make_shared<SuppliedUniversalInfo>();
  info->path = *path;
  info->json = std::move(json).value();
  return std::shared_ptr<const SuppliedUniversalInfo>(std::move(info));
}
namespace {

using pickle::Document;
using pickle::NodeId;

Status Wrong(std::string_view key, std::string_view what) {
  return Status::Corruption("universal_checkpoint_info: " + std::string(key) + " is not " +
                            std::string(what));
}

// A list of strings under `key` (absent: empty).
Result<std::vector<std::string>> Strings(const Document& doc, NodeId info, std::string_view key) {
  std::vector<std::string> out;
  const NodeId node = doc.Get(info, key);
  if (node == pickle::kNoNode) return out;
  auto items = doc.SequenceItems(node);
  if (!items) return Wrong(key, "a list of patterns");
  for (NodeId item : *items) {
    auto s = doc.AsStr(item);
    if (!s) return Wrong(key, "a list of strings");
    out.emplace_back(*s);
  }
  return out;
}

Result<SubParamShape> ReadSubParamShape(const Document& doc, NodeId node) {
  constexpr std::string_view kKey = "parameter_with_sub_params";
  SubParamShape out;
  UCFS_ASSIGN_OR_RETURN(out.patterns, Strings(doc, node, "patterns"));
  auto dims = doc.SequenceItems(doc.Get(node, "shape"));
  auto dim = doc.AsInt(doc.Get(node, "partition_dim"));
  if (!dims || !dim) return Wrong(kKey, "a list of {patterns, shape, partition_dim}");
  for (NodeId d : *dims) {
    std::vector<int64_t> sizes;
    if (auto one = doc.AsInt(d)) {
      sizes.push_back(*one);
    } else if (auto many = doc.SequenceItems(d); many && doc.node(d).kind == pickle::Kind::kTuple) {
      // (The converter takes a dimension's sizes only as a tuple.)
      for (NodeId m : *many) {
        auto size = doc.AsInt(m);
        if (!size) return Wrong(kKey, "shaped by numbers");
        sizes.push_back(*size);
      }
    } else {
      return Wrong(kKey, "shaped by numbers and tuples of numbers");
    }
    out.shape.push_back(std::move(sizes));
  }
  auto saved = std::make_shared<Document>();
  std::vector<NodeId> copied;
  out.saved_patterns = saved->CopyFrom(doc, doc.Get(node, "patterns"), &copied);
  out.saved_shape = saved->CopyFrom(doc, doc.Get(node, "shape"), &copied);
  out.saved_partition_dim = saved->CopyFrom(doc, doc.Get(node, "partition_dim"), &copied);
  out.saved = std::move(saved);
  if (*dim < 0 || *dim >= static_cast<int64_t>(out.shape.size())) {
    return Wrong(kKey, "partitioned along one of its dimensions");
  }
  out.partition_dim = *dim;
  return out;
}

// Python re syntax that std::regex (ECMAScript) reads otherwise or not at
// all: refused rather than matched differently.
const char* PythonOnly(std::string_view p) {
  static constexpr std::array<std::pair<std::string_view, const char*>, 8> kPythonOnly = {{
      {"(?P", "a named group"},
      {"(?<", "a lookbehind"},
      {"(?#", "a comment"},
      {"(?a", "an inline flag"},
      {"(?i", "an inline flag"},
      {"(?s", "an inline flag"},
      {"(?x", "an inline flag"},
      {"{,", "an open-ended repeat"},
  }};
  for (const auto& [syntax, what] : kPythonOnly) {
    if (p.find(syntax) != std::string_view::npos) return what;
  }
  for (size_t i = 0; i + 1 < p.size(); ++i) {
    if (p[i] == '\\') {
      if (p[i + 1] == 'A' || p[i + 1] == 'Z') return "\\A or \\Z";
      ++i;  // an escaped character
    }
  }
  return nullptr;
}

}  // namespace

Result<std::optional<UniversalInfo>> ReadUniversalInfo(const Document& doc) {
  const NodeId node = doc.Get(doc.root(), "universal_checkpoint_info");
  if (node == pickle::kNoNode) return std::optional<UniversalInfo>();
  if (!doc.MappingItems(node)) return Wrong("universal_checkpoint_info", "a dict");
  UniversalInfo info;
  info.version = doc.AsNumber(doc.Get(node, "universal_checkpoint_version"));
  info.original_vocab_size = doc.AsInt(doc.Get(node, "original_vocab_size"));
  info.padded_vocab_size = doc.AsInt(doc.Get(node, "padded_vocab_size"));
  UCFS_ASSIGN_OR_RETURN(info.pipeline_replicated,
                        Strings(doc, node, "pipeline_replicated_parameter_patterns"));
  UCFS_ASSIGN_OR_RETURN(info.tp_replicated, Strings(doc, node, "tp_replicated_parameter_patterns"));
  UCFS_ASSIGN_OR_RETURN(info.to_average, Strings(doc, node, "parameter_to_average_patterns"));
  UCFS_ASSIGN_OR_RETURN(info.two_sub_params_cat_dim_0,
                        Strings(doc, node, "parameter_with_2_sub_params_cat_dim_0"));
  UCFS_ASSIGN_OR_RETURN(info.row_parallel,
                        Strings(doc, node, "parameter_with_row_parallelism_patterns"));
  UCFS_ASSIGN_OR_RETURN(info.vocabulary, Strings(doc, node, "vocabulary_parameter_patterns"));
  UCFS_ASSIGN_OR_RETURN(info.expert_patterns, Strings(doc, node, "expert_parameter_patterns"));
  if (NodeId subs = doc.Get(node, "parameter_with_sub_params"); subs != pickle::kNoNode) {
    auto items = doc.SequenceItems(subs);
    if (!items) return Wrong("parameter_with_sub_params", "a list");
    for (NodeId item : *items) {
      UCFS_ASSIGN_OR_RETURN(SubParamShape s, ReadSubParamShape(doc, item));
      info.sub_params.push_back(std::move(s));
    }
  }
  if (NodeId affine = doc.Get(node, "affine_map"); affine != pickle::kNoNode) {
    UCFS_ASSIGN_OR_RETURN(info.affine, ReadAffineMaps(doc, affine));
  }
  return std::optional<UniversalInfo>(std::move(info));
}

namespace {

// Lays the supplied JSON over `info`, key by key.
Status ApplySupplied(const SuppliedUniversalInfo& supplied, UniversalInfo* info) {
  const nlohmann::json j = nlohmann::json::parse(supplied.json, nullptr, false);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(supplied.path + ": " + why).WithFile(supplied.path);
  };
  if (j.is_discarded() || !j.is_object()) {
    return bad("not a JSON object of universal_checkpoint_info keys");
  }
  const std::map<std::string, std::vector<std::string>*> lists = {
      {"pipeline_replicated_parameter_patterns", &info->pipeline_replicated},
      {"tp_replicated_parameter_patterns", &info->tp_replicated},
      {"parameter_to_average_patterns", &info->to_average},
      {"parameter_with_2_sub_params_cat_dim_0", &info->two_sub_params_cat_dim_0},
      {"parameter_with_row_parallelism_patterns", &info->row_parallel},
      {"vocabulary_parameter_patterns", &info->vocabulary},
  };
  for (const auto& [key, value] : j.items()) {
    if (auto it = lists.find(key); it != lists.end()) {
      if (!value.is_array()) return bad("'" + key + "' is not a list of patterns");
      it->second->clear();
      for (const auto& pattern : value) {
        if (!pattern.is_string()) return bad("'" + key + "' holds a pattern that is not a string");
        it->second->push_back(pattern.get<std::string>());
      }
    } else if (key == "original_vocab_size" || key == "padded_vocab_size") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1) {
        return bad("'" + key + "' is not a positive integer");
      }
      (key == "original_vocab_size" ? info->original_vocab_size : info->padded_vocab_size) =
          value.get<int64_t>();
    } else if (key == "universal_checkpoint_version") {
      if (!value.is_number()) return bad("'" + key + "' is not a number");
      info->version = value.get<double>();
    } else {
      return bad("'" + Printable(key) + "' is no universal_checkpoint_info key ucfs takes" +
                 (key == "parameter_with_sub_params"
                      ? " (SubparamShape is taken from the model states only: the converter tells "
                        "tuples from lists, JSON does not)"
                      : ""));
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::optional<UniversalInfo>> ResolveUniversalInfo(const pickle::Document& model_states,
                                                          const std::string& model_states_file,
                                                          const SuppliedUniversalInfo* supplied) {
  auto saved = ReadUniversalInfo(model_states);
  if (!saved.ok()) return saved.status().Annotate(model_states_file).WithFile(model_states_file);
  std::optional<UniversalInfo> info = std::move(saved).value();
  if (supplied == nullptr) return info;
  UniversalInfo merged = info.value_or(UniversalInfo{});
  UCFS_RETURN_IF_ERROR(ApplySupplied(*supplied, &merged));
  return std::optional<UniversalInfo>(std::move(merged));
}

std::optional<std::string> UnsafeAtAnotherTensorDegree(const UniversalInfo& info,
                                                       uint32_t saved_tp) {
  if (saved_tp != 1 || !info.row_parallel.empty() || !info.expert_patterns.empty()) {
    return std::nullopt;
  }
  return "saved at 1 tensor-parallel rank, its universal_checkpoint_info has no "
         "parameter_with_row_parallelism_patterns (Megatron-DeepSpeed writes them only when "
         "saving at T > 1): the universal checkpoint concatenates row-parallel weights on dim 0, "
         "and DeepSpeed resuming it at T > 1 splits them there, silently wrong. Load it at T = 1, "
         "or supply the patterns with --universal-info FILE";
}

Result<MergeRules> MergeRules::Compile(UniversalInfo info) {
  MergeRules rules;
  auto compile = [](const std::vector<std::string>& texts, List* out) -> Status {
    for (const std::string& text : texts) {
      if (const char* what = PythonOnly(text)) {
        return Status::InvalidArgument("universal_checkpoint_info pattern '" + text + "': " + what +
                                       " (Python re syntax ucfs does not match)");
      }
      try {
        out->push_back({text, std::make_shared<const std::regex>(text, std::regex::ECMAScript)});
      } catch (const std::regex_error& e) {
        return Status::Corruption("universal_checkpoint_info pattern '" + text +
                                  "' is no regular expression (" + e.what() + ")");
      }
    }
    return Status::OK();
  };
  UCFS_RETURN_IF_ERROR(compile(info.pipeline_replicated, &rules.pipeline_));
  UCFS_RETURN_IF_ERROR(compile(info.tp_replicated, &rules.replicated_));
  UCFS_RETURN_IF_ERROR(compile(info.to_average, &rules.average_));
  UCFS_RETURN_IF_ERROR(compile(info.two_sub_params_cat_dim_0, &rules.two_sub_));
  UCFS_RETURN_IF_ERROR(compile(info.row_parallel, &rules.row_));
  UCFS_RETURN_IF_ERROR(compile(info.vocabulary, &rules.vocab_));
  std::vector<std::string> affine;
  for (const auto& entry : info.affine.params) affine.push_back(entry.first);
  UCFS_RETURN_IF_ERROR(compile(affine, &rules.affine_));
  for (const SubParamShape& s : info.sub_params) {
    rules.sub_params_.emplace_back();
    UCFS_RETURN_IF_ERROR(compile(s.patterns, &rules.sub_params_.back()));
  }
  rules.info_ = std::move(info);
  return rules;
}

bool MergeRules::Matches(const Pattern& p, std::string_view name) {
  // re.match: anchored at the start, not at the end.
  return std::regex_search(name.begin(), name.end(), *p.re, std::regex_constants::match_continuous);
}

Result<const MergeRules::Pattern*> MergeRules::MatchOne(const List& list, std::string_view name,
                                                        const char* what) {
  const Pattern* found = nullptr;
  for (const Pattern& p : list) {
    if (!Matches(p, name)) continue;
    if (found != nullptr) {
      return Status::Corruption("universal_checkpoint_info: param '" + std::string(name) +
                                "' matches two " + what + " patterns, '" + found->text + "' and '" +
                                p.text + "' (ds_to_universal.py refuses this too)");
    }
    found = &p;
  }
  if (found != nullptr) used_.insert(found->text);
  return found;
}

Result<ParamMerge> MergeRules::Decide(std::string_view name) {
  ParamMerge merge;
  // The converter looks for sub-params first, for every name.
  std::optional<SubParamShape> sub;
  for (size_t i = 0; i < sub_params_.size() && !sub; ++i) {
    for (const Pattern& p : sub_params_[i]) {
      if (Matches(p, name)) {
        used_.insert(p.text);
        sub = info_.sub_params[i];
        break;
      }
    }
  }
  UCFS_ASSIGN_OR_RETURN(const Pattern* affine, MatchOne(affine_, name, "affine_map"));
  if (affine != nullptr) {
    // An affine map comes first: its geometry replaces the category rule,
    // whose patterns matching the name count as used (the converter's
    // consume_superseded_patterns); the vocabulary cut still applies.
    // A replicated or row-parallel pattern says what the map must agree
    // with (the name table checks it).
    UCFS_ASSIGN_OR_RETURN(const Pattern* replicated, MatchOne(replicated_, name, "tp_replicated"));
    UCFS_ASSIGN_OR_RETURN(const Pattern* row, MatchOne(row_, name, "row_parallelism"));
    for (const auto& [list, what] :
         {std::pair{&average_, "to_average"}, {&two_sub_, "2_sub_params_cat_dim_0"}}) {
      UCFS_RETURN_IF_ERROR(MatchOne(*list, name, what).status());
    }
    if (replicated != nullptr) {
      merge.category = MergeRule::kReplicated;
    } else if (row != nullptr) {
      merge.category = MergeRule::kConcat;
      merge.cat_dim = 1;
    }
    merge.rule = MergeRule::kAffine;
    for (const auto& [pattern, map] : info_.affine.params) {
      if (pattern == affine->text) merge.affine = map;
    }
  } else {
    UCFS_RETURN_IF_ERROR(DecideByCategory(name, std::move(sub), &merge));
  }
  UCFS_ASSIGN_OR_RETURN(const Pattern* vocab, MatchOne(vocab_, name, "vocabulary"));
  merge.vocab = vocab != nullptr;
  if (merge.vocab && !info_.original_vocab_size) {
    return Status::Corruption("universal_checkpoint_info: '" + std::string(name) +
                              "' is a vocabulary param, but original_vocab_size is missing");
  }
  return merge;
}

Status MergeRules::DecideByCategory(std::string_view name, std::optional<SubParamShape> sub,
                                    ParamMerge* merge) {
  UCFS_ASSIGN_OR_RETURN(const Pattern* replicated, MatchOne(replicated_, name, "tp_replicated"));
  if (replicated != nullptr) {
    merge->rule = MergeRule::kReplicated;
    return Status::OK();
  }
  UCFS_ASSIGN_OR_RETURN(const Pattern* average, MatchOne(average_, name, "to_average"));
  if (average != nullptr) {
    merge->rule = MergeRule::kAverage;
    return Status::OK();
  }
  UCFS_ASSIGN_OR_RETURN(const Pattern* two, MatchOne(two_sub_, name, "2_sub_params_cat_dim_0"));
  if (two != nullptr) {
    merge->rule = MergeRule::kTwoSubParamsDim0;
    return Status::OK();
  }
  if (sub) {
    merge->rule = MergeRule::kSubParams;
    merge->sub_param_shape = std::move(sub);
    return Status::OK();
  }
  UCFS_ASSIGN_OR_RETURN(const Pattern* row, MatchOne(row_, name, "row_parallelism"));
  merge->rule = MergeRule::kConcat;
  merge->cat_dim = row != nullptr ? 1 : 0;
  return Status::OK();
}

bool MergeRules::PipelineReplicated(std::string_view name) const {
  for (const Pattern& p : pipeline_) {
    if (Matches(p, name)) return true;
  }
  return false;
}

std::vector<std::string> MergeRules::UnusedPatterns() const {
  std::vector<std::string> out;
  auto add = [&](const List& list) {
    for (const Pattern& p : list) {
      if (!used_.contains(p.text)) out.push_back(p.text);
    }
  };
  for (const List* list : {&replicated_, &average_, &two_sub_, &row_, &vocab_}) add(*list);
  for (const List& list : sub_params_) add(list);
  return out;
}

}  // namespace ucfs
