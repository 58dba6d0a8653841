#include "ucfs/checkpoint/parallel_checkpoint.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace ucfs {
namespace {

class ParallelCheckpointTest : public ::testing::TestWithParam<std::string> {};

// The name table against what DeepSpeed's converter made of the real
// fixtures (ORACLE.json params): every name once, its full shape, the stage
// it is merged from and the stages that hold copies.
TEST_P(ParallelCheckpointTest, TheNameTableIsTheConverters) {
  const auto& oracle = testing::TpOracle(GetParam());
  auto c =
      ParallelCheckpoint::Open(*Env::Posix(), testing::TpFixtureDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->params().size(), oracle["params"].size());
  for (const MergedParam& p : c->params()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(oracle["params"].contains(p.name));
    const auto& want = oracle["params"][p.name];
    EXPECT_EQ(p.shape, want["full_shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(p.local_shape, want["local_shape_saved"].get<std::vector<int64_t>>());
    const auto stages = want["stages"].get<std::vector<uint32_t>>();
    EXPECT_EQ(p.stage, stages[0]);
    EXPECT_EQ(p.copies_on, std::vector<uint32_t>(stages.begin() + 1, stages.end()));
    ASSERT_EQ(p.slices.size(), c->degrees().tp);
    for (uint32_t t = 0; t < c->degrees().tp; ++t) {
      const Checkpoint& shard = c->shard(p.stage * c->degrees().tp + t);
      EXPECT_EQ(shard.params()[p.slices[t]].name, p.name);
    }
    // The vocabulary's storage keeps the padded rows its shards hold.
    if (p.merge.vocab) {
      const auto& info = oracle["universal_checkpoint_info_saved"];
      EXPECT_EQ(p.storage_shape[0], info["padded_vocab_size"].get<int64_t>());
      EXPECT_EQ(p.shape[0], info["original_vocab_size"].get<int64_t>());
    } else {
      EXPECT_EQ(p.storage_shape, p.shape);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, ParallelCheckpointTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

class BrokenParallelCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        env_.CopyTreeFrom(testing::TpFixtureDir("tp_z1_fp32_t2d2") + "/checkpoint", "/ck").ok());
  }
  static constexpr const char* kModel0 = "/ck/global_step4/mp_rank_00_model_states.pt";
  void EditInfo(const std::function<void(pickle::Document*, pickle::NodeId info)>& edit) {
    env_.WriteFile(kModel0,
                   testing::RepackTorchFile(*env_.Contents(kModel0), [&](pickle::Document* d) {
                     edit(d, d->Get(d->root(), "universal_checkpoint_info"));
                   }));
  }
  MemEnv env_;
};

TEST_F(BrokenParallelCheckpointTest, NoPatternsAtTwoTensorRanksIsRefused) {
  EditInfo([](pickle::Document* d, pickle::NodeId) {
    testing::RemoveDictKey(d, d->root(), "universal_checkpoint_info");
  });
  // The shard groups open (a view at a new D needs no merge); the name
  // table cannot be made, and says why.
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Status& s = c->merge_status();
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_EQ(s.file(), kModel0);
  EXPECT_NE(s.message().find("no universal_checkpoint_info"), std::string::npos);
  EXPECT_TRUE(c->params().empty());
}

TEST_F(BrokenParallelCheckpointTest, APatternNoParamMatchesIsRefused) {
  EditInfo([](pickle::Document* d, pickle::NodeId info) {
    pickle::NodeId list = d->Get(info, "tp_replicated_parameter_patterns");
    d->Append(list, d->AddStr("language_model.no_such_param"));
  });
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Status& s = c->merge_status();
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("patterns no param matches: 'language_model.no_such_param'"),
            std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace ucfs
