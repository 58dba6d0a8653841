#include "ucfs/checkpoint/merge_rules.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"

namespace ucfs {
namespace {

// The rules ds_to_universal.py applied to the real fixtures, as their
// ORACLE.json records them per param ("rep", "col", "row", "vocab").
class FixtureMergeRulesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureMergeRulesTest, EveryParamGetsTheConvertersRule) {
  const std::string dir = testing::TpFixtureDir(GetParam());
  const auto& oracle = testing::TpOracle(GetParam());
  auto grid = ListParallelCheckpointFiles(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(grid.ok());
  auto shard = Checkpoint::OpenShard(*Env::Posix(), grid->shards[0]);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  auto info = ReadUniversalInfo(shard->rank0_model());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_TRUE(info->has_value());
  const auto& saved = oracle["universal_checkpoint_info_saved"];
  EXPECT_EQ((*info)->original_vocab_size, saved["original_vocab_size"].get<int64_t>());
  EXPECT_EQ((*info)->padded_vocab_size, saved["padded_vocab_size"].get<int64_t>());
  auto rules = MergeRules::Compile(std::move(**info));
  ASSERT_TRUE(rules.ok()) << rules.status().ToString();
  for (const auto& [name, param] : oracle["params"].items()) {
    auto merge = rules->Decide(name);
    ASSERT_TRUE(merge.ok()) << merge.status().ToString();
    const std::string tp = param["tp"];
    SCOPED_TRACE(name + " (" + tp + ")");
    if (tp == "rep") {
      EXPECT_EQ(merge->rule, MergeRule::kReplicated);
    } else if (tp == "col2") {  // SwiGLU's [gate; up]
      EXPECT_EQ(merge->rule, MergeRule::kTwoSubParamsDim0);
    } else {
      EXPECT_EQ(merge->rule, MergeRule::kConcat);
      EXPECT_EQ(merge->cat_dim, tp == "row" ? 1 : 0);
    }
    EXPECT_EQ(merge->vocab, tp == "vocab");
    // The pipeline's tied embeddings live on every stage that uses them.
    EXPECT_EQ(rules->PipelineReplicated(name), param["stages"].size() > 1);
  }
  EXPECT_EQ(rules->UnusedPatterns(), std::vector<std::string>());
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, FixtureMergeRulesTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

// DeepSpeed 0.19.8's AutoEP writes universal_checkpoint_info at T = 1 for
// its experts only: no row-parallel patterns, and none needed (its loader
// cuts by the live AutoTP metadata), so no warning.
TEST(UniversalInfo, AutoEpsIsNotMegatronsAtOneRank) {
  for (const char* name : {"autoep_z2_fp32_e2d2", "autoep_z3_fp32_e2d2"}) {
    auto c = Checkpoint::Open(*Env::Posix(), testing::ModernDir(name) + "/checkpoint");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto saved = ResolveUniversalInfo(c->rank0_model(), "model", nullptr);
    ASSERT_TRUE(saved.ok() && saved->has_value()) << name;
    EXPECT_TRUE((*saved)->row_parallel.empty()) << name;
    EXPECT_FALSE((*saved)->expert_patterns.empty()) << name;
    EXPECT_FALSE(UnsafeAtAnotherTensorDegree(**saved, 1)) << name;
  }
}

// Megatron-DeepSpeed at T = 1 saves no replicated or row-parallel
// patterns: flagged, and the patterns a user supplies (--universal-info)
// replace the saved lists key by key, the rest kept.
TEST(SuppliedUniversalInfo, ReplacesTheSavedListsItNames) {
  const std::string dir = testing::TpFixtureDir("tp1_z1_megatron_d2");
  auto c = Checkpoint::Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto saved = ResolveUniversalInfo(c->rank0_model(), "model", nullptr);
  ASSERT_TRUE(saved.ok() && saved->has_value());
  EXPECT_TRUE((*saved)->row_parallel.empty());
  ASSERT_TRUE(UnsafeAtAnotherTensorDegree(**saved, 1));
  EXPECT_NE(UnsafeAtAnotherTensorDegree(**saved, 1)->find("--universal-info"), std::string::npos);
  EXPECT_FALSE(UnsafeAtAnotherTensorDegree(**saved, 2));  // saved at T > 1: Megatron's lists
  SuppliedUniversalInfo supplied{dir + "/universal_info_rows.json",
                                 testing::ReadFile(dir + "/universal_info_rows.json")};
  auto patched = ResolveUniversalInfo(c->rank0_model(), "model", &supplied);
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ((*patched)->row_parallel.size(), 2u);
  EXPECT_EQ((*patched)->tp_replicated.size(), 9u);
  EXPECT_EQ((*patched)->vocabulary, (*saved)->vocabulary);
  EXPECT_EQ((*patched)->original_vocab_size, 13);
  EXPECT_FALSE(UnsafeAtAnotherTensorDegree(**patched, 1));
  // What is not DeepSpeed's is refused, naming the file and the key.
  for (const char* bad :
       {"[1]", "{\"no_such_key\": []}", "{\"tp_replicated_parameter_patterns\": 3}",
        "{\"vocabulary_parameter_patterns\": [1]}", "{\"original_vocab_size\": -2}", "not json"}) {
    SCOPED_TRACE(bad);
    SuppliedUniversalInfo wrong{"/p.json", bad};
    auto r = ResolveUniversalInfo(c->rank0_model(), "model", &wrong);
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(r.status().file(), "/p.json");
  }
}

MergeRules Rules(UniversalInfo info) {
  auto rules = MergeRules::Compile(std::move(info));
  EXPECT_TRUE(rules.ok()) << rules.status().ToString();
  return std::move(rules).value();
}

TEST(MergeRules, PythonReMatchAnchorsAtTheStartOnly) {
  UniversalInfo info;
  info.tp_replicated = {R"(\d+.input_layernorm.weight)", "final"};
  MergeRules rules = Rules(info);
  EXPECT_EQ(rules.Decide("12.input_layernorm.weight")->rule, MergeRule::kReplicated);
  EXPECT_EQ(rules.Decide("12Xinput_layernormXweight")->rule, MergeRule::kReplicated);  // `.`
  EXPECT_EQ(rules.Decide("final_layernorm.bias")->rule, MergeRule::kReplicated);       // no `$`
  EXPECT_EQ(rules.Decide("model.final")->rule, MergeRule::kConcat);                    // anchored
}

// The converter's elif chain: the first list that matches decides, and a
// list after it is never tried (its pattern stays unused).
TEST(MergeRules, FirstRuleInTheConvertersOrderDecides) {
  UniversalInfo info;
  info.tp_replicated = {"a"};
  info.to_average = {"ab"};
  info.two_sub_params_cat_dim_0 = {"abc"};
  info.row_parallel = {"abcd", "r"};
  info.vocabulary = {"v"};
  info.original_vocab_size = 13;
  SubParamShape sub;
  sub.patterns = {"s", "as"};
  sub.shape = {{4, 4}, {8}};
  sub.partition_dim = 0;
  info.sub_params = {sub};
  MergeRules rules = Rules(info);
  EXPECT_EQ(rules.Decide("abcd")->rule, MergeRule::kReplicated);
  EXPECT_EQ(rules.Decide("sx")->rule, MergeRule::kSubParams);
  EXPECT_EQ(rules.Decide("sx")->sub_param_shape->shape[0], (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(rules.Decide("as")->rule, MergeRule::kReplicated);  // sub-params looked at, not used
  auto row = rules.Decide("rv");
  EXPECT_EQ(row->rule, MergeRule::kConcat);
  EXPECT_EQ(row->cat_dim, 1);
  EXPECT_FALSE(row->vocab);
  auto vocab = rules.Decide("v");
  EXPECT_EQ(vocab->cat_dim, 0);
  EXPECT_TRUE(vocab->vocab);
  // "ab", "abc" and "abcd" were never reached; "as" was matched (eagerly).
  EXPECT_EQ(rules.UnusedPatterns(), (std::vector<std::string>{"ab", "abc", "abcd"}));
}

TEST(MergeRules, ErrorsAsTheConverterRaisesThem) {
  UniversalInfo two;
  two.row_parallel = {"x", "x.y"};
  MergeRules rules = Rules(two);
  auto both = rules.Decide("x.y.z");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("matches two row_parallelism patterns"),
            std::string::npos);
  UniversalInfo no_size;
  no_size.vocabulary = {"embed"};
  auto vocab = Rules(no_size).Decide("embed.weight");
  ASSERT_FALSE(vocab.ok());
  EXPECT_NE(vocab.status().message().find("original_vocab_size"), std::string::npos);
  for (const char* python : {"(?P<n>x)", "(?<=a)b", "(?i)x", R"(x\Z)", "a{,3}"}) {
    UniversalInfo info;
    info.tp_replicated = {python};
    auto compiled = MergeRules::Compile(info);
    ASSERT_FALSE(compiled.ok()) << python;
    EXPECT_NE(compiled.status().message().find(python), std::string::npos);
  }
  UniversalInfo broken;
  broken.tp_replicated = {"(unclosed"};
  EXPECT_EQ(MergeRules::Compile(broken).status().code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace ucfs
