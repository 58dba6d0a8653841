// The checkpoint model of ZeRO-1 and -2 checkpoints (DeepSpeedZeroOptimizer
// and BF16_Optimizer), against what DeepSpeed itself wrote and reported.
#include <gtest/gtest.h>

#include <functional>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"

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
  const auto& oracle = testing::Oracle(GetParam());
  EXPECT_EQ(c.partitioning(), Partitioning::kFlatGroup);
  EXPECT_EQ(c.zero_stage(), oracle["zero_stage"].get<int>());
  EXPECT_EQ(c.optimizer_class(), oracle["optimizer_class"].get<std::string>().substr(
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
          if (piece.rank == r)
            ours[param.name] = {{"start", piece.slot_offset}, {"numel", piece.count}};
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
  const auto& oracle = testing::Oracle(GetParam());
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

// --- bad input -------------------------------------------------------------

class BrokenFlatGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.CopyTreeFrom(FixtureDir("z2_tricky_fp32_ws2") + "/checkpoint", "/ck").ok());
  }
  static std::string Optim(int rank) {
    return "/ck/global_step4/zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt";
  }
  static constexpr const char* kModel = "/ck/global_step4/mp_rank_00_model_states.pt";
  void Edit(const std::string& file, const std::function<void(pickle::Document*)>& edit) {
    env_.WriteFile(file, testing::RepackTorchFile(*env_.Contents(file), edit));
  }
  static NodeId Osd(pickle::Document* d) { return d->Get(d->root(), "optimizer_state_dict"); }
  Status OpenStatus() { return Checkpoint::Open(env_, "/ck").status(); }
  // The error names `file` and says `what`.
  void ExpectError(const std::string& file, const std::string& what) {
    Status s = OpenStatus();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.file(), file) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  }
  MemEnv env_;
};

TEST_F(BrokenFlatGroupTest, MissingRank) {
  ASSERT_TRUE(env_.RemoveFile(Optim(1)));
  // No model file per rank shows that a last rank is missing, rather than
  // the world smaller: the model states' dp_world_size does.
  ExpectError(Optim(1), "missing: mp_rank_00_model_states.pt says dp_world_size 2");
}

TEST_F(BrokenFlatGroupTest, TruncatedShard) {
  std::string bytes = *env_.Contents(Optim(1));
  env_.WriteFile(Optim(1), bytes.substr(0, bytes.size() / 2));
  Status s = OpenStatus();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.file(), Optim(1)) << s.ToString();
}

TEST_F(BrokenFlatGroupTest, PartitionCountOfAnotherWorld) {
  Edit(Optim(1), [](pickle::Document* d) {
    const NodeId counts = d->Get(Osd(d), "partition_count");
    d->mutable_node(d->node(counts).items[1]).scalar = 4;
  });
  ExpectError(Optim(1),
              "partition_count is [2, 4], but rank 0's says param group 1 is cut over 2 ranks: "
              "files of different runs");
}

// Rank 0's count of another world for a group that is no MoE expert group
// (only those are cut over fewer ranks than all).
TEST_F(BrokenFlatGroupTest, PartitionCountOfAnotherWorldOnRankZero) {
  Edit(Optim(0), [](pickle::Document* d) {
    const NodeId counts = d->Get(Osd(d), "partition_count");
    d->mutable_node(d->node(counts).items[1]).scalar = 1;
  });
  ExpectError(Optim(0),
              "inconsistent world size: partition_count is [2, 1] but the tag directory has 2 "
              "ranks of optimizer files, and param group 1 is no MoE expert group");
}

// A partition shorter than the elements it must hold (rank 0 holds 416 of
// group 0's 831): refused, not served past its end.
TEST_F(BrokenFlatGroupTest, PartitionShorterThanItsValidElements) {
  Edit(Optim(0), [](pickle::Document* d) {
    const NodeId flats = d->Get(Osd(d), "single_partition_of_fp32_groups");
    const NodeId t = d->node(flats).items[0];
    auto args = d->SequenceItems(d->node(t).b);
    const NodeId size = (*args)[2];  // (416,)
    d->mutable_node(d->node(size).items[0]).scalar = 400;
  });
  ExpectError(Optim(0),
              "single_partition_of_fp32_groups[0] has shape [400], but param group 0 "
              "(831 elements) has partitions of 416 at world size 2, 416 of them valid "
              "on rank 0");
}

TEST_F(BrokenFlatGroupTest, RanksOfDifferentOptimizers) {
  Edit(Optim(1), [](pickle::Document* d) {
    pickle::Node& osd = d->mutable_node(Osd(d));
    for (size_t i = 0; i + 1 < osd.items.size(); i += 2) {
      if (d->AsStr(osd.items[i]) == "zero_stage") {
        osd.items.erase(osd.items.begin() + static_cast<std::ptrdiff_t>(i),
                        osd.items.begin() + static_cast<std::ptrdiff_t>(i) + 2);
        break;
      }
    }
  });
  ExpectError(Optim(1),
              "written by BF16_Optimizer at ZeRO stage 2, but rank 0's by "
              "DeepSpeedZeroOptimizer at stage 2: files of different runs");
}

