// ZeRO-1/2's parameter alignment (DeepSpeed 0.19.8's
// zero_optimization.parameter_alignment), over the real fixtures
// align_z1_fp32_ws2 and align_z2_fp32_ws3: the paddings laid into the
// offsets give every state of every param the live engine's values, and
// paddings that disagree with DeepSpeed's arithmetic are an error naming
// the file, the group and the param.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "test_support.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {
namespace {

using pickle::NodeId;
using testing::LiveState;
using testing::ModernDir;

TEST(ParamAlignmentArithmetic, SixteenBytesOfTheElementSize) {
  EXPECT_EQ(ParamAlignmentElements(4), 4u);
  EXPECT_EQ(ParamAlignmentElements(2), 8u);
  EXPECT_EQ(ParamAlignmentElements(1), 16u);
  EXPECT_EQ(ParamAlignmentElements(8), 2u);
  // TrickyNet's groups: tri [3] then 288 elements, gate [1] then 12s; the
  // last param is never padded.
  const std::vector<uint64_t> decay{3, 288, 240, 300};
  EXPECT_EQ(ParamAlignmentPaddings(decay, 4), (std::vector<uint64_t>{1, 0, 0, 0}));
  const std::vector<uint64_t> odd{1, 5, 7};
  EXPECT_EQ(ParamAlignmentPaddings(odd, 8), (std::vector<uint64_t>{7, 3, 0}));
  EXPECT_EQ(ParamAlignmentPaddings(odd, 1), (std::vector<uint64_t>{0, 0, 0}));
}

class AlignedFixtureTest : public ::testing::TestWithParam<std::string> {};

// The groups are as DeepSpeed laid them: 3 + 1 + 288 + 240 + 300 and
// 1 + 3 + 12·... elements, partitions from those lengths; every param
// starts at a multiple of 4 elements; every state equals the live value.
TEST_P(AlignedFixtureTest, EveryStateIsTheLiveEnginesValue) {
  auto c = Checkpoint::Open(*Env::Posix(), ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->param_alignment(), 4u);
  ASSERT_EQ(c->sub_groups().size(), 2u);
  EXPECT_EQ(c->sub_groups()[0].numel, 832u);
  EXPECT_EQ(c->sub_groups()[1].numel, 108u);
  for (const SubGroupInfo& sg : c->sub_groups()) {
    EXPECT_EQ(sg.partition_numel, FlatPartitionNumel(sg.numel, c->world_size()));
  }
  size_t compared = 0;
  for (size_t p = 0; p < c->params().size(); ++p) {
    const ParamInfo& info = c->params()[p];
    EXPECT_EQ(info.offset % 4, 0u) << info.name;
    for (size_t s = 0; s < c->states().size(); ++s) {
      std::vector<Extent> extents;
      ASSERT_TRUE(c->MapState(p, s, 0, info.numel * 4, &extents).ok());
      EXPECT_EQ(testing::ReadExtents(*c, extents),
                LiveState(GetParam(), info.name, c->states()[s].name))
          << info.name << " " << c->states()[s].name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12u * 3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AlignedFixtureTest,
                         ::testing::Values("align_z1_fp32_ws2", "align_z2_fp32_ws3"));

// bf16 training: DeepSpeed pads by 16 bytes of the training dtype, 8
// elements, while the masters it pads stay float32.
TEST(AlignedFixture, Bf16ParamsStartAtMultiplesOf8Elements) {
  const std::string fixture = "align_z2_bf16_ws2";
  auto c = Checkpoint::Open(*Env::Posix(), ModernDir(fixture) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->lp_dtype(), DType::kBFloat16);
  EXPECT_EQ(c->param_alignment(), 8u);
  ASSERT_EQ(c->sub_groups().size(), 2u);
  EXPECT_EQ(c->sub_groups()[0].numel, 836u);
  EXPECT_EQ(c->sub_groups()[1].numel, 136u);
  size_t compared = 0;
  for (size_t p = 0; p < c->params().size(); ++p) {
    const ParamInfo& info = c->params()[p];
    EXPECT_EQ(info.offset % 8, 0u) << info.name;
    for (size_t s = 0; s < c->states().size(); ++s) {
      EXPECT_EQ(testing::FullState(*c, p, s), LiveState(fixture, info.name, c->states()[s].name))
          << info.name << " " << c->states()[s].name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12u * 3);
}

// A copy of align_z1_fp32_ws2 in memory, its files edited.
class BrokenAlignmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.CopyTreeFrom(ModernDir("align_z1_fp32_ws2") + "/checkpoint", "/ck").ok());
  }
  static std::string Optim(int rank) {
    return "/ck/global_step4/zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt";
  }
  static std::string Model() { return "/ck/global_step4/mp_rank_00_model_states.pt"; }
  void Edit(const std::string& file, const std::function<void(pickle::Document*)>& edit) {
    env_.WriteFile(file, testing::RepackTorchFile(*env_.Contents(file), edit));
  }
  // Rank `rank`'s param_alignment_paddings become `groups`.
  void SetPaddings(int rank, const std::vector<std::vector<int64_t>>& groups) {
    Edit(Optim(rank), [&](pickle::Document* d) {
      std::vector<NodeId> lists;
      for (const auto& g : groups) {
        std::vector<NodeId> items;
        for (int64_t p : g) items.push_back(d->AddInt(p));
        lists.push_back(d->AddList(std::move(items)));
      }
      const NodeId osd = d->Get(d->root(), "optimizer_state_dict");
      testing::RemoveDictKey(d, osd, "param_alignment_paddings");
      d->AppendPair(osd, d->AddStr("param_alignment_paddings"), d->AddList(std::move(lists)));
    });
  }
  void DropConfigAlignment() {
    Edit(Model(), [](pickle::Document* d) {
      testing::RemoveDictKey(d, d->Get(d->Get(d->root(), "ds_config"), "zero_optimization"),
                             "parameter_alignment");
    });
  }
  // Open fails with `code`, naming `file` and saying `what`.
  void ExpectError(Status::Code code, const std::string& file, const std::string& what) {
    Status s = Checkpoint::Open(env_, "/ck").status();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_EQ(s.file(), file) << s.ToString();
    EXPECT_NE(s.message().find(file + ": "), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  }
  MemEnv env_;
};

const std::vector<int64_t> kGroup1{3, 0, 0, 0, 0, 0, 0, 0};

TEST_F(BrokenAlignmentTest, TheCopyOpens) {
  auto c = Checkpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->params()[1].name, "embed.weight");
  EXPECT_EQ(c->params()[1].offset, 4u);
}

TEST_F(BrokenAlignmentTest, PaddingsThatDisagreeWithTheArithmeticAreCorruption) {
  SetPaddings(0, {{0, 0, 0, 0}, kGroup1});
  ExpectError(Status::Code::kCorruption, Optim(0),
              "param_alignment_paddings[0][0] (param 'tri') is 0, but "
              "zero_optimization.parameter_alignment on, with float32 params, pads it by 1");
}

TEST_F(BrokenAlignmentTest, APaddingOnTheLastParamIsCorruption) {
  SetPaddings(0, {{1, 0, 0, 4}, kGroup1});
  ExpectError(Status::Code::kCorruption, Optim(0),
              "param_alignment_paddings[0][3] (param 'fc2.weight') is 4");
}

TEST_F(BrokenAlignmentTest, AListOfTheWrongLengthIsCorruption) {
  SetPaddings(0, {{1, 0, 0}, kGroup1});
  ExpectError(Status::Code::kCorruption, Optim(0),
              "param_alignment_paddings[0] holds [1, 0, 0], but param group 0 has 4 params");
  SetPaddings(0, {{1, 0, 0, 0}});
  ExpectError(Status::Code::kCorruption, Optim(0), "not a list of 2 param groups' paddings");
}

TEST_F(BrokenAlignmentTest, AnotherRanksPaddingsMustBeRankZeros) {
  SetPaddings(1, {{1, 0, 0, 0}, {3, 0, 0, 0, 0, 0, 0, 4}});
  ExpectError(Status::Code::kCorruption, Optim(1),
              "param_alignment_paddings[1][7] (param 'head.bias') is 4, but rank 0's is 0");
}

TEST_F(BrokenAlignmentTest, MissingPaddingsWhereTheConfigAlignsAreCorruption) {
  Edit(Optim(0), [](pickle::Document* d) {
    testing::RemoveDictKey(d, d->Get(d->root(), "optimizer_state_dict"),
                           "param_alignment_paddings");
  });
  ExpectError(Status::Code::kCorruption, Optim(0),
              "no param_alignment_paddings, but its ds_config sets "
              "zero_optimization.parameter_alignment");
}

TEST_F(BrokenAlignmentTest, PaddingsTheConfigTurnsOffAreCorruption) {
  Edit(Model(), [](pickle::Document* d) {
    const NodeId zero = d->Get(d->Get(d->root(), "ds_config"), "zero_optimization");
    testing::RemoveDictKey(d, zero, "parameter_alignment");
    d->AppendPair(zero, d->AddStr("parameter_alignment"), d->AddBool(false));
  });
  ExpectError(Status::Code::kCorruption, Optim(0),
              "param_alignment_paddings[0][0] (param 'tri') is 1, but "
              "zero_optimization.parameter_alignment off pads it by 0");
}

// Without the setting in the ds_config, paddings that follow DeepSpeed's
// rule are served; others follow no rule and are refused.
TEST_F(BrokenAlignmentTest, WithoutTheConfigOnlyARulesPaddingsAreServed) {
  DropConfigAlignment();
  auto c = Checkpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->param_alignment(), 4u);
  SetPaddings(0, {{2, 0, 0, 0}, kGroup1});
  ExpectError(Status::Code::kNotSupported, Optim(0),
              "param_alignment_paddings[0][0] (param 'tri') is 2, which neither no alignment nor "
              "DeepSpeed's 4-element alignment of float32 params makes");
}

}  // namespace
}  // namespace ucfs
