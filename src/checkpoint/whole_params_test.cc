#include "ucfs/checkpoint/whole_params.h"

#include <gtest/gtest.h>

#include <vector>

namespace ucfs {
namespace {

// muon_z1_fp32_ws2's Muon group: fc1.weight 240, fc2.weight 300, mixer 63,
// spread 15 (618 elements, P = 310 at W = 2): rank 0's buffer is
// fc1.weight + fc2.weight (540), rank 1's fc2.weight + mixer + spread (378),
// as DeepSpeed 0.19.8 saved them.
TEST(WholeParams, MuonZ1Fixture) {
  const std::vector<uint64_t> offsets = {0, 240, 540, 603};
  const std::vector<uint64_t> numels = {240, 300, 63, 15};
  WholeParamsLayout l = PlaceWholeParams(310, 2, offsets, numels);
  EXPECT_EQ(l.rank_numel, (std::vector<uint64_t>{540, 378}));
  EXPECT_EQ(l.first_rank, (std::vector<uint32_t>{0, 0, 1, 1}));
  EXPECT_EQ(l.offset, (std::vector<uint64_t>{0, 240, 300, 363}));
}

// muon_z2_fp32_ws3: P = 206; fc1.weight spans ranks 0-1, fc2.weight 1-2.
TEST(WholeParams, MuonZ2Fixture) {
  const std::vector<uint64_t> offsets = {0, 240, 540, 603};
  const std::vector<uint64_t> numels = {240, 300, 63, 15};
  WholeParamsLayout l = PlaceWholeParams(206, 3, offsets, numels);
  EXPECT_EQ(l.rank_numel, (std::vector<uint64_t>{240, 540, 378}));
  EXPECT_EQ(l.first_rank, (std::vector<uint32_t>{0, 1, 2, 2}));
  EXPECT_EQ(l.offset, (std::vector<uint64_t>{0, 240, 300, 363}));
}

// A param over several whole partitions is on each of them; ranks past the
// params (padding only) keep no buffer; empty params touch nothing.
TEST(WholeParams, SpansAndEmptyRanks) {
  const std::vector<uint64_t> offsets = {0, 2, 2, 11};
  const std::vector<uint64_t> numels = {2, 0, 9, 1};
  WholeParamsLayout l = PlaceWholeParams(3, 6, offsets, numels);
  EXPECT_EQ(l.rank_numel, (std::vector<uint64_t>{11, 9, 9, 10, 0, 0}));
  EXPECT_EQ(l.first_rank, (std::vector<uint32_t>{0, 0, 0, 3}));
  EXPECT_EQ(l.offset, (std::vector<uint64_t>{0, 0, 2, 9}));
}

}  // namespace
}  // namespace ucfs
