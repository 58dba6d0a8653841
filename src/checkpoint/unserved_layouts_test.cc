// Each layout ucfs refuses (unserved_layouts.h) made from a real
// checkpoint with the one thing that shows it, refused by name, naming the
// file, at open — before any view could serve a byte of it.
#include "checkpoint/unserved_layouts.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "test_support.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {
namespace {

using pickle::NodeId;

class UnservedLayoutTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.CopyTreeFrom(testing::FixtureDir(GetParam()) + "/checkpoint", "/ck").ok());
  }
  bool flat_groups() const { return GetParam().starts_with("z2"); }
  static std::string Tag() { return "/ck/global_step4"; }
  static std::string Optim(int rank) {
    return Tag() + "/zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt";
  }
  // The model-states file whose ds_config the checkpoint reads.
  std::string Model() const {
    return Tag() + (flat_groups() ? "/mp_rank_00_model_states.pt"
                                  : "/zero_pp_rank_0_mp_rank_00_model_states.pt");
  }
  void Edit(const std::string& file, const std::function<void(pickle::Document*)>& edit) {
    env_.WriteFile(file, testing::RepackTorchFile(*env_.Contents(file), edit));
  }
  // zero_optimization of the model states' ds_config gains key = value.
  void SetZeroConfig(const std::string& key,
                     const std::function<NodeId(pickle::Document*)>& value) {
    Edit(Model(), [&](pickle::Document* d) {
      const NodeId zero = d->Get(d->Get(d->root(), "ds_config"), "zero_optimization");
      d->AppendPair(zero, d->AddStr(key), value(d));
    });
  }
  // Open is refused as NotSupported naming `file` and saying `what`.
  void ExpectRefused(const std::string& file, const std::string& what) {
    Status s = Checkpoint::Open(env_, "/ck").status();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
    EXPECT_EQ(s.file(), file) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("refuses it rather than serve"), std::string::npos);
  }
  MemEnv env_;
};

TEST_P(UnservedLayoutTest, TheFixtureItselfOpens) {
  EXPECT_TRUE(Checkpoint::Open(env_, "/ck").ok());
}

TEST_P(UnservedLayoutTest, ZenFlow) {
  SetZeroConfig("zenflow", [](pickle::Document* d) {
    return d->AddDict({d->AddStr("topk_ratio"), d->AddFloat(0.1)});
  });
  ExpectRefused(Model(), "a ZenFlow run (zero_optimization.zenflow");
}

TEST_P(UnservedLayoutTest, ZenFlowOffIsNoZenFlow) {
  SetZeroConfig("zenflow", [](pickle::Document* d) { return d->AddNone(); });
  EXPECT_TRUE(Checkpoint::Open(env_, "/ck").ok());
}

TEST_P(UnservedLayoutTest, MiCS) {
  SetZeroConfig("mics_shard_size", [](pickle::Document* d) { return d->AddInt(2); });
  ExpectRefused(Model(), "a MiCS run (zero_optimization.mics_shard_size 2");
}

TEST_P(UnservedLayoutTest, MiCSOffIsNoMiCS) {
  // DeepSpeed's default, -1.
  SetZeroConfig("mics_shard_size", [](pickle::Document* d) { return d->AddInt(-1); });
  EXPECT_TRUE(Checkpoint::Open(env_, "/ck").ok());
}

TEST_P(UnservedLayoutTest, OptimizerOffloadedToNvme) {
  ASSERT_TRUE(env_.MakeDir(Tag() + "/offloaded_tensors", 0755, 0).ok());
  ExpectRefused(Tag() + "/offloaded_tensors", "offloaded to NVMe");
}

TEST_P(UnservedLayoutTest, RankFilesWrittenInParts) {
  const std::string whole = *env_.Contents(Optim(1));
  ASSERT_TRUE(env_.RemoveFile(Optim(1)));
  env_.WriteFile(Optim(1) + "-0.2", whole.substr(0, whole.size() / 2));
  env_.WriteFile(Optim(1) + "-1.2", whole.substr(whole.size() / 2));
  ExpectRefused(Optim(1) + "-0.2", "written in parts by FastCheckpointEngine");
}

TEST_P(UnservedLayoutTest, NamesLikePartsOfNoRankFileAreLeftAlone) {
  env_.WriteFile(Tag() + "/notes.pt-0.2", "x");
  env_.WriteFile(Tag() + "/zero_pp_rank_0_mp_rank_00_optim_states.pt-x.2", "x");
  EXPECT_TRUE(Checkpoint::Open(env_, "/ck").ok());
}

TEST_P(UnservedLayoutTest, AutoEpLayers) {
  Edit(Model(), [](pickle::Document* d) {
    d->AppendPair(d->root(), d->AddStr("ds_autoep_layers"),
                  d->AddList({d->AddDict({d->AddStr("ep_size"), d->AddInt(2)})}));
  });
  ExpectRefused(Model(),
                "AutoEP experts saved as no known format (ds_autoep_layers "
                "checkpoint_format)");
}

TEST_P(UnservedLayoutTest, AutoEpFoldedIntoAutoTp) {
  Edit(Model(), [](pickle::Document* d) {
    d->AppendPair(
        d->root(), d->AddStr("ds_autoep_layers"),
        d->AddList({d->AddDict({d->AddStr("checkpoint_format"), d->AddStr("per_expert_files"),
                                d->AddStr("folding"), d->AddDict({})})}));
  });
  ExpectRefused(Model(), "AutoEP experts folded into AutoTP ranks (ds_autoep_layers 'folding')");
}