TEST_F(BrokenFlatGroupTest, ZeroStage3BesideSharedModelStates) {
  Edit(Optim(0), [](pickle::Document* d) {
    const NodeId stage = d->Get(Osd(d), "zero_stage");
    const NodeId args = d->node(stage).b;
    d->mutable_node(d->node(args).items[1]).text = "weights";
  });
  ExpectError(Optim(0), "zero_stage is 3, but the tag directory has mp_rank_00_model_states.pt");
}

TEST_F(BrokenFlatGroupTest, FrozenParamMissingFromTheModule) {
  Edit(kModel, [](pickle::Document* d) {
    pickle::Node& module = d->mutable_node(d->Get(d->root(), "module"));
    for (size_t i = module.list_items; i + 1 < module.items.size(); i += 2) {
      if (d->AsStr(module.items[i]) == "proj.bias") {
        module.items.erase(module.items.begin() + static_cast<std::ptrdiff_t>(i),
                           module.items.begin() + static_cast<std::ptrdiff_t>(i) + 2);
        break;
      }
    }
  });
  ExpectError(kModel, "frozen param 'proj.bias' of frozen_param_shapes is not in module");
}

// A group's state with a tensor ucfs does not know how to partition (here
// group 0's exp_avg, a partition of another length, in group 1): refused by
// name, never copied to the new ranks as it was saved. (A tensor of the
// group's partition length is one more per-element state of that group.)
TEST_F(BrokenFlatGroupTest, UnknownPerElementStateIsRefused) {
  for (int rank : {0, 1}) {
    Edit(Optim(rank), [](pickle::Document* d) {
      const NodeId state = d->Get(d->Get(Osd(d), "base_optimizer_state"), "state");
      const NodeId group0 = (*d->MappingItems(state))[0].second;
      const NodeId group1 = (*d->MappingItems(state))[1].second;
      d->AppendPair(group1, d->AddStr("momentum_buffer"), d->Get(group0, "exp_avg"));
    });
  }
  Status s = OpenStatus();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  ExpectError(Optim(0),
              "optimizer state[1]['momentum_buffer'] (param group 1) is a tensor of shape");
  EXPECT_NE(s.message().find("the states it knows of this buffer (partitions of"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("are exp_avg, exp_avg_sq"), std::string::npos) << s.ToString();
}

// A momentum buffer not of a partition's length in a group that is not
// Muon's (its saved param_group lacks use_muon): ucfs knows the whole-params
// layout of Muon's groups only, so it is refused at group 0's buffer.
TEST_F(BrokenFlatGroupTest, WholeParamsMomentumOutsideAMuonGroupIsRefused) {
  for (int rank : {0, 1}) {
    Edit(Optim(rank), [](pickle::Document* d) {
      const NodeId state = d->Get(d->Get(Osd(d), "base_optimizer_state"), "state");
      const NodeId group0 = (*d->MappingItems(state))[0].second;
      pickle::Node& g = d->mutable_node(group0);
      for (size_t i = 0; i + 1 < g.items.size(); i += 2) {
        auto key = d->AsStr(g.items[i]);
        if (key == "exp_avg") g.items[i] = d->AddStr("momentum_buffer");
      }
      for (size_t i = 0; i + 1 < g.items.size(); i += 2) {
        if (d->AsStr(g.items[i]) == "exp_avg_sq") {
          g.items.erase(g.items.begin() + static_cast<std::ptrdiff_t>(i),
                        g.items.begin() + static_cast<std::ptrdiff_t>(i) + 2);
          break;
        }
      }
      // A buffer of whole params is not a partition's length (kept inside
      // its storage of 416 elements, which is checked first).
      const NodeId t = d->Get(group0, "momentum_buffer");
      auto args = d->SequenceItems(d->node(t).b);
      d->mutable_node(d->node((*args)[2]).items[0]).scalar = 300;
      d->mutable_node(d->node((*args)[3]).items[0]).scalar = 1;
    });
  }
  ExpectError(Optim(0),
              "optimizer state[0]['momentum_buffer'] (param group 0) is a tensor of "
              "shape [300] that ucfs does not know how to partition");
}

TEST_F(BrokenFlatGroupTest, TensorParallelRanksAreRefused) {
  env_.WriteFile("/ck/global_step4/mp_rank_01_model_states.pt", *env_.Contents(kModel));
  Status s = OpenStatus();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotSupported);
  EXPECT_NE(s.message().find("a tensor- or pipeline-parallel checkpoint (1 pipeline stage x 2 "
                             "tensor-parallel ranks"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("by mp_rank_01_model_states.pt"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ucfs
