#include "ucfs/checkpoint/expert_topology.h"

#include <gtest/gtest.h>

namespace ucfs {
namespace {

TEST(ExpertTopology, ExpertsFirstIsTheDefault) {
  // W 4, EP 2: EDP groups [0, 2] and [1, 3] (the fixtures' groups).
  const ExpertTopology t{4, 2, false};
  EXPECT_EQ(t.edp_size(), 2u);
  EXPECT_EQ(t.Members(0), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(t.Members(1), (std::vector<uint32_t>{1, 3}));
  for (uint32_t r = 0; r < 4; ++r) EXPECT_EQ(t.Rank(t.EpRank(r), t.EdpRank(r)), r);
  EXPECT_EQ(t.EpRank(3), 1u);
  EXPECT_EQ(t.EdpRank(3), 1u);
}

TEST(ExpertTopology, DataBeforeExpertParallelism) {
  // W 6, EP 2, D 3: EDP groups [0, 1, 2] and [3, 4, 5].
  const ExpertTopology t{6, 2, true};
  EXPECT_EQ(t.Members(0), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(t.Members(1), (std::vector<uint32_t>{3, 4, 5}));
  for (uint32_t r = 0; r < 6; ++r) EXPECT_EQ(t.Rank(t.EpRank(r), t.EdpRank(r)), r);
  EXPECT_EQ(t.EpRank(4), 1u);
  EXPECT_EQ(t.EdpRank(4), 1u);
}

TEST(ExpertTopology, DenseIsOneFamily) {
  const ExpertTopology t{3, 1, false};
  EXPECT_EQ(t.Members(0), (std::vector<uint32_t>{0, 1, 2}));
}

TEST(ExpertGroupSize, ParsesDeepSpeedsGroupNames) {
  EXPECT_EQ(ExpertGroupSize("ep_size_2"), 2u);
  EXPECT_EQ(ExpertGroupSize("ep_size_16"), 16u);
  EXPECT_EQ(ExpertGroupSize("ep_size_"), std::nullopt);
  EXPECT_EQ(ExpertGroupSize("ep_size_0"), std::nullopt);
  EXPECT_EQ(ExpertGroupSize("ep_size_2x"), std::nullopt);
  EXPECT_EQ(ExpertGroupSize("dense-params"), std::nullopt);
}

}  // namespace
}  // namespace ucfs
