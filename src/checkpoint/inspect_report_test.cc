#include "ucfs/checkpoint/inspect_report.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace ucfs {
namespace {

class InspectTest : public ::testing::TestWithParam<std::string> {};

// `ucfs inspect --json` agrees with what the oracle recorded of the run.
TEST_P(InspectTest, JsonAgreesWithTheOracle) {
  auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Through text: the report is ordered_json, the oracle plain json.
  const auto j = nlohmann::json::parse(InspectJson(*c).dump());
  const auto& oracle = testing::Oracle(GetParam());
  const uint32_t w = oracle["world_size"].get<uint32_t>();
  EXPECT_EQ(j["world_size"], w);
  EXPECT_EQ(j["zero_stage"], 3);
  EXPECT_EQ(j["ds_version"], oracle["deepspeed"]["version"]);
  // torch 1.13 wrote the fixtures (format_variants_test covers the other writers).
  EXPECT_EQ(j["format"], "torch 1.6-2.0 zip");
  EXPECT_EQ(j["dtype"], oracle["dtype"] == "bf16" ? "bfloat16" : "float32");
  EXPECT_EQ(j["tag"], oracle["checkpoint_tag"]);
  EXPECT_EQ(j["step"], 4.0);
  const auto& model = oracle["model"];
  const auto& params =
      model.contains("trainable_params") ? model["trainable_params"] : model["params"];
  ASSERT_EQ(j["params"].size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(j["params"][i]["name"], params[i]["name"]);
    EXPECT_EQ(j["params"][i]["shape"], params[i]["shape"]);
    EXPECT_EQ(j["params"][i]["numel"], params[i]["numel"]);
    uint64_t valid = 0;
    for (const auto& v : j["params"][i]["valid_per_rank"]) valid += v.get<uint64_t>();
    EXPECT_EQ(valid, params[i]["numel"].get<uint64_t>());
    EXPECT_EQ(j["params"][i]["valid_per_rank"].size(), w);
  }
  if (model.contains("frozen_params")) {
    ASSERT_EQ(j["frozen"].size(), model["frozen_params"].size());
    for (const auto& f : j["frozen"])
      EXPECT_EQ(f["shape"], model["frozen_params"][f["name"].get<std::string>()]);
    ASSERT_EQ(j["tied"].size(), 1u);
    EXPECT_EQ(j["tied"][0]["alias"], "head.weight");
    EXPECT_EQ(j["tied"][0]["canonical"], model["shared_params"]["head.weight"]);
    ASSERT_EQ(j["buffers"].size(), model["persistent_buffers"].size());
    EXPECT_EQ(j["buffers"][0]["name"], "mix");
    EXPECT_EQ(j["param_groups"], 2);
    EXPECT_EQ(j["sub_groups"].size(), 6u);
  } else {
    EXPECT_TRUE(j["frozen"].empty());
    EXPECT_TRUE(j["tied"].empty());
    EXPECT_TRUE(j["buffers"].empty());
    EXPECT_EQ(j["param_groups"], 1);
  }
  const std::string text = InspectText(*c);
  EXPECT_NE(text.find("world size  " + std::to_string(w)), std::string::npos) << text;
  for (const auto& p : params)
    EXPECT_NE(text.find(p["name"].get<std::string>()), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, InspectTest, ::testing::ValuesIn(testing::FixtureNames()));

class FlatGroupInspectTest : public ::testing::TestWithParam<std::string> {};

// ZeRO-1/2: the stage, the optimizer, each group's partitions and where each
// param lies, as DeepSpeed's live engine reported them (ORACLE.json): the
// valid elements of a param on rank r are its param_slice_mappings numel.
TEST_P(FlatGroupInspectTest, JsonAgreesWithTheOracle) {
  auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto j = nlohmann::json::parse(InspectJson(*c).dump());
  const auto& oracle = testing::Oracle(GetParam());
  const uint32_t w = oracle["world_size"].get<uint32_t>();
  EXPECT_EQ(j["zero_stage"], oracle["zero_stage"]);
  const std::string cls = oracle["optimizer_class"].get<std::string>();
  EXPECT_EQ(j["optimizer_class"], cls.substr(cls.rfind('.') + 1));
  EXPECT_EQ(j["partitioning"], "flat_group");
  EXPECT_EQ(j["step"], 4.0);
  EXPECT_EQ(j["optimizer_file_prefix"], oracle["dtype"] == "bf16" ? "bf16_" : "");
  const auto& groups = oracle["partitioning"]["groups"];
  ASSERT_EQ(j["sub_groups"].size(), groups.size());
  EXPECT_EQ(j["param_groups"], groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(j["sub_groups"][g]["numel"], groups[g]["numel"]);
    EXPECT_EQ(j["sub_groups"][g]["partition_numel"], groups[g]["partition_numel"]);
    EXPECT_EQ(j["sub_groups"][g]["params"], groups[g]["params"]);
  }
  for (const auto& p : j["params"]) {
    const std::string name = p["name"].get<std::string>();
    std::vector<uint64_t> expected(w);
    for (uint32_t r = 0; r < w; ++r) {
      for (const auto& mapping : oracle["file_facts"]["per_rank"][r]["param_slice_mappings"]) {
        if (mapping.contains(name)) expected[r] = mapping[name]["numel"].get<uint64_t>();
      }
    }
    EXPECT_EQ(p["valid_per_rank"].get<std::vector<uint64_t>>(), expected) << name;
  }
  ASSERT_EQ(j["frozen"].size(), 2u);
  EXPECT_EQ(j["frozen"][0]["in_model_states"], true);
  const std::string text = InspectText(*c);
  EXPECT_NE(text.find("ZeRO stage " + std::to_string(oracle["zero_stage"].get<int>())),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("frozen: 2 (whole, in the model states)"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FlatGroupInspectTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

TEST(InspectText, ValidCountsAreRunLengthEncoded) {
  auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir("z3_fp32_ws4") + "/checkpoint");
  ASSERT_TRUE(c.ok());
  const std::string text = InspectText(*c);
  // fc1.bias: 5 elements over 4 ranks -> 2, 2, 1, 0.
  EXPECT_NE(text.find("2\u00d72 1 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace ucfs
