// How a tensor-parallel param's T slices merge into the full tensor, decided
// once per param from the run's `universal_checkpoint_info`, exactly as
// DeepSpeed's ds_to_universal.py decides it (../shared/reference/tp-pp.md
// 3.2, 3.3; merge_tp_slices in deepspeed/checkpoint/ds_to_universal.py).
//
// Megatron-DeepSpeed saves the patterns in every model-states file: lists
// of regular expressions matched against param names with Python's
// re.match (anchored at the start only, `.` any character). For each name
// the converter takes the first rule that matches, in this order, each list
// tried only when the ones before it did not match:
//   tp_replicated_parameter_patterns        every slice is the whole tensor
//   parameter_to_average_patterns           the slices' mean
//   parameter_with_2_sub_params_cat_dim_0   two halves, each concatenated on dim 0
//   parameter_with_sub_params               SubparamShape's sub-params (tried first,
//                                           for every name, but applied here)
//   parameter_with_row_parallelism_patterns concatenated on dim 1
//   (none)                                  concatenated on dim 0
// and, whatever the rule, vocabulary_parameter_patterns cut the merged rows
// to original_vocab_size. DeepSpeed 0.19.x's converter takes a param's
// affine map (affine_map.h) before all of these: its geometry replaces the
// rule, and the category patterns matching the name count as used. Two patterns of one list
// matching one name is an error, as is (strictly) a pattern no name used.
#ifndef UCFS_CHECKPOINT_MERGE_RULES_H_
#define UCFS_CHECKPOINT_MERGE_RULES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/affine_map.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {

// DeepSpeed's SubparamShape: a param made of sub-params partitioned along
// `partition_dim`; shape[partition_dim] lists the sub-params' sizes.
struct SubParamShape {
  std::vector<std::string> patterns;
  std::vector<std::vector<int64_t>> shape;  // each dimension: its size, or the sub-params' sizes
  int64_t partition_dim = 0;
  // The saved values of `patterns`, `shape` and `partition_dim`, as the
  // converter pickles them into every universal file of a param it merges
  // so (the SubparamShape dataclass built from them: tuples stay tuples).
  std::shared_ptr<const pickle::Document> saved;
  pickle::NodeId saved_patterns = pickle::kNoNode;
  pickle::NodeId saved_shape = pickle::kNoNode;
  pickle::NodeId saved_partition_dim = pickle::kNoNode;
};

// universal_checkpoint_info as saved (absent lists are empty).
struct UniversalInfo {
  std::optional<double> version;  // universal_checkpoint_version
  std::optional<int64_t> original_vocab_size;
  std::optional<int64_t> padded_vocab_size;
  std::vector<std::string> pipeline_replicated;
  std::vector<std::string> tp_replicated;
  std::vector<std::string> to_average;
  std::vector<std::string> two_sub_params_cat_dim_0;
  std::vector<SubParamShape> sub_params;
  std::vector<std::string> row_parallel;
  std::vector<std::string> vocabulary;
  AffineMaps affine;  // AutoTP's affine_map (DeepSpeed >= 0.19)
  // AutoEP's expert_parameter_patterns (DeepSpeed >= 0.19): the info of an
  // AutoEP run, which DeepSpeed writes at any T.
  std::vector<std::string> expert_patterns;
};

// The `universal_checkpoint_info` of a model-states pickle; nullopt where
// it has none. Corruption naming the key that is not what DeepSpeed saves.
Result<std::optional<UniversalInfo>> ReadUniversalInfo(const pickle::Document& doc);

// universal_checkpoint_info a user supplies (ucfs --universal-info FILE)
// for a checkpoint saved without it, or without lists it needs (Megatron
// writes the replicated and row-parallel ones only when it saves at T > 1):
// a JSON object with the saved dict's keys, each key present replacing the
// saved one.
struct SuppliedUniversalInfo {
  std::string path;  // named in messages
  std::string json;
};
// --universal-info FILE, read through `env` (null without one);
// InvalidArgument naming the file where it cannot be read.
Result<std::shared_ptr<const SuppliedUniversalInfo>> ReadSuppliedUniversalInfo(
    Env& env, const std::optional<std::string>& path);

// The universal_checkpoint_info of the model-states pickle (read from
// `model_states_file`) with `supplied` laid over it (null: as saved);
// nullopt where neither has one. Errors name the file that is wrong: the
// model states' Corruption, the supplied file's InvalidArgument for a key
// or value DeepSpeed does not save.
Result<std::optional<UniversalInfo>> ResolveUniversalInfo(const pickle::Document& model_states,
                                                          const std::string& model_states_file,
                                                          const SuppliedUniversalInfo* supplied);

// Why `info` would merge wrongly for a load at another tensor-parallel
// degree than `saved_tp`: saved at T = 1 without row-parallel patterns, the
// converter concatenates a row-parallel weight on dim 0 and the loader
// splits it there (DeepSpeed resumes silently wrong). nullopt where safe,
// and for an AutoEP run's info: its loader at T > 1 cuts each param by the
// live AutoTP metadata (universal_checkpoint.py _resolve_autotp_partition),
// not by the file's cat_dim.
std::optional<std::string> UnsafeAtAnotherTensorDegree(const UniversalInfo& info,
                                                       uint32_t saved_tp);

enum class MergeRule : uint8_t {
  kReplicated,
  kAverage,
  kTwoSubParamsDim0,
  kSubParams,
  kConcat,
  kAffine,
};

struct ParamMerge {
  MergeRule rule = MergeRule::kConcat;
  int cat_dim = 0;  // kConcat: 1 for row parallel; kTwoSubParamsDim0: 0
  std::optional<SubParamShape> sub_param_shape;  // kSubParams
  bool vocab = false;                            // rows cut to original_vocab_size
  std::shared_ptr<const ParamAffineMap> affine;  // kAffine
  // kAffine: the rule a replicated (kReplicated) or row-parallel (kConcat,
  // cat_dim 1) pattern also names, which the map must agree with.
  std::optional<MergeRule> category;
};

class MergeRules {
 public:
  // Each pattern compiled as Python's re.match takes it; InvalidArgument
  // naming one that uses Python syntax std::regex does not share (named
  // groups, lookbehind, inline flags, \A, \Z).
  static Result<MergeRules> Compile(UniversalInfo info);

  // `name`'s rule; Corruption when two patterns of one list match it.
  // Records the patterns the converter would have used.
  Result<ParamMerge> Decide(std::string_view name);
  // Whether later stages' copies of `name` are skipped (a tied embedding).
  bool PipelineReplicated(std::string_view name) const;
  // The patterns of every list but the pipeline one that no name decided
  // so far used: ds_to_universal.py asserts there are none unless
  // --no_strict.
  std::vector<std::string> UnusedPatterns() const;

  const UniversalInfo& info() const { return info_; }

 private:
  struct Pattern {
    std::string text;
    std::shared_ptr<const std::regex> re;
  };
  using List = std::vector<Pattern>;
  // The one pattern of `list` that matches `name`, or null.
  Result<const Pattern*> MatchOne(const List& list, std::string_view name, const char* what);
  static bool Matches(const Pattern& p, std::string_view name);
  // The category rule of `name` (no affine map), `sub` its SubparamShape.
  Status DecideByCategory(std::string_view name, std::optional<SubParamShape> sub,
                          ParamMerge* merge);

  UniversalInfo info_;
  List pipeline_, replicated_, average_, two_sub_, row_, vocab_, affine_;
  std::vector<List> sub_params_;  // by info_.sub_params
  std::set<std::string> used_;
};

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_MERGE_RULES_H_
