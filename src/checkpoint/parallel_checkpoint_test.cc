#include "ucfs/checkpoint/parallel_checkpoint.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace ucfs {
namespace {

class ParallelCheckpointTest : public ::testing::TestWithParam<std::string> {};

// The name table against what DeepSpeed's converter made of the real
// fixtures (ORACLE.json params): every name once, its full shape, the stage
// it is merged from and the stages that hold copies.
TEST_P(ParallelCheckpointTest, TheNameTableIsTheConverters) {
  const auto& oracle = testing::TpOracle(GetParam());
  auto c =
      ParallelCheckpoint::Open(*Env::Posix(), testing::TpFixtureDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->params().size(), oracle["params"].size());
  for (const MergedParam& p : c->params()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(oracle["params"].contains(p.name));
    const auto& want = oracle["params"][p.name];
    EXPECT_EQ(p.shape, want["full_shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(p.local_shape, want["local_shape_saved"].get<std::vector<int64_t>>());
    const auto stages = want["stages"].get<std::vector<uint32_t>>();
    EXPECT_EQ(p.stage, stages[0]);
    EXPECT_EQ(p.copies_on, std::vector<uint32_t>(stages.begin() + 1, stages.end()));
    ASSERT_EQ(p.slices.size(), c->degrees().tp);
    for (uint32_t t = 0; t < c->degrees().tp; ++t) {
      const Checkpoint& shard = c->shard(p.stage * c->degrees().tp + t);
      EXPECT_EQ(shard.params()[p.slices[t]].name, p.name);
    }
    // The vocabulary's storage keeps the padded rows its shards hold.
    if (p.merge.vocab) {
      const auto& info = oracle["universal_checkpoint_info_saved"];
      EXPECT_EQ(p.storage_shape[0], info["padded_vocab_size"].get<int64_t>());
      EXPECT_EQ(p.shape[0], info["original_vocab_size"].get<int64_t>());
    } else {
      EXPECT_EQ(p.storage_shape, p.shape);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, ParallelCheckpointTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

class BrokenParallelCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        env_.CopyTreeFrom(testing::TpFixtureDir("tp_z1_fp32_t2d2") + "/checkpoint", "/ck").ok());
  }
  static constexpr const char* kModel0 = "/ck/global_step4/mp_rank_00_model_states.pt";
  void EditInfo(const std::function<void(pickle::Document*, pickle::NodeId info)>& edit) {
    env_.WriteFile(kModel0,
                   testing::RepackTorchFile(*env_.Contents(kModel0), [&](pickle::Document* d) {
                     edit(d, d->Get(d->root(), "universal_checkpoint_info"));
                   }));
  }
  MemEnv env_;
};

TEST_F(BrokenParallelCheckpointTest, NoPatternsAtTwoTensorRanksIsRefused) {
  EditInfo([](pickle::Document* d, pickle::NodeId) {
    testing::RemoveDictKey(d, d->root(), "universal_checkpoint_info");
  });
  // The shard groups open (a view at a new D needs no merge); the name
  // table cannot be made, and says why.
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Status& s = c->merge_status();
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_EQ(s.file(), kModel0);
  EXPECT_NE(s.message().find("no universal_checkpoint_info"), std::string::npos);
  EXPECT_TRUE(c->params().empty());
}

TEST_F(BrokenParallelCheckpointTest, APatternNoParamMatchesIsRefused) {
  EditInfo([](pickle::Document* d, pickle::NodeId info) {
    pickle::NodeId list = d->Get(info, "tp_replicated_parameter_patterns");
    d->Append(list, d->AddStr("language_model.no_such_param"));
  });
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Status& s = c->merge_status();
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("patterns no param matches: 'language_model.no_such_param'"),
            std::string::npos)
      << s.ToString();
}

// DeepSpeed 0.19.8's AutoTP (uneven GQA heads, an odd vocabulary): its
// affine map, read and checked against the saved slices at open.
class AffineMapCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        env_.CopyTreeFrom(
                testing::TpFixtureDir("modern/autotp_uneven_z1_fp32_t2d2") + "/checkpoint", "/ck")
            .ok());
  }
  static constexpr const char* kModel0 = "/ck/global_step4/mp_rank_00_model_states.pt";
  static constexpr const char* kQ = "^model\\.layers\\.0\\.self_attn\\.q_proj\\.weight$";
  // Edits rank `rank`'s first piece of `pattern`'s entry in tensor rank 0's
  // model states (where ucfs reads universal_checkpoint_info).
  void EditPiece(const char* pattern, int64_t rank,
                 const std::function<void(pickle::Document*, pickle::NodeId piece)>& edit) {
    env_.WriteFile(kModel0,
                   testing::RepackTorchFile(*env_.Contents(kModel0), [&](pickle::Document* d) {
                     const pickle::NodeId info = d->Get(d->root(), "universal_checkpoint_info");
                     const pickle::NodeId entry =
                         d->Get(d->Get(d->Get(info, "affine_map"), "params"), pattern);
                     const auto ranks = d->MappingItems(d->Get(entry, "ranks"));
                     for (const auto& [key, value] : *ranks) {
                       if (d->AsInt(key) != rank) continue;
                       edit(d, (*d->SequenceItems(d->Get(value, "pieces")))[0]);
                     }
                   }));
  }
  void SetOffset(pickle::Document* d, pickle::NodeId piece, const char* side, int64_t offset) {
    d->mutable_node((*d->SequenceItems(d->Get(piece, side)))[0]).scalar = offset;
  }
  MemEnv env_;
};