TEST_P(UnservedLayoutTest, NoAutoEpLayersIsNoAutoEp) {
  // DeepSpeed 0.19.8 saves None where no layer is AutoEP's.
  Edit(Model(), [](pickle::Document* d) {
    d->AppendPair(d->root(), d->AddStr("ds_autoep_layers"), d->AddNone());
  });
  EXPECT_TRUE(Checkpoint::Open(env_, "/ck").ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, UnservedLayoutTest,
                         ::testing::Values("z2_tricky_fp32_ws2", "z3_fp32_ws2"));

// ZeRO-1/2 with elastic_checkpoint: base_optimizer_state is a list of each
// group's states.
TEST(UnservedLayout, ElasticCheckpoint) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(testing::FixtureDir("z2_tricky_fp32_ws2") + "/checkpoint", "/ck").ok());
  const std::string optim0 = "/ck/global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt";
  env.WriteFile(optim0, testing::RepackTorchFile(*env.Contents(optim0), [](pickle::Document* d) {
                  const NodeId osd = d->Get(d->root(), "optimizer_state_dict");
                  const NodeId base = d->Get(osd, "base_optimizer_state");
                  const NodeId state = d->Get(base, "state");
                  const auto items = d->MappingItems(state);
                  std::vector<NodeId> groups;
                  for (const auto& [k, v] : *items) groups.push_back(v);
                  pickle::Node& n = d->mutable_node(osd);
                  for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
                    if (d->AsStr(n.items[i]) == "base_optimizer_state") {
                      n.items[i + 1] = d->AddList(groups);
                    }
                  }
                }));
  Status s = Checkpoint::Open(env, "/ck").status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_EQ(s.file(), optim0) << s.ToString();
  EXPECT_NE(s.message().find("elastic_checkpoint save"), std::string::npos) << s.ToString();
}

// The optimizer_state_dict of `file` in `env` gains key = value.
void AddToOptimizerState(MemEnv& env, const std::string& file, const std::string& key,
                         const std::function<NodeId(pickle::Document*)>& value) {
  env.WriteFile(file, testing::RepackTorchFile(*env.Contents(file), [&](pickle::Document* d) {
                  d->AppendPair(d->Get(d->root(), "optimizer_state_dict"), d->AddStr(key),
                                value(d));
                }));
}

// 0.19.x's ZeRO-1/2 files list each param's padding inside its group's
// flat buffer (zeros unless zero_optimization.parameter_alignment): served
// (param_alignment.cc), but where no ds_config says whether it is on, only
// paddings some rule makes; others are refused.
TEST(UnservedLayout, ParameterAlignmentOfNoRule) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(testing::FixtureDir("z2_tricky_fp32_ws2") + "/checkpoint", "/ck").ok());
  auto plain = Checkpoint::Open(env, "/ck");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  const std::string optim0 = "/ck/global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt";
  // Zeros, but `odd` after group 1's second param.
  auto paddings = [&](int64_t odd) {
    return [&plain, odd](pickle::Document* d) {
      std::vector<NodeId> groups;
      for (size_t k = 0; k < plain->sub_groups().size(); ++k) {
        std::vector<NodeId> list;
        for (size_t i = 0; i < plain->sub_groups()[k].params.size(); ++i) {
          list.push_back(d->AddInt(k == 1 && i == 1 ? odd : 0));
        }
        groups.push_back(d->AddList(std::move(list)));
      }
      return d->AddList(std::move(groups));
    };
  };
  AddToOptimizerState(env, optim0, "param_alignment_paddings", paddings(0));
  EXPECT_TRUE(Checkpoint::Open(env, "/ck").ok());
  ASSERT_TRUE(
      env.CopyTreeFrom(testing::FixtureDir("z2_tricky_fp32_ws2") + "/checkpoint", "/ck").ok());
  // 0.14.5's ds_config says nothing of parameter_alignment; no rule pads by 5.
  AddToOptimizerState(env, optim0, "param_alignment_paddings", paddings(5));
  Status s = Checkpoint::Open(env, "/ck").status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_EQ(s.file(), optim0) << s.ToString();
  EXPECT_NE(s.message().find("parameter alignment's paddings of no known rule "
                             "(param_alignment_paddings["),
            std::string::npos)
      << s.ToString();
}

// 0.19.x's ZeRO-3 files describe sub-groups partitioned over the expert
// group's ranks where AutoEP placed experts: one not as DeepSpeed writes
// them is refused, naming the file.
TEST(UnservedLayout, MalformedPartitionGroups) {
  MemEnv env;
  ASSERT_TRUE(env.CopyTreeFrom(testing::FixtureDir("z3_fp32_ws2") + "/checkpoint", "/ck").ok());
  const std::string optim1 = "/ck/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt";
  AddToOptimizerState(env, optim1, "ds_zero_partition_groups", [](pickle::Document* d) {
    return d->AddList({d->AddDict({d->AddStr("partition_count"), d->AddInt(1)})});
  });
  Status s = Checkpoint::Open(env, "/ck").status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_EQ(s.file(), optim1) << s.ToString();
  EXPECT_NE(s.message().find("ds_zero_partition_groups[0] is {'partition_count': 1}, not one "
                             "family's partition group"),
            std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace ucfs
