#include "ucfs/checkpoint/affine_map.h"

#include <gtest/gtest.h>

#include <vector>

namespace ucfs {
namespace {

using Shape = std::vector<int64_t>;

std::vector<int64_t> RowMajor(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// DeepSpeed's contiguous_split_map: rank t holds sizes[t] rows (dim 0) or
// columns (dim 1) of `shape`.
ParamAffineMap SplitMap(const Shape& shape, const std::vector<int64_t>& sizes, size_t dim) {
  ParamAffineMap map;
  map.logical_shape = shape;
  const std::vector<int64_t> source = RowMajor(shape);
  int64_t start = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    Shape shard = shape;
    shard[dim] = sizes[t];
    map.shards.push_back(
        {static_cast<int64_t>(t),
         shard,
         {{shard, start * source[dim], source, 0, RowMajor(shard), {static_cast<int64_t>(t)}}}});
    start += sizes[t];
  }
  return map;
}

// The full param's elements, each as (rank, slice element), read by the blocks.
std::vector<std::pair<uint32_t, uint64_t>> Elements(const std::vector<AffineBlock>& blocks,
                                                    uint64_t numel) {
  std::vector<std::pair<uint32_t, uint64_t>> out(numel, {UINT32_MAX, 0});
  for (const AffineBlock& b : blocks) {
    for (uint64_t i = 0; i < b.count; ++i) {
      for (uint64_t e = 0; e < b.length; ++e) {
        out[b.start + i * b.period + e] = {b.rank, b.slice_start + i * b.slice_period + e};
      }
    }
  }
  return out;
}

TEST(AffineMapTest, AColumnSplitIsOneRunPerRank) {
  auto blocks = LayOutAffineMap(SplitMap({6, 4}, {4, 2}, 0), {{4, 4}, {2, 4}});
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  ASSERT_EQ(blocks->size(), 2u);
  EXPECT_EQ((*blocks)[0].length, 16u);
  EXPECT_EQ((*blocks)[1].start, 16u);
  EXPECT_EQ((*blocks)[1].count, 1u);
  EXPECT_TRUE(AffineLayoutIsCategory(*blocks, {{4, 4}, {2, 4}}, {6, 4}, 0));
  EXPECT_FALSE(AffineLayoutIsCategory(*blocks, {{4, 4}, {2, 4}}, {6, 4}, 1));
}

// A row-parallel weight split unevenly along dim 1: one block per rank,
// a run per row, whatever the rows.
TEST(AffineMapTest, ARowSplitIsOneBlockOfRowRunsPerRank) {
  auto blocks = LayOutAffineMap(SplitMap({3, 5}, {3, 2}, 1), {{3, 3}, {3, 2}});
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  ASSERT_EQ(blocks->size(), 2u);
  const auto elements = Elements(*blocks, 15);
  for (uint64_t row = 0; row < 3; ++row) {
    for (uint64_t col = 0; col < 5; ++col) {
      const auto [rank, at] = elements[row * 5 + col];
      EXPECT_EQ(rank, col < 3 ? 0u : 1u);
      EXPECT_EQ(at, col < 3 ? row * 3 + col : row * 2 + col - 3);
    }
  }
  EXPECT_TRUE(AffineLayoutIsCategory(*blocks, {{3, 3}, {3, 2}}, {3, 5}, 1));
  EXPECT_FALSE(AffineLayoutIsCategory(*blocks, {{3, 3}, {3, 2}}, {3, 5}, 0));
}

// A replicated piece every rank lists comes from the first; a map whose
// copies sit elsewhere in a shard is not what a tp_replicated pattern says.
TEST(AffineMapTest, AReplicatedPieceIsTakenOnce) {
  ParamAffineMap map;
  map.logical_shape = {4, 2};
  const AffinePiece whole{{4, 2}, 0, {2, 1}, 0, {2, 1}, {0, 1}};
  map.shards = {{0, {4, 2}, {whole}}, {1, {4, 2}, {whole}}};
  auto blocks = LayOutAffineMap(map, {{4, 2}, {4, 2}});
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  ASSERT_EQ(blocks->size(), 1u);
  EXPECT_EQ((*blocks)[0].rank, 0u);
  EXPECT_TRUE(AffineLayoutIsCategory(*blocks, {{4, 2}, {4, 2}}, {4, 2}, std::nullopt));
  // The same rows, held upside down on every rank: a valid map, but not a
  // replicated param.
  const AffinePiece top{{2, 2}, 0, {2, 1}, 4, {2, 1}, {0, 1}};
  const AffinePiece bottom{{2, 2}, 4, {2, 1}, 0, {2, 1}, {0, 1}};
  map.shards = {{0, {4, 2}, {top, bottom}}, {1, {4, 2}, {top, bottom}}};
  blocks = LayOutAffineMap(map, {{4, 2}, {4, 2}});
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  EXPECT_FALSE(AffineLayoutIsCategory(*blocks, {{4, 2}, {4, 2}}, {4, 2}, std::nullopt));
}

// Fused sub-params (DeepSpeed's sub_param_map): Q then KV along dim 0, each
// split over the ranks: a rank's pieces are not adjacent in the param.
TEST(AffineMapTest, SubParamsInterleaveTheRanks) {
  ParamAffineMap map;
  map.logical_shape = {6, 2};
  map.shards = {
      {0, {3, 2}, {{{2, 2}, 0, {2, 1}, 0, {2, 1}, {0}}, {{1, 2}, 8, {2, 1}, 4, {2, 1}, {0}}}},
      {1, {3, 2}, {{{2, 2}, 4, {2, 1}, 0, {2, 1}, {1}}, {{1, 2}, 10, {2, 1}, 4, {2, 1}, {1}}}}};
  auto blocks = LayOutAffineMap(map, {{3, 2}, {3, 2}});
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  const auto elements = Elements(*blocks, 12);
  const std::vector<std::pair<uint32_t, uint64_t>> want = {{0, 0}, {0, 1}, {0, 2}, {0, 3},
                                                           {1, 0}, {1, 1}, {1, 2}, {1, 3},
                                                           {0, 4}, {0, 5}, {1, 4}, {1, 5}};
  EXPECT_EQ(elements, want);
  for (size_t i = 1; i < blocks->size(); ++i) EXPECT_LT((*blocks)[i - 1].start, (*blocks)[i].start);
}

// A piece strided on both sides (a transposed shard): one element per run.
TEST(AffineMapTest, ATransposedPieceIsElementRuns) {
  ParamAffineMap map;
  map.logical_shape = {2, 3};
  map.shards = {{0, {3, 2}, {{{2, 3}, 0, {3, 1}, 0, {1, 2}, {0}}}}};
  auto blocks = LayOutAffineMap(map, {{3, 2}});
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  const auto elements = Elements(*blocks, 6);
  for (uint64_t r = 0; r < 2; ++r) {
    for (uint64_t c = 0; c < 3; ++c) EXPECT_EQ(elements[r * 3 + c].second, c * 2 + r);
  }
}

class BrokenAffineMapTest : public ::testing::Test {
 protected:
  void Expect(const ParamAffineMap& map, const std::vector<Shape>& slices, Status::Code code,
              const std::string& says) {
    auto blocks = LayOutAffineMap(map, slices);
    ASSERT_FALSE(blocks.ok());
    EXPECT_EQ(blocks.status().code(), code) << blocks.status().ToString();
    EXPECT_NE(blocks.status().message().find(says), std::string::npos)
        << blocks.status().ToString();
  }
  ParamAffineMap map_ = SplitMap({6, 4}, {4, 2}, 0);
  std::vector<Shape> slices_ = {{4, 4}, {2, 4}};
};

TEST_F(BrokenAffineMapTest, AShardShapeNotTheSavedSlice) {
  Expect(map_, {{3, 4}, {3, 4}}, Status::Code::kCorruption,
         "gives rank 0 a shard of shape [4, 4], but its saved slice is [3, 4]");
}

TEST_F(BrokenAffineMapTest, PiecesOverlappingInTheParam) {
  map_.shards[1].pieces[0].source_offset = 12;  // rows 3-4, one of them rank 0's
  Expect(map_, slices_, Status::Code::kCorruption,
         "do not cover the param of shape [6, 4] exactly");
}

TEST_F(BrokenAffineMapTest, APieceOutsideItsShard) {
  map_.shards[1].pieces[0].dest_offset = 4;
  Expect(map_, slices_, Status::Code::kCorruption, "reaches past the param");
}

TEST_F(BrokenAffineMapTest, APieceLeavingPartOfItsShard) {
  map_.shards[0].pieces[0].shape = {3, 4};
  map_.shards[0].shape = {4, 4};
  Expect(map_, slices_, Status::Code::kCorruption, "rank 0's pieces do not fill its shard");
}

TEST_F(BrokenAffineMapTest, ARankMissingOrListedTwice) {
  map_.shards[1].rank = 0;
  Expect(map_, slices_, Status::Code::kCorruption, "not one of ranks 0-1 once");
  map_.shards.pop_back();
  Expect(map_, slices_, Status::Code::kCorruption, "the map lists 1 ranks");
}

TEST_F(BrokenAffineMapTest, NegativeOrHugeNumbers) {
  map_.shards[0].pieces[0].source_strides = {-4, 1};
  Expect(map_, slices_, Status::Code::kCorruption, "negative size or stride");
  map_.shards[0].pieces[0].source_strides = {INT64_MAX, 1};
  Expect(map_, slices_, Status::Code::kCorruption, "reaches past the param");
  map_.logical_shape = {INT64_MAX, INT64_MAX};
  Expect(map_, slices_, Status::Code::kCorruption, "is no shape");
}

TEST_F(BrokenAffineMapTest, APieceOnARankItsLocationsDoNotName) {
  map_.shards[1].pieces[0].locations = {0};
  Expect(map_, slices_, Status::Code::kCorruption, "whose locations do not name it");
}

TEST_F(BrokenAffineMapTest, AScaledPieceIsNotSupported) {
  map_.shards[1].pieces[0].scale = 0.5;
  Expect(map_, slices_, Status::Code::kNotSupported, "scaled by");
}

}  // namespace
}  // namespace ucfs