TEST_F(AffineMapCheckpointTest, UnevenSlicesMergeByTheMap) {
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->merge_status().ok()) << c->merge_status().ToString();
  for (const MergedParam& p : c->params()) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.merge.rule, MergeRule::kAffine);
    ASSERT_NE(p.affine_blocks, nullptr);
    if (p.name == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_EQ(p.shape, (std::vector<int64_t>{24, 24}));
      EXPECT_EQ(c->shard(1).params()[p.slices[1]].shape, (std::vector<int64_t>{8, 24}));
    }
    if (p.name == "lm_head.weight") EXPECT_TRUE(p.merge.vocab);
    // Replicated by pattern: embed_tokens and the norms, which the map agrees with.
    EXPECT_EQ(
        p.merge.category == MergeRule::kReplicated,
        p.name.find("norm") != std::string::npos || p.name.find("embed") != std::string::npos);
  }
}

TEST_F(AffineMapCheckpointTest, AMapOverlappingItsOwnRowsIsCorruptionNamingTheParam) {
  EditPiece(kQ, 1, [&](pickle::Document* d, pickle::NodeId piece) {
    SetOffset(d, piece, "source", 24 * 8);  // rank 1's rows start inside rank 0's
  });
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Status& s = c->merge_status();
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_EQ(s.file(), kModel0);
  EXPECT_NE(s.message().find("param 'model.layers.0.self_attn.q_proj.weight': its affine map: "
                             "the pieces do not cover the param of shape [24, 24] exactly once"),
            std::string::npos)
      << s.ToString();
  EXPECT_TRUE(c->params().empty());
}

TEST_F(AffineMapCheckpointTest, AMapDisagreeingWithAReplicatedPatternIsCorruption) {
  // Rank 0's copy of embed_tokens [61, 24] read as stored transposed (dest
  // strides [1, 61]): a valid map, which the tp_replicated pattern naming
  // the param contradicts.
  EditPiece("^model\\.embed_tokens\\.weight$", 0, [&](pickle::Document* d, pickle::NodeId piece) {
    const pickle::NodeId strides = (*d->SequenceItems(d->Get(piece, "dest")))[1];
    const std::vector<pickle::NodeId> items = *d->SequenceItems(strides);
    d->mutable_node(items[0]).scalar = 1;
    d->mutable_node(items[1]).scalar = 61;
  });
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Status& s = c->merge_status();
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("param 'model.embed_tokens.weight': its affine map: disagrees with "
                             "its tp_replicated pattern"),
            std::string::npos)
      << s.ToString();
}

