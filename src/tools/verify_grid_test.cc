// verify of tensor- and pipeline-parallel grids: the real fixtures verify
// clean, and what is wrong with a grid (a missing mp rank or layer file, a
// shard group at another step, replicated copies that differ, patterns
// that contradict the params) is found and named.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "test_support.h"
#include "tools/verify_test_support.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/tools/verify.h"

namespace ucfs {
namespace {

using Kind = VerifyProblem::Kind;
using pickle::Document;
using pickle::NodeId;
using verify_testing::Describe;

class VerifyGridTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VerifyGridTest, RealGridsVerifyClean) {
  const std::string dir = testing::TpFixtureDir(GetParam()) + "/checkpoint";
  VerifyOptions options;
  options.threads = 2;
  auto r = Verify(*Env::Posix(), dir, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Describe(*r);
  EXPECT_TRUE(r->warnings.empty()) << Describe(*r);
  const auto& oracle = testing::TpOracle(GetParam());
  const auto& topo = oracle["topology"];
  EXPECT_EQ(r->degrees, (ParallelDegrees{topo["P"], topo["T"], topo["D"]}));
  EXPECT_EQ(r->world_size, topo["D"].get<uint32_t>());
  ASSERT_TRUE(r->step.has_value());
  EXPECT_EQ(*r->step, 4.0);
  // Every file of the tag directory but none other.
  uint64_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/global_step4")) {
    files += e.path().extension() == ".pt";
  }
  EXPECT_EQ(r->files_checked, files);
  EXPECT_EQ(r->params, oracle["params"].size());
  EXPECT_TRUE(r->scanned);
  EXPECT_GT(r->bytes_scanned, 0u);
  // Every fixture at T > 1 has replicated params (LayerNorms): their
  // copies were compared, two of each element read per copy pair.
  uint64_t replicated_bytes = 0;
  for (const auto& [name, p] : oracle["params"].items()) {
    if (p["tp"] != "rep") continue;
    uint64_t numel = 1;
    for (const auto& d : p["local_shape_saved"]) numel *= d.get<uint64_t>();
    replicated_bytes += numel * 4;  // fp32 master and moments
  }
  const uint32_t tp = topo["T"];
  EXPECT_EQ(r->bytes_compared, replicated_bytes * 3 * 2 * (tp - 1));
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, VerifyGridTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

// A Megatron-DeepSpeed run saved at T = 1: OK, with the warning that a
// load at another T would be wrong; none once the patterns are supplied.
TEST(VerifyGrid, AT1MegatronRunIsUnsafeAtAnotherT) {
  const std::string dir = testing::TpFixtureDir("tp1_z1_megatron_d2");
  auto r = Verify(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Describe(*r);
  ASSERT_EQ(r->warnings.size(), 1u) << Describe(*r);
  EXPECT_EQ(r->warnings[0].kind, Kind::kUnsafeAtAnotherTensorDegree);
  EXPECT_EQ(r->warnings[0].file, dir + "/checkpoint/global_step4/mp_rank_00_model_states.pt");
  EXPECT_NE(r->warnings[0].message.find("parameter_with_row_parallelism_patterns"),
            std::string::npos);

  VerifyOptions options;
  options.universal_info = std::make_shared<const SuppliedUniversalInfo>(SuppliedUniversalInfo{
      dir + "/universal_info_rows.json", testing::ReadFile(dir + "/universal_info_rows.json")});
  r = Verify(*Env::Posix(), dir + "/checkpoint", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Describe(*r);
  EXPECT_TRUE(r->warnings.empty()) << Describe(*r);
}

class BrokenGridTest : public ::testing::Test {
 protected:
  void Load(const std::string& fixture) {
    ASSERT_TRUE(env_.CopyTreeFrom(testing::TpFixtureDir(fixture) + "/checkpoint", "/ck").ok());
  }
  static std::string Tag(const std::string& name) { return "/ck/global_step4/" + name; }
  VerifyReport Run(const VerifyOptions& base = {}) {
    VerifyOptions options = base;
    options.threads = 2;
    auto r = Verify(env_, "/ck", options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : VerifyReport{};
  }
  void Edit(const std::string& file, const std::function<void(Document*)>& edit) {
    env_.WriteFile(file, testing::RepackTorchFile(*env_.Contents(file), edit));
  }
  static std::vector<const VerifyProblem*> Of(const VerifyReport& r, Kind kind) {
    std::vector<const VerifyProblem*> out;
    for (const VerifyProblem& p : r.problems) {
      if (p.kind == kind) out.push_back(&p);
    }
    return out;
  }
  MemEnv env_;
};

// A missing mp rank's file is named; the other shard groups are still
// checked and scanned.
TEST_F(BrokenGridTest, MissingMpRankFileIsNamed) {
  Load("pp_bf16opt_p2t2d2");
  const std::string gone = Tag("bf16_zero_pp_rank_1_mp_rank_03_optim_states.pt");
  ASSERT_TRUE(env_.RemoveFile(gone));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kMissing);
  EXPECT_EQ(r.problems[0].file, gone);
  EXPECT_EQ(r.degrees, (ParallelDegrees{2, 2, 2}));
  EXPECT_FALSE(r.scanned);  // shard group 3 cannot be scanned
  EXPECT_GT(r.bytes_scanned, 0u);
}

TEST_F(BrokenGridTest, MissingLayerFileIsNamed) {
  Load("pp_bf16opt_p2t2d2");
  const std::string gone = Tag("layer_03-model_01-model_states.pt");
  ASSERT_TRUE(env_.RemoveFile(gone));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kMissing);
  EXPECT_EQ(r.problems[0].file, gone);
  EXPECT_NE(r.problems[0].message.find("tensor-parallel rank 1's part of layer 3"),
            std::string::npos)
      << r.problems[0].message;
}

TEST_F(BrokenGridTest, TruncatedLayerFileIsUnreadable) {
  Load("pp_bf16opt_p2t2d2");
  const std::string file = Tag("layer_02-model_00-model_states.pt");
  std::string bytes = *env_.Contents(file);
  env_.WriteFile(file, bytes.substr(0, bytes.size() / 2));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kUnreadable);
  EXPECT_EQ(r.problems[0].file, file);
}

// Every rank of shard group 1 agrees with the others of its group, but
// not with shard group 0: only the comparison across groups sees it.
TEST_F(BrokenGridTest, ShardGroupAtAnotherStep) {
  Load("tp_z1_fp32_t2d2");
  for (int d = 0; d < 2; ++d) {
    Edit(Tag("zero_pp_rank_" + std::to_string(d) + "_mp_rank_01_optim_states.pt"),
         [](Document* doc) {
           NodeId state = doc->Get(
               doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "base_optimizer_state"),
               "state");
           const auto entries = doc->MappingItems(state);
           ASSERT_TRUE(entries.has_value());
           for (const auto& [k, v] : *entries) {
             pickle::Node n;
             n.kind = pickle::Kind::kInt;
             n.scalar = 7;
             doc->mutable_node(doc->Get(v, "step")) = n;
           }
         });
  }
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kStep);
  EXPECT_EQ(r.problems[0].file, Tag("zero_pp_rank_0_mp_rank_01_optim_states.pt"));
  EXPECT_NE(r.problems[0].message.find("Adam step is 7 in shard group 1"), std::string::npos)
      << r.problems[0].message;
  EXPECT_EQ(*r.step, 4.0);
}

