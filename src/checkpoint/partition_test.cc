#include "ucfs/checkpoint/partition.h"

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
  const auto& oracle = testing::Oracle("z3_tricky_fp32_ws4");
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

// ZeRO-1/2: a group padded to a multiple of 2·W; the numbers of the
// z2_tricky_fp32_ws2 run (ORACLE.json partitioning: 831 -> 832, P 416,
// padding 1; 105 -> 108, P 54, padding 3), and a group smaller than its
// padding, where DeepSpeedZeroOptimizer's partition[:P - padding] keeps
// P - (padding - P) elements of the last rank, or none.
TEST(FlatPartition, PaddingAndSavedLengthsAsDeepSpeedHasThem) {
  EXPECT_EQ(FlatPartitionNumel(831, 2), 416u);
  EXPECT_EQ(FlatGroupPadding(831, 2), 1u);
  EXPECT_EQ(FlatPartitionNumel(105, 2), 54u);
  EXPECT_EQ(FlatGroupPadding(105, 2), 3u);
  EXPECT_EQ(ZeroOptimizerSavedNumel(831, 2, 0), 416u);
  EXPECT_EQ(ZeroOptimizerSavedNumel(831, 2, 1), 415u);
  EXPECT_EQ(ZeroOptimizerSavedNumel(105, 2, 1), 51u);
  // 3 elements at W=4: padded to 8, P = 2, padding 5 > P.
  EXPECT_EQ(FlatPartitionNumel(3, 4), 2u);
  EXPECT_EQ(FlatGroupPadding(3, 4), 5u);
  EXPECT_EQ((std::vector<uint64_t>{FlatValidNumel(3, 4, 0), FlatValidNumel(3, 4, 1),
                                   FlatValidNumel(3, 4, 2), FlatValidNumel(3, 4, 3)}),
            (std::vector<uint64_t>{2, 1, 0, 0}));
  EXPECT_EQ(ZeroOptimizerSavedNumel(3, 4, 3), 0u);  // partition[:-3] of 2
  EXPECT_EQ(ZeroOptimizerSavedNumel(5, 4, 3), 1u);  // padding 3: partition[:-1] of 2
  EXPECT_EQ(ZeroOptimizerSavedNumel(5, 4, 2), 2u);  // only the last rank drops padding
}

// A param's fragment on each rank (DeepSpeed's param_slice_mappings): fc1.weight,
// 240 elements at offset 291 of z2_tricky_fp32_ws2's group 0 (P 416), is
// {start 291, numel 125} on rank 0 and {start 0, numel 115} on rank 1; the
// fragments of any param tile it, and SplitFlatByRank agrees.
TEST(FlatPartition, FragmentsTileEveryParam) {
  auto f0 = FragmentOnRank(416, 291, 240, 0);
  auto f1 = FragmentOnRank(416, 291, 240, 1);
  ASSERT_TRUE(f0 && f1);
  EXPECT_EQ(f0->partition_start, 291u);
  EXPECT_EQ(f0->numel, 125u);
  EXPECT_EQ(f0->param_start, 0u);
  EXPECT_EQ(f1->partition_start, 0u);
  EXPECT_EQ(f1->numel, 115u);
  EXPECT_EQ(f1->param_start, 125u);
  EXPECT_FALSE(FragmentOnRank(416, 0, 3, 1));
  for (uint64_t p : {1u, 2u, 7u, 64u}) {
    for (uint64_t offset : {0u, 1u, 5u, 63u}) {
      for (uint64_t numel : {1u, 2u, 9u, 130u}) {
        uint64_t covered = 0;
        const auto pieces = SplitFlatByRank(p, offset, offset + numel);
        size_t next = 0;
        for (uint32_t r = 0; r * p < offset + numel; ++r) {
          auto f = FragmentOnRank(p, offset, numel, r);
          if (!f) continue;
          EXPECT_EQ(f->param_start, covered);
          ASSERT_LT(next, pieces.size());
          EXPECT_EQ(pieces[next].rank, r);
          EXPECT_EQ(pieces[next].slot_offset, f->partition_start);
          EXPECT_EQ(pieces[next].count, f->numel);
          ++next;
          covered += f->numel;
        }
        EXPECT_EQ(covered, numel);
        EXPECT_EQ(next, pieces.size());
      }
    }
  }
}

}  // namespace
}  // namespace ucfs
