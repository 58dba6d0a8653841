// Each shard group of a tensor- and pipeline-parallel checkpoint is the
// data-parallel checkpoint ucfs already reads: checked against the real
// DeepSpeed 0.14.5 fixtures' ORACLE.json (local shapes as saved, and every
// fp32, exp_avg and exp_avg_sq value of each (p, t) slice of the full
// tensors).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"

namespace ucfs {
namespace {

using nlohmann::json;

// The (p, t) slice of a full tensor (row-major, `shape`) that tensor-
// parallel rank t of T holds, by the param's rule: "rep" whole, "col" (and
// "vocab", over the padded rows) a block of rows, "row" a block of columns,
// "col2" (SwiGLU's [gate; up]) a block of rows of each half.
// Padding rows beyond the full tensor are not compared (nullopt).
std::vector<std::optional<double>> Slice(const std::vector<double>& full,
                                         const std::vector<int64_t>& full_shape,
                                         const std::vector<int64_t>& local_shape,
                                         const std::string& rule, uint32_t t) {
  std::vector<std::optional<double>> out;
  int64_t local_numel = 1;
  for (int64_t d : local_shape) local_numel *= d;
  const int64_t cols = full_shape.size() > 1 ? full_shape[1] : 1;
  const int64_t local_cols = local_shape.size() > 1 ? local_shape[1] : 1;
  for (int64_t i = 0; i < local_numel; ++i) {
    const int64_t r = i / local_cols, c = i % local_cols;
    int64_t fr = r, fc = c;
    if (rule == "col" || rule == "vocab") fr = static_cast<int64_t>(t) * local_shape[0] + r;
    if (rule == "row") fc = static_cast<int64_t>(t) * local_cols + c;
    if (rule == "col2") {  // two sub-params stacked on dim 0, each split over T
      const int64_t half = local_shape[0] / 2;
      fr = (r < half ? 0 : full_shape[0] / 2) + static_cast<int64_t>(t) * half + r % half;
    }
    if (fr >= full_shape[0]) {
      out.push_back(std::nullopt);
      continue;
    }
    out.push_back(full[static_cast<size_t>(fr * cols + fc)]);
  }
  return out;
}

class CheckpointShardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointShardTest, EveryShardGroupIsADataParallelCheckpoint) {
  const json& oracle = testing::TpOracle(GetParam());
  auto grid =
      ListParallelCheckpointFiles(*Env::Posix(), testing::TpFixtureDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(grid.ok()) << grid.status().ToString();
  ASSERT_TRUE(CheckNoParallelFileMissing(*grid).ok());
  size_t compared = 0;
  for (uint32_t m = 0; m < grid->shards.size(); ++m) {
    SCOPED_TRACE("mp rank " + std::to_string(m));
    auto ckpt = Checkpoint::OpenShard(*Env::Posix(), grid->shards[m]);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_EQ(ckpt->world_size(), grid->degrees.dp);
    const uint32_t p = grid->Stage(m), t = grid->TpRank(m);
    for (const auto& [name, info] : oracle["params"].items()) {
      const auto& stages = info["stages"];
      // A pipeline-replicated param is compared where it lives first (a
      // later stage's copy may differ: native_overrides).
      if (stages.empty() || stages[0].get<uint32_t>() != p) continue;
      auto index = ckpt->FindParam(name);
      ASSERT_TRUE(index) << name << " not in shard " << m;
      const ParamInfo& param = ckpt->params()[*index];
      const auto local = info["local_shape_saved"].get<std::vector<int64_t>>();
      EXPECT_EQ(param.shape, local) << name;
      const auto full_shape = info["full_shape"].get<std::vector<int64_t>>();
      for (const char* state : {"fp32", "exp_avg", "exp_avg_sq"}) {
        auto s = ckpt->FindState(state);
        ASSERT_TRUE(s) << state;
        std::vector<Extent> extents;
        const uint64_t bytes = static_cast<uint64_t>(param.numel) * 4;
        ASSERT_TRUE(ckpt->MapState(*index, *s, 0, bytes, &extents).ok()) << name;
        const std::vector<double> got =
            testing::FloatValues(testing::ReadExtents(*ckpt, extents), DType::kFloat32);
        const auto full = oracle["expected_full_values"][state][name].get<std::vector<double>>();
        const auto want = Slice(full, full_shape, local, info["tp"], t);
        ASSERT_EQ(got.size(), want.size()) << name << " " << state;
        for (size_t i = 0; i < got.size(); ++i) {
          if (!want[i]) continue;
          ASSERT_EQ(got[i], *want[i]) << name << " " << state << " [" << i << "]";
        }
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0u);
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, CheckpointShardTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

}  // namespace
}  // namespace ucfs