// One element of tensor-parallel rank 1's copy of a LayerNorm weight
// changed: the copies differ, named by the file holding it.
TEST_F(BrokenGridTest, ReplicatedCopiesThatDifferAreNamed) {
  Load("tp_z1_fp32_t2d2");
  const std::string name = "language_model.encoder.layers.1.input_layernorm.weight";
  std::string file;
  {
    auto grid = ParallelCheckpoint::Open(env_, "/ck");
    ASSERT_TRUE(grid.ok()) << grid.status().ToString();
    const MergedParam* p = nullptr;
    for (const MergedParam& m : grid->params()) {
      if (m.name == name) p = &m;
    }
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(p->merge.rule, MergeRule::kReplicated);
    std::vector<Extent> extents;
    // Element 3 of the fp32 master weight of rank 1's copy.
    ASSERT_TRUE(grid->MapShardState(1, p->slices[1], 0, 12, 16, &extents).ok());
    ASSERT_EQ(extents.size(), 1u);
    file = grid->sources()[extents[0].file].path;
    std::string bytes = *env_.Contents(file);
    float v;
    std::memcpy(&v, bytes.data() + extents[0].offset, 4);
    v += 1.0f;
    std::memcpy(bytes.data() + extents[0].offset, &v, 4);
    env_.WriteFile(file, std::move(bytes));
  }
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kReplica);
  EXPECT_EQ(r.problems[0].file, file);
  EXPECT_NE(r.problems[0].message.find("'" + name +
                                       "' fp32: tensor-parallel rank 1's copy of this replicated "
                                       "param differs from rank 0's"),
            std::string::npos)
      << r.problems[0].message;
  EXPECT_NE(r.problems[0].message.find("in 1 of 8 elements (the first is element 3"),
            std::string::npos)
      << r.problems[0].message;
}

