#include "ucfs/partition.h"

#include <gtest/gtest.h>

#include <map>

#include "test_support.h"

namespace ucfs {
namespace {

TEST(Partition, ValidCountsIncludingPaddingOverSeveralRanks) {
  auto valid = [](uint64_t n, uint32_t w) {
    std::vector<uint64_t> v;
    for (uint32_t r = 0; r < w; ++r) v.push_back(ValidNumel(n, w, r));
    return v;
  };
  EXPECT_EQ(valid(5, 4), (std::vector<uint64_t>{2, 2, 1, 0}));
  EXPECT_EQ(valid(1, 4), (std::vector<uint64_t>{1, 0, 0, 0}));
  EXPECT_EQ(valid(77, 3), (std::vector<uint64_t>{26, 26, 25}));
  EXPECT_EQ(valid(15, 3), (std::vector<uint64_t>{5, 5, 5}));
  EXPECT_EQ(valid(0, 2), (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(valid(3, 8), (std::vector<uint64_t>{1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(PartitionNumel(77, 3), 26u);
  EXPECT_EQ(PartitionNumel(1, 4), 1u);
}

TEST(Partition, SplitByRankCoversEveryRangeExactly) {
  for (uint64_t n : {1u, 2u, 5u, 7u, 12u, 77u, 100u}) {
    for (uint32_t w = 1; w <= 9; ++w) {
      const uint64_t p = PartitionNumel(n, w);
      for (uint64_t b = 0; b <= n; ++b) {
        for (uint64_t e = b; e <= n; ++e) {
          uint64_t pos = b;
          for (const RankPiece& piece : SplitByRank(n, w, b, e)) {
            ASSERT_EQ(piece.global_begin, pos);
            ASSERT_EQ(piece.rank, pos / p);
            ASSERT_EQ(piece.slot_offset, pos - piece.rank * p);
            ASSERT_GT(piece.count, 0u);
            ASSERT_LE(piece.slot_offset + piece.count, ValidNumel(n, w, piece.rank));
            pos += piece.count;
          }
          ASSERT_EQ(pos, e) << "n=" << n << " w=" << w << " [" << b << "," << e << ")";
        }
      }
    }
  }
}

// DeepSpeed's own sub-group split of the tricky model at every world size it
// was run with (ORACLE.json world_size_structures, sub_group_size 8).
TEST(Partition, SubGroupSplitMatchesDeepSpeedAtEveryWorldSize) {
  const auto oracle = testing::Oracle("z3_tricky_fp32_ws4");
  std::map<std::string, uint64_t> numel;
  for (const auto& p : oracle["model"]["trainable_params"]) {
    numel[p["name"].get<std::string>()] = p["numel"].get<uint64_t>();
  }
  const uint64_t sub_group_size = oracle["sub_group_size"].get<uint64_t>();
  size_t checked = 0;
  for (const auto& [ws_text, structure] : oracle["world_size_structures"].items()) {
    const auto w = static_cast<uint32_t>(std::stoul(ws_text));
    // The params of each param group, in order, and DeepSpeed's split.
    std::map<int, std::vector<std::string>> group_params;
    std::map<int, std::vector<uint32_t>> expected_sizes;
    for (const auto& sg : structure["sub_groups"]) {
      int g = sg["param_group"].get<int>();
      uint64_t flat = 0;
      for (const auto& name : sg["params"]) {
        group_params[g].push_back(name.get<std::string>());
        flat += PartitionNumel(numel[name.get<std::string>()], w);
      }
      EXPECT_EQ(flat, sg["fp32_flat_numel"].get<uint64_t>()) << "ws " << w;
      expected_sizes[g].push_back(static_cast<uint32_t>(sg["params"].size()));
    }
    for (const auto& [g, names] : group_params) {
      std::vector<uint64_t> parts;
      for (const auto& name : names) parts.push_back(PartitionNumel(numel[name], w));
      EXPECT_EQ(SplitSubGroups(parts, sub_group_size), expected_sizes[g])
          << "ws " << w << " group " << g;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 14u);  // 7 world sizes x 2 param groups
}

TEST(Partition, WholeGroupFitsInOneSubGroup) {
  std::vector<uint64_t> parts = {39, 18, 3, 8};
  EXPECT_EQ(SplitSubGroups(parts, kDefaultSubGroupSize), (std::vector<uint32_t>{4}));
  EXPECT_EQ(SplitSubGroups(parts, 68), (std::vector<uint32_t>{4}));
  EXPECT_EQ(SplitSubGroups(parts, 20), (std::vector<uint32_t>{1, 2, 1}));
  EXPECT_EQ(SplitSubGroups(parts, 40), (std::vector<uint32_t>{2, 2}));
  EXPECT_TRUE(SplitSubGroups({}, 8).empty());
}

}  // namespace
}  // namespace ucfs
