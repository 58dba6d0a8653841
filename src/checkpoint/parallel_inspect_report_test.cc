#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "test_support.h"
#include "ucfs/checkpoint/inspect_report.h"

namespace ucfs {
namespace {

// The merge the oracle's worker gave each param ("col", "row", ...) as the
// report names it.
void ExpectMergeOfKind(const nlohmann::json& p, const std::string& kind) {
  if (kind == "rep") {
    EXPECT_EQ(p["merge"], "replicated") << p;
  } else if (kind == "row") {
    EXPECT_EQ(p["merge"], "concat") << p;
    EXPECT_EQ(p["cat_dim"], 1) << p;
  } else if (kind == "col" || kind == "vocab") {
    EXPECT_EQ(p["merge"], "concat") << p;
    EXPECT_EQ(p["cat_dim"], 0) << p;
  } else if (kind == "col2") {
    EXPECT_EQ(p["merge"], "two_sub_params_cat_dim_0") << p;
  } else {
    ADD_FAILURE() << "the oracle names a merge the test does not know: " << kind;
  }
  EXPECT_EQ(p["vocab"], kind == "vocab") << p;
}

class ParallelInspectTest : public ::testing::TestWithParam<std::string> {};

// The grid, its shard groups and the universal name table agree with what
// the oracle's worker built and trained.
TEST_P(ParallelInspectTest, AgreesWithTheOracle) {
  const std::string dir = testing::TpFixtureDir(GetParam());
  auto grid = ParallelCheckpoint::Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(grid.ok()) << grid.status().ToString();
  const auto j = nlohmann::json::parse(InspectJson(*grid).dump());
  const auto& oracle = testing::TpOracle(GetParam());
  const auto& topo = oracle["topology"];
  const uint32_t pp = topo["P"], tp = topo["T"], dp = topo["D"];
  EXPECT_EQ(j["degrees"]["pp"], pp);
  EXPECT_EQ(j["degrees"]["tp"], tp);
  EXPECT_EQ(j["degrees"]["dp"], dp);
  EXPECT_EQ(j["world_size"], pp * tp * dp);
  EXPECT_EQ(j["zero_stage"], oracle["zero_stage"]);
  EXPECT_EQ(j["optimizer_class"], oracle["optimizer_class"]);
  EXPECT_EQ(j["step"], 4.0);

  ASSERT_EQ(j["shard_groups"].size(), pp * tp);
  for (uint32_t m = 0; m < pp * tp; ++m) {
    const auto& s = j["shard_groups"][m];
    EXPECT_EQ(s["mp_rank"], m);
    EXPECT_EQ(s["stage"], m / tp);
    EXPECT_EQ(s["tp_rank"], m % tp);
    EXPECT_EQ(s["report"]["world_size"], dp);
    EXPECT_EQ(s["optimizer_files"].size(), dp);
    EXPECT_EQ(s["step"], 4.0);
  }

  const auto& u = j["universal"];
  EXPECT_TRUE(u["available"]) << u["error"];
  EXPECT_TRUE(u["universal_checkpoint_info"]);
  EXPECT_TRUE(u["unsafe_at_another_tensor_degree"].is_null());
  const auto& params = oracle["params"];
  ASSERT_EQ(u["params"].size(), params.size());
  for (const auto& p : u["params"]) {
    const std::string name = p["name"];
    ASSERT_TRUE(params.contains(name)) << name;
    const auto& want = params[name];
    EXPECT_EQ(p["shape"], want["full_shape"]) << name;
    EXPECT_EQ(p["local_shape"], want["local_shape_saved"]) << name;
    ExpectMergeOfKind(p, want["tp"]);
    // The lowest stage holding it is merged; the others hold copies.
    std::vector<uint32_t> stages = {p["stage"].get<uint32_t>()};
    for (const auto& s : p["copies_on"]) stages.push_back(s);
    EXPECT_EQ(nlohmann::json(stages), want["stages"]) << name;
  }

  const std::string text = InspectText(*grid);
  EXPECT_NE(text.find("grid        " + DescribeDegrees({pp, tp, dp})), std::string::npos) << text;
  EXPECT_NE(text.find("universal params: " + std::to_string(params.size())), std::string::npos);
  EXPECT_NE(text.find("shard groups: " + std::to_string(pp * tp)), std::string::npos);
  EXPECT_EQ(text.find("WARNING"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, ParallelInspectTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

std::shared_ptr<const Checkpoint> OpenTp1() {
  auto c =
      Checkpoint::Open(*Env::Posix(), testing::TpFixtureDir("tp1_z1_megatron_d2") + "/checkpoint");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::make_shared<const Checkpoint>(std::move(c).value()) : nullptr;
}

// A Megatron-DeepSpeed run saved at T = 1 has no row-parallel patterns:
// inspect says a load at T > 1 would be wrong, and still shows it as the
// data-parallel checkpoint it is.
TEST(ParallelInspect, FlagsAT1MegatronRunUnsafeAtAnotherT) {
  auto c = OpenTp1();
  ASSERT_TRUE(c);
  const ParallelCheckpoint grid = ParallelCheckpoint::OfDataParallel(c);
  const auto j = nlohmann::json::parse(InspectJson(grid).dump());
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["params"].size(), 28u);
  ASSERT_TRUE(j["universal"]["unsafe_at_another_tensor_degree"].is_string());
  EXPECT_NE(j["universal"]["unsafe_at_another_tensor_degree"].get<std::string>().find(
                "parameter_with_row_parallelism_patterns"),
            std::string::npos);
  for (const auto& p : j["universal"]["params"]) {
    EXPECT_EQ(p["cat_dim"], 0) << p;  // what the converter does, and why it is unsafe
  }
  const std::string text = InspectText(grid);
  EXPECT_NE(text.find("WARNING    unsafe to load at another tensor-parallel degree"),
            std::string::npos)
      << text;
}

// With the row-parallel patterns supplied, the flag goes and the row-
// parallel weights merge along dim 1.
TEST(ParallelInspect, SuppliedPatternsClearTheFlag) {
  const std::string dir = testing::TpFixtureDir("tp1_z1_megatron_d2");
  CheckpointOptions options;
  options.universal_info = std::make_shared<const SuppliedUniversalInfo>(SuppliedUniversalInfo{
      dir + "/universal_info_rows.json", testing::ReadFile(dir + "/universal_info_rows.json")});
  auto c = Checkpoint::Open(*Env::Posix(), dir + "/checkpoint", options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const ParallelCheckpoint grid =
      ParallelCheckpoint::OfDataParallel(std::make_shared<const Checkpoint>(std::move(c).value()));
  const auto j = nlohmann::json::parse(InspectJson(grid).dump());
  const auto& u = j["universal"];
  EXPECT_TRUE(u["unsafe_at_another_tensor_degree"].is_null()) << u;
  EXPECT_EQ(u["supplied"], dir + "/universal_info_rows.json");
  const auto& params = testing::TpOracle("tp1_z1_megatron_d2")["params"];
  for (const auto& p : u["params"]) {
    const std::string kind = params[p["name"].get<std::string>()]["tp"];
    if (kind == "row") EXPECT_EQ(p["cat_dim"], 1) << p;
  }
  EXPECT_EQ(InspectText(grid).find("WARNING"), std::string::npos);
}

// A data-parallel checkpoint without universal_checkpoint_info is reported
// as before: no universal section.
TEST(ParallelInspect, PlainDataParallelCheckpointHasNoUniversalSection) {
  auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir("z3_fp32_ws2") + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto plain = InspectJson(*c);
  const ParallelCheckpoint grid =
      ParallelCheckpoint::OfDataParallel(std::make_shared<const Checkpoint>(std::move(c).value()));
  EXPECT_EQ(InspectJson(grid), plain);
  EXPECT_EQ(InspectText(grid), InspectText(grid.shard(0)));
}

// The merges Megatron never asks for: inspect names them, with the
// SubparamShape and the shapes the merge gives.
TEST(ParallelInspect, AveragedAndSubParamMerges) {
  auto grid = ParallelCheckpoint::Open(
      *Env::Posix(), testing::TpFixtureDir("tp_z1_fp32_t2d2_merges") + "/checkpoint");
  ASSERT_TRUE(grid.ok()) << grid.status().ToString();
  ASSERT_TRUE(grid->merge_status().ok()) << grid->merge_status().ToString();
  const auto j = nlohmann::json::parse(InspectJson(*grid).dump());
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& p : j["universal"]["params"]) by_name[p["name"]] = p;
  const std::string layers = "language_model.encoder.layers.";
  for (const char* l : {"0", "1"}) {
    const auto& bias = by_name[layers + l + ".self_attention.query_key_value.bias"];
    EXPECT_EQ(bias["merge"], "average") << bias;
    EXPECT_EQ(bias["shape"], nlohmann::json({12})) << bias;  // the local shape, as the mean's
  }
  const auto& qkv = by_name[layers + "0.self_attention.query_key_value.weight"];
  EXPECT_EQ(qkv["merge"], "sub_params") << qkv;
  EXPECT_EQ(qkv["sub_param_shape"]["shape"], nlohmann::json({{8, 8, 8}, {8}})) << qkv;
  EXPECT_EQ(qkv["shape"], nlohmann::json({24, 8}));
  const auto& h4h = by_name[layers + "1.mlp.dense_h_to_4h.weight"];
  EXPECT_EQ(h4h["sub_param_shape"]["partition_dim"], 1) << h4h;
  EXPECT_EQ(h4h["shape"], nlohmann::json({32, 8}));  // SubparamShape's (32, (4, 4))
  EXPECT_NE(InspectText(*grid).find("sub-params, cat dim 1"), std::string::npos);
}

}  // namespace
}  // namespace ucfs