// Without universal_checkpoint_info at T = 2 the checkpoint is fine at its
// own T: a warning, not a problem.
TEST_F(BrokenGridTest, NoPatternsAtTwoTensorRanksIsAWarning) {
  Load("tp_z1_fp32_t2d2");
  const std::string model0 = Tag("mp_rank_00_model_states.pt");
  Edit(model0,
       [](Document* d) { testing::RemoveDictKey(d, d->root(), "universal_checkpoint_info"); });
  const VerifyReport r = Run();
  EXPECT_TRUE(r.ok()) << Describe(r);
  ASSERT_EQ(r.warnings.size(), 1u) << Describe(r);
  EXPECT_EQ(r.warnings[0].kind, Kind::kNoUniversalLayout);
  EXPECT_EQ(r.warnings[0].file, model0);
  EXPECT_EQ(r.bytes_compared, 0u);  // which params are replicated is unknown
}

// A pattern no param matches: ds_to_universal.py refuses the checkpoint.
TEST_F(BrokenGridTest, APatternNoParamMatchesIsAProblem) {
  Load("tp_z1_fp32_t2d2");
  const std::string model0 = Tag("mp_rank_00_model_states.pt");
  Edit(model0, [](Document* d) {
    NodeId info = d->Get(d->root(), "universal_checkpoint_info");
    d->Append(d->Get(info, "tp_replicated_parameter_patterns"),
              d->AddStr("language_model.no_such_param"));
  });
  const VerifyReport r = Run();
  const auto universal = Of(r, Kind::kUniversal);
  ASSERT_EQ(universal.size(), 1u) << Describe(r);
  EXPECT_EQ(universal[0]->file, model0);
  EXPECT_NE(universal[0]->message.find("language_model.no_such_param"), std::string::npos);
}

// checkpoint_parallel_dimensions (DeepSpeed >= 0.19.5) of a larger grid than
// the files make: named in the file that says so.
TEST_F(BrokenGridTest, ParallelDimensionsOfALargerGrid) {
  Load("tp_z1_fp32_t2d2");
  const std::string model1 = Tag("mp_rank_01_model_states.pt");
  Edit(model1, [](Document* d) {
    d->AppendPair(
        d->root(), d->AddStr("checkpoint_parallel_dimensions"),
        d->AddDict({d->AddStr("pp_degree"), d->AddInt(2), d->AddStr("tp_degree"), d->AddInt(2)}));
  });
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kStructure);
  EXPECT_EQ(r.problems[0].file, model1);
  EXPECT_NE(r.problems[0].message.find("checkpoint_parallel_dimensions says the run saved 2 "
                                       "pipeline stages"),
            std::string::npos)
      << r.problems[0].message;
}

}  // namespace
}  // namespace ucfs
