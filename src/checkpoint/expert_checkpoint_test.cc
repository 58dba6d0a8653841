// DeepSpeed 0.19.8's expert-parallel checkpoints at ZeRO-2 (tests/data/
// modern/{moe,autoep}_z2_fp32_e2d2: W 4, EP 2, D 2): each expert group is
// one flat buffer per EP rank, cut over its EDP group, and every byte
// MapState serves is the live value the saving run recorded.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "test_support.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/expert_topology.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {
namespace {

using testing::LiveState;
using testing::ModernDir;

// Native MoE: 2 local experts per EP rank; EP rank e's local expert l is
// global expert 2e + l, under the name the expert files give it.
std::string GlobalName(const std::string& local, uint32_t family) {
  const std::string prefix = "deepspeed_experts.";
  const size_t at = local.find(prefix) + prefix.size();
  const int id = local[at] - '0';
  return local.substr(0, at) + std::to_string(2 * family + id) + local.substr(at + 1);
}

TEST(ExpertCheckpointTest, NativeMoeEveryStateIsTheLiveValue) {
  const std::string fixture = "moe_z2_fp32_e2d2";
  auto c = Checkpoint::Open(*Env::Posix(), ModernDir(fixture) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->expert_parallel(), 2u);
  EXPECT_FALSE(c->autoep());
  ASSERT_EQ(c->param_group_count(), 2u);
  ASSERT_EQ(c->sub_groups().size(), 3u);  // dense, experts of EP ranks 0 and 1
  EXPECT_EQ(c->sub_groups()[1].members, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(c->sub_groups()[2].members, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(c->sub_groups()[0].partition_numel, 528u);
  EXPECT_EQ(c->sub_groups()[1].partition_numel, 544u);
  EXPECT_EQ(c->SubGroupOnRank(1, 3), 2u);
  size_t compared = 0;
  for (size_t p = 0; p < c->params().size(); ++p) {
    const ParamInfo& param = c->params()[p];
    const bool expert = c->sub_groups()[param.sub_group].expert_parallel > 1;
    const std::string live = expert ? GlobalName(param.name, param.family) : param.name;
    for (const SubGroupState& gs : c->StatesOf(p)) {
      const std::string& state = c->states()[gs.state].name;
      EXPECT_TRUE(testing::FullState(*c, p, gs.state) == LiveState(fixture, live, state))
          << param.name << " (family " << param.family << ") " << state;
      ++compared;
    }
  }
  EXPECT_EQ(compared, (6 + 2 * 8) * 3u);
}

class AutoEpCheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AutoEpCheckpointTest, StacksAreTheirEpRanksExperts) {
  const std::string fixture = GetParam();
  auto c = Checkpoint::Open(*Env::Posix(), ModernDir(fixture) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->autoep());
  const nlohmann::json& facts = testing::ModernFacts(fixture);
  const uint32_t w = facts["world_size"].get<uint32_t>();
  const bool data_first = facts["ds_config"].value("use_data_before_expert_parallelism", false);
  EXPECT_EQ(c->data_before_expert_parallelism(), data_first);
  for (const SubGroupInfo& sg : c->sub_groups()) {
    if (sg.expert_parallel == 1) continue;
    EXPECT_EQ(sg.members, (ExpertTopology{w, 2, data_first}.Members(sg.family)));
  }
  // Every live (param, state), experts once per EP rank.
  std::map<std::string, size_t> compared;
  for (size_t p = 0; p < c->params().size(); ++p) {
    const ParamInfo& param = c->params()[p];
    const bool expert = c->sub_groups()[param.sub_group].expert_parallel > 1;
    for (const SubGroupState& gs : c->StatesOf(p)) {
      const std::string& state = c->states()[gs.state].name;
      std::string live = LiveState(fixture, param.name, state);
      if (expert) {
        // The live [E, a, b] stack by global expert: EP rank e holds its
        // E / 2 in order.
        const size_t half = live.size() / 2;
        live = live.substr(param.family * half, half);
      }
      EXPECT_TRUE(testing::FullState(*c, p, gs.state) == live)
          << param.name << " (family " << param.family << ") " << state;
      compared[param.name + " " + state] += 1;
    }
  }
  std::map<std::string, size_t> want;
  for (const auto& [name, states] : facts["live_state"]["params"].items()) {
    const bool expert = name.find(".experts.") != std::string::npos;
    for (const auto& [state, value] : states.items()) want[name + " " + state] = expert ? 2 : 1;
  }
  EXPECT_EQ(compared, want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AutoEpCheckpointTest,
                         ::testing::Values("autoep_z1_fp32_e2d2", "autoep_z2_fp32_e2d2",
                                           "autoep_z2_fp32_e2d3", "autoep_z2_fp32_e2d2_dbe",
                                           "autoep_z3_fp32_e2d2"));

}  // namespace
}  // namespace ucfs
