#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/inspect.h"

namespace ucfs {
namespace {

class InspectTest : public ::testing::TestWithParam<std::string> {};

// `ucfs inspect --json` agrees with what the oracle recorded of the run.
TEST_P(InspectTest, JsonAgreesWithTheOracle) {
  auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Through text: the report is ordered_json, the oracle plain json.
  const auto j = nlohmann::json::parse(InspectJson(*c).dump());
  const auto oracle = testing::Oracle(GetParam());
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

TEST(InspectText, ValidCountsAreRunLengthEncoded) {
  auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir("z3_fp32_ws4") + "/checkpoint");
  ASSERT_TRUE(c.ok());
  const std::string text = InspectText(*c);
  // fc1.bias: 5 elements over 4 ranks -> 2, 2, 1, 0.
  EXPECT_NE(text.find("2\u00d72 1 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace ucfs