TEST_F(AffineMapCheckpointTest, ANewerMapVersionIsNotSupported) {
  env_.WriteFile(kModel0,
                 testing::RepackTorchFile(*env_.Contents(kModel0), [&](pickle::Document* d) {
                   const pickle::NodeId info = d->Get(d->root(), "universal_checkpoint_info");
                   d->mutable_node(d->Get(d->Get(info, "affine_map"), "version")).scalar = 2;
                 }));
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->merge_status().code(), Status::Code::kNotSupported);
  EXPECT_NE(c->merge_status().message().find("affine_map version 2"), std::string::npos)
      << c->merge_status().ToString();
}

TEST_F(BrokenParallelCheckpointTest, AnEmptyAffineMapIsNoMap) {
  EditInfo([](pickle::Document* d, pickle::NodeId info) {
    d->AppendPair(
        info, d->AddStr("affine_map"),
        d->AddDict({d->AddStr("version"), d->AddInt(1), d->AddStr("params"), d->AddDict({})}));
  });
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->merge_status().ok()) << c->merge_status().ToString();
}

// DeepSpeed >= 0.19.5's checkpoint_parallel_dimensions in every model-states
// file: the degrees the file names make, or an error naming the file.
void AddParallelDimensions(MemEnv& env, const std::string& file, int64_t pp, int64_t tp) {
  env.WriteFile(file, testing::RepackTorchFile(*env.Contents(file), [&](pickle::Document* d) {
                  const pickle::NodeId dims = d->AddDict({d->AddStr("pp_degree"), d->AddInt(pp),
                                                          d->AddStr("tp_degree"), d->AddInt(tp)});
                  d->AppendPair(d->root(), d->AddStr("checkpoint_parallel_dimensions"), dims);
                }));
}

TEST_F(BrokenParallelCheckpointTest, ParallelDimensionsAgreeingWithTheFilesOpen) {
  for (const char* m : {"00", "01"}) {
    AddParallelDimensions(env_, std::string("/ck/global_step4/mp_rank_") + m + "_model_states.pt",
                          1, 2);
  }
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->merge_status().ok()) << c->merge_status().ToString();
}

TEST_F(BrokenParallelCheckpointTest, ParallelDimensionsOfALargerGridAreRefused) {
  const std::string model1 = "/ck/global_step4/mp_rank_01_model_states.pt";
  AddParallelDimensions(env_, kModel0, 1, 2);
  AddParallelDimensions(env_, model1, 2, 2);
  auto c = ParallelCheckpoint::Open(env_, "/ck");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().file(), model1);
  EXPECT_NE(c.status().message().find(
                "checkpoint_parallel_dimensions says the run saved 2 pipeline stages x 2 "
                "tensor-parallel ranks x 2 data-parallel ranks, but the files here make 1 "
                "pipeline stage x 2 tensor-parallel ranks x 2 data-parallel ranks"),
            std::string::npos)
      << c.status().ToString();
}

// A data-parallel-looking checkpoint whose run saved at T = 2: the other
// tensor-parallel rank's files are all missing.
TEST(ParallelDimensions, ADataParallelCheckpointOfATensorParallelRunIsRefused) {
  const std::string model0 = "/ck/global_step4/mp_rank_00_model_states.pt";
  for (int64_t tp : {1, 2}) {
    MemEnv env;
    ASSERT_TRUE(
        env.CopyTreeFrom(testing::TpFixtureDir("tp1_z1_megatron_d2") + "/checkpoint", "/ck").ok());
    AddParallelDimensions(env, model0, 1, tp);
    auto c = Checkpoint::Open(env, "/ck");
    if (tp == 1) {
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      continue;
    }
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().file(), model0);
    EXPECT_NE(c.status().message().find("says the run saved 1 pipeline stage x 2 tensor-parallel"),
              std::string::npos)
        << c.status().ToString();
  }
}

}  // namespace
}  // namespace ucfs
