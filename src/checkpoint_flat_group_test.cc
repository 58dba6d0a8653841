// The checkpoint model of ZeRO-1 and -2 checkpoints (DeepSpeedZeroOptimizer
// and BF16_Optimizer), against what DeepSpeed itself wrote and reported.
#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/checkpoint.h"

namespace ucfs {
namespace {

using pickle::NodeId;
using testing::FixtureDir;
using testing::LoadReference;
using testing::ReadExtents;
using testing::ReferenceManifest;

Checkpoint OpenFixture(const std::string& name) {
  auto c = Checkpoint::Open(*Env::Posix(), FixtureDir(name) + "/checkpoint");
  EXPECT_TRUE(c.ok()) << name << ": " << c.status().ToString();
  return std::move(c).value();
}

std::string StateBytes(const Checkpoint& c, size_t p, size_t s) {
  std::vector<Extent> extents;
  const uint64_t size = c.params()[p].numel * Info(c.states()[s].dtype).element_size;
  Status st = c.MapState(p, s, 0, size, &extents);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return ReadExtents(c, extents);
}

std::vector<double> Values(const std::string& bytes, DType dtype) {
  return testing::FloatValues(bytes, dtype);
}

class FlatGroupFixtureTest : public ::testing::TestWithParam<std::string> {};

// The partitioning DeepSpeed reported while it trained (ORACLE.json
// partitioning): group sizes, partitions, padding, and each rank's
// param_slice_mappings, which follow from the params' places.
TEST_P(FlatGroupFixtureTest, PartitioningIsDeepSpeeds) {
  const Checkpoint c = OpenFixture(GetParam());
  const auto oracle = testing::Oracle(GetParam());
  EXPECT_EQ(c.partitioning(), Partitioning::kFlatGroup);
  EXPECT_EQ(c.zero_stage(), oracle["zero_stage"].get<int>());
  EXPECT_EQ(c.optimizer_class(),
            oracle["optimizer_class"].get<std::string>().substr(
                oracle["optimizer_class"].get<std::string>().rfind('.') + 1));
  EXPECT_EQ(c.world_size(), oracle["world_size"].get<uint32_t>());
  EXPECT_EQ(c.files().model_per_rank, false);
  const auto& groups = oracle["partitioning"]["groups"];
  ASSERT_EQ(c.sub_groups().size(), groups.size());
  EXPECT_EQ(c.param_group_count(), groups.size());
  const uint32_t w = c.world_size();
  for (size_t g = 0; g < groups.size(); ++g) {
    const SubGroupInfo& sg = c.sub_groups()[g];
    EXPECT_EQ(sg.param_group, g);
    EXPECT_EQ(sg.numel, groups[g]["numel"].get<uint64_t>());
    EXPECT_EQ(sg.partition_numel, groups[g]["partition_numel"].get<uint64_t>());
    EXPECT_EQ(FlatGroupPadding(sg.numel, w), groups[g]["last_rank_padding"].get<uint64_t>());
    std::vector<std::string> names;
    for (uint32_t p : sg.params) names.push_back(c.params()[p].name);
    EXPECT_EQ(names, groups[g]["params"].get<std::vector<std::string>>());
    const auto saved = groups[g]["fp32_saved_numel_per_rank"].get<std::vector<uint64_t>>();
    for (uint32_t r = 0; r < w; ++r) {
      EXPECT_EQ(c.IsBf16Optimizer() ? sg.partition_numel : ZeroOptimizerSavedNumel(sg.numel, w, r),
                saved[r]);
    }
  }
  // Each rank's param_slice_mappings: a param's fragment of its partition.
  for (uint32_t r = 0; r < w; ++r) {
    const auto& mappings = oracle["file_facts"]["per_rank"][r]["param_slice_mappings"];
    for (size_t g = 0; g < groups.size(); ++g) {
      const SubGroupInfo& sg = c.sub_groups()[g];
      nlohmann::json ours = nlohmann::json::object();
      for (uint32_t p : sg.params) {
        const ParamInfo& param = c.params()[p];
        for (const RankPiece& piece :
             SplitFlatByRank(sg.partition_numel, param.offset, param.offset + param.numel)) {
          if (piece.rank == r) ours[param.name] = {{"start", piece.slot_offset}, {"numel", piece.count}};
        }
      }
      EXPECT_EQ(ours, mappings[g]) << "rank " << r << " group " << g;
    }
  }
}

// Every state of every param equals the reference universal checkpoint
// (expected/, whose files are byte-identical to those ds_to_universal.py
// wrote before it crashed on the 0-dim param).
TEST_P(FlatGroupFixtureTest, StatesEqualTheUniversalReference) {
  const Checkpoint c = OpenFixture(GetParam());
  const auto& universal = ReferenceManifest().at(GetParam()).at("expected_universal");
  ASSERT_EQ(universal.size(), c.params().size());
  ASSERT_EQ(c.states().size(), 3u);
  EXPECT_EQ(c.states()[1].name, "exp_avg");
  EXPECT_EQ(c.states()[2].name, "exp_avg_sq");
  for (size_t p = 0; p < c.params().size(); ++p) {
    const ParamInfo& param = c.params()[p];
    ASSERT_TRUE(universal.contains(param.name)) << param.name;
    const auto& files = universal.at(param.name);
    ASSERT_EQ(files.size(), c.states().size() + 1) << param.name;  // and step.pt
    for (size_t s = 0; s < c.states().size(); ++s) {
      const auto ref = LoadReference(files.at(c.states()[s].name));
      EXPECT_EQ(ref.dtype, Info(c.states()[s].dtype).torch_name);
      EXPECT_EQ(ref.bytes, StateBytes(c, p, s)) << param.name << " " << c.states()[s].name;
    }
    const auto step = LoadReference(files.at("step"));
    ASSERT_EQ(c.scalar_states()[param.sub_group].size(), 1u);
    const ScalarState& ours = c.scalar_states()[param.sub_group][0];
    EXPECT_EQ(ours.name, "step");
    EXPECT_TRUE(ours.is_tensor);
    ASSERT_EQ(step.dtype, "float32");
    EXPECT_EQ(Values(step.bytes, DType::kFloat32), std::vector<double>{ours.value});
  }
}

// The values DeepSpeed's live engine held when it saved (ORACLE.json): the
// fp32 weights and moments of every param, the frozen params (which only the
// model states hold at these stages) and the buffers.
TEST_P(FlatGroupFixtureTest, ValuesEqualTheLiveEngines) {
  const Checkpoint c = OpenFixture(GetParam());
  const auto oracle = testing::Oracle(GetParam());
  const auto& full = oracle["expected_full_values"];
  for (size_t s = 0; s < c.states().size(); ++s) {
    for (size_t p = 0; p < c.params().size(); ++p) {
      const std::string& name = c.params()[p].name;
      EXPECT_EQ(Values(StateBytes(c, p, s), c.states()[s].dtype),
                full[c.states()[s].name][name].get<std::vector<double>>())
          << c.states()[s].name << " " << name;
    }
  }
  const auto& frozen = oracle["expected_frozen_values"];
  ASSERT_EQ(c.frozen_params().size(), frozen.size());
  for (size_t f = 0; f < c.frozen_params().size(); ++f) {
    const FrozenParamInfo& info = c.frozen_params()[f];
    const auto& expected = frozen[info.name];
    EXPECT_EQ("torch." + std::string(Info(info.dtype).torch_name),
              expected["dtype"].get<std::string>());
    EXPECT_EQ(info.shape, expected["shape"].get<std::vector<int64_t>>());
    std::vector<Extent> extents;
    ASSERT_TRUE(c.MapFrozen(f, 0, info.numel * Info(info.dtype).element_size, &extents).ok());
    EXPECT_EQ(Values(ReadExtents(c, extents), info.dtype),
              expected["values"].get<std::vector<double>>())
        << info.name;
  }
  const auto& buffers = oracle["expected_buffer_values"];
  ASSERT_EQ(c.buffers().size(), buffers.size());
  for (const BufferInfo& b : c.buffers()) {
    EXPECT_EQ(Values(ReadExtents(c, {b.extent}), b.dtype),
              buffers[b.name]["values"].get<std::vector<double>>())
        << b.name;
  }
  ASSERT_EQ(c.tied_params().size(), 1u);
  EXPECT_EQ(c.tied_params()[0].alias, "head.weight");
  EXPECT_EQ(c.tied_params()[0].canonical, "embed.weight");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FlatGroupFixtureTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

}  // namespace
}  // namespace ucfs
