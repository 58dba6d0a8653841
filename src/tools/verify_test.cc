#include "ucfs/tools/verify.h"

#include <gtest/gtest.h>

#include <atomic>

#include "test_support.h"
#include "tools/verify_test_support.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::NodeId;
using testing::FixtureDir;
using verify_testing::BrokenVerifyTest;
using verify_testing::Describe;
using verify_testing::Kind;
using verify_testing::OracleParams;
using verify_testing::OracleStep;

class VerifyFixtureTest : public ::testing::TestWithParam<std::string> {};

// Every fixture DeepSpeed wrote is clean: no problem, the oracle's world
// size and step, and every valid element of the three states scanned
// (numel x 3 x 4 bytes, padding excluded), however the scan is cut up.
TEST_P(VerifyFixtureTest, RealCheckpointsVerifyClean) {
  const auto& oracle = testing::Oracle(GetParam());
  uint64_t numel = 0;
  for (const auto& p : OracleParams(oracle)) numel += p["numel"].get<uint64_t>();
  for (unsigned threads : {1u, 3u}) {
    for (uint64_t chunk : {uint64_t{8} << 20, uint64_t{64}}) {
      std::atomic<uint64_t> announced{0}, reported{0};
      VerifyOptions options;
      options.threads = threads;
      options.chunk_bytes = chunk;
      options.on_scan_start = [&](uint64_t total) { announced = total; };
      options.on_bytes = [&](uint64_t n) { reported += n; };
      auto r = Verify(*Env::Posix(), FixtureDir(GetParam()) + "/checkpoint", options);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(r->ok()) << Describe(*r);
      EXPECT_EQ(r->world_size, oracle["world_size"].get<uint32_t>());
      ASSERT_TRUE(r->step.has_value());
      EXPECT_EQ(*r->step, OracleStep(oracle));
      EXPECT_EQ(r->files_checked, 2 * r->world_size);
      EXPECT_TRUE(r->scanned);
      EXPECT_EQ(r->params, OracleParams(oracle).size());
      EXPECT_EQ(r->states, (std::vector<std::string>{"fp32", "exp_avg", "exp_avg_sq"}));
      EXPECT_EQ(r->bytes_scanned, numel * 3 * 4) << "threads " << threads << " chunk " << chunk;
      EXPECT_EQ(announced, r->bytes_scanned);
      EXPECT_EQ(reported, r->bytes_scanned);
      EXPECT_TRUE(r->nonfinite.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VerifyFixtureTest, ::testing::ValuesIn(testing::FixtureNames()));

class FlatGroupVerifyTest : public ::testing::TestWithParam<std::string> {};

// ZeRO-1/2 checkpoints DeepSpeed wrote are clean: W optimizer files and one
// model-states file, the step, every valid element scanned (the fp32 and
// moments of every param: 936 elements x 3 states x 4 bytes).
TEST_P(FlatGroupVerifyTest, RealCheckpointsVerifyClean) {
  const auto& oracle = testing::Oracle(GetParam());
  VerifyOptions options;
  options.threads = 2;
  options.chunk_bytes = 64;
  auto r = Verify(*Env::Posix(), FixtureDir(GetParam()) + "/checkpoint", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Describe(*r);
  EXPECT_EQ(r->world_size, oracle["world_size"].get<uint32_t>());
  ASSERT_TRUE(r->step.has_value());
  EXPECT_EQ(*r->step, oracle["partitioning"]["adam_step"].get<double>());
  EXPECT_EQ(r->files_checked, r->world_size + 1);
  EXPECT_EQ(r->params, 12u);
  EXPECT_EQ(r->bytes_scanned, oracle["model"]["total_trainable_numel"].get<uint64_t>() * 3 * 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FlatGroupVerifyTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

TEST(Verify, NoCheckpointAtAllIsAnError) {
  MemEnv env;
  auto r = Verify(env, "/nowhere");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nowhere"), std::string::npos);
}

// Two missing ranks are both named, as missing, and nothing else is
// reported (Checkpoint::Open's error says the same).
TEST_F(BrokenVerifyTest, BigEndianRankFilesAreUnreadable) {
  Load("z3_fp32_ws2");
  env_.WriteFile(Model(1), testing::AddTorchRecord(*env_.Contents(Model(1)), "byteorder", "big"));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kUnreadable);
  EXPECT_EQ(r.problems[0].file, Model(1));
  EXPECT_NE(r.problems[0].message.find("not little-endian"), std::string::npos) << Describe(r);
}

TEST_F(BrokenVerifyTest, EveryMissingRankIsNamed) {
  Load("z3_fp32_ws4");
  env_.RemoveFile(Optim(1));
  env_.RemoveFile(Optim(3));
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kMissing);
  EXPECT_EQ(r.problems[0].file, Optim(1));
  EXPECT_EQ(r.problems[1].kind, Kind::kMissing);
  EXPECT_EQ(r.problems[1].file, Optim(3));
  EXPECT_FALSE(r.scanned);
  // The ranks still there are checked: their step.
  ASSERT_TRUE(r.step.has_value());
  EXPECT_EQ(*r.step, OracleStep(testing::Oracle(fixture_)));
}

// The last rank gone altogether: the pickles still say 4 ranks.
TEST_F(BrokenVerifyTest, MissingLastRankIsNotASmallerWorld) {
  Load("z3_bf16_ws4");
  env_.RemoveFile(Tag("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt"));
  env_.RemoveFile(Model(3));
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Tag("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt"));
  EXPECT_EQ(r.problems[1].file, Model(3));
  EXPECT_EQ(Of(r, Kind::kMissing).size(), 2u);
}

// DeepSpeed 0.14.5-0.17 saving with load_universal leaves only rank 0's
// model states: a plain resume needs the others.
TEST_F(BrokenVerifyTest, ModelStatesOfOtherRanksMissing) {
  Load("z3_fp32_ws3");
  env_.RemoveFile(Model(1));
  env_.RemoveFile(Model(2));
  const VerifyReport r = Run();
  ASSERT_EQ(Of(r, Kind::kMissing).size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Model(1));
  EXPECT_NE(r.problems[0].message.find("only rank 0's model states"), std::string::npos);
  EXPECT_TRUE(r.scanned);  // the model builds without them
}

TEST_F(BrokenVerifyTest, TruncatedRankFile) {
  Load("z3_bf16_ws3");
  const std::string name = Tag("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  const std::string bytes = *env_.Contents(name);
  for (size_t cut : {size_t{0}, bytes.size() / 2, bytes.size() - 1}) {
    env_.WriteFile(name, bytes.substr(0, cut));
    const VerifyReport r = Run();
    ASSERT_EQ(r.problems.size(), 1u) << "cut at " << cut << "\n" << Describe(r);
    EXPECT_EQ(r.problems[0].kind, Kind::kUnreadable);
    EXPECT_EQ(r.problems[0].file, name);
    EXPECT_EQ(r.world_size, 3u);
    EXPECT_FALSE(r.scanned);
  }
}

TEST_F(BrokenVerifyTest, TwoBrokenFilesAreBothReported) {
  Load("z3_fp32_ws4");
  env_.WriteFile(Optim(0), env_.Contents(Optim(0))->substr(0, 100));
  env_.WriteFile(Model(2), "not a zip");
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Optim(0));
  EXPECT_EQ(r.problems[1].file, Model(2));
  EXPECT_EQ(Of(r, Kind::kUnreadable).size(), 2u);
}

TEST_F(BrokenVerifyTest, PartitionCountDisagrees) {
  Load("z3_fp32_ws4");
  Edit(Optim(2), [](Document* doc) {
    NodeId pc = doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "partition_count");
    ASSERT_EQ(doc->AsInt(pc), 4);
    doc->mutable_node(pc).scalar = 5;
  });
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kWorldSize);
  EXPECT_EQ(r.problems[0].file, Optim(2));
  EXPECT_NE(r.problems[0].message.find("partition_count is 5"), std::string::npos);
}

// Files that all claim a world of 2^31 make one problem for the ranks far
// past the files, not one per rank (found by checkpoint_fuzz: verify ran out
// of memory).
TEST_F(BrokenVerifyTest, AbsurdWorldSizeIsOneRangeOfMissingRanks) {
  Load("z3_fp32_ws2");
  const int64_t claim = int64_t{1} << 31;
  for (uint32_t r = 0; r < 2; ++r) {
    Edit(Optim(r), [&](Document* doc) {
      NodeId pc = doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "partition_count");
      doc->mutable_node(pc).scalar = claim;
    });
    Edit(Model(r), [&](Document* doc) {
      doc->mutable_node(doc->Get(doc->root(), "dp_world_size")).scalar = claim;
    });
  }
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, uint32_t{1} << 31);
  // Ranks 2 to 65 one by one (two files each), the rest as one range.
  const auto missing = Of(r, Kind::kMissing);
  ASSERT_EQ(missing.size(), 1u + 2 * 64) << Describe(r);
  EXPECT_EQ(missing[0]->file, r.tag_dir);
  EXPECT_NE(missing[0]->message.find("ranks 66 to 2147483647"), std::string::npos)
      << missing[0]->message;
}

TEST_F(BrokenVerifyTest, DpWorldSizeDisagreesInAFileOpenNeverReads) {
  Load("z3_fp32_ws3");
  Edit(Model(2),
       [](Document* doc) { doc->mutable_node(doc->Get(doc->root(), "dp_world_size")).scalar = 6; });
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kWorldSize);
  EXPECT_EQ(r.problems[0].file, Model(2));
  EXPECT_NE(r.problems[0].message.find("dp_world_size is 6"), std::string::npos);
  EXPECT_TRUE(r.scanned);
}

TEST_F(BrokenVerifyTest, StrayRankBeyondTheWorldSize) {
  Load("z3_fp32_ws4");
  env_.WriteFile(Optim(4), *env_.Contents(Optim(3)));
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  // A copy of rank 3's file: beyond the world size, and saved as rank 3.
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kUnreadable);
  EXPECT_EQ(r.problems[0].file, Optim(4));
  EXPECT_NE(r.problems[0].message.find("was saved as zero_pp_rank_3_mp_rank_00_optim_states.pt"),
            std::string::npos);
  EXPECT_EQ(r.problems[1].kind, Kind::kWorldSize);
  EXPECT_EQ(r.problems[1].file, Optim(4));
}

// Issue 10: rank files swapped by name were not detected. torch.save names
// the archive's top folder after the file, so each still says which it is.
TEST_F(BrokenVerifyTest, SwappedRankFilesAreNamedBoth) {
  Load("z3_fp32_ws2");
  const std::string zero = *env_.Contents(Optim(0));
  env_.WriteFile(Optim(0), *env_.Contents(Optim(1)));
  env_.WriteFile(Optim(1), zero);
  const VerifyReport r = Run();
  EXPECT_FALSE(r.ok());
  ASSERT_GE(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Optim(0));
  EXPECT_NE(r.problems[0].message.find("was saved as zero_pp_rank_1_mp_rank_00_optim_states.pt"),
            std::string::npos)
      << Describe(r);
  EXPECT_NE(r.problems[0].message.find(Optim(1) + " is the file of that name here"),
            std::string::npos)
      << Describe(r);
  EXPECT_EQ(r.problems[1].file, Optim(1));
}

// Issue 10: verify said OK on a file torch.load refuses, whose version
// record says 999 (torch accepts 1 to 10).
TEST_F(BrokenVerifyTest, UnsupportedVersionRecord) {
  Load("z3_fp32_ws2");
  env_.WriteFile(Model(1),
                 testing::ReplaceTorchRecord(*env_.Contents(Model(1)), "version", "999\n"));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Model(1));
  EXPECT_NE(r.problems[0].message.find("'version' record says 999\\x0a, not a file format "
                                       "version torch.load supports (1 to 10)"),
            std::string::npos)
      << Describe(r);
}

// torch.optim's step is a 0-dim tensor: its stored bytes edited on rank 1.
TEST_F(BrokenVerifyTest, StepTensorDiffersOnOneRank) {
  Load("z3_fp32_ws3");
  const double step = OracleStep(testing::Oracle(fixture_));
  Poke(Optim(1), ElementOffset(Optim(1), Flat("step"), 0), static_cast<float>(step + 1));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kStep);
  EXPECT_EQ(r.problems[0].file, Optim(1));
  EXPECT_NE(r.problems[0].message.find("is " + std::to_string(static_cast<int>(step + 1)) +
                                       " in sub-group 0"),
            std::string::npos)
      << r.problems[0].message;
  ASSERT_TRUE(r.step.has_value());
  EXPECT_EQ(*r.step, step);
  EXPECT_TRUE(r.scanned);
}

// DeepSpeed's FusedAdam keeps a Python int; one sub-group of six on rank 3.
TEST_F(BrokenVerifyTest, StepNumberDiffersInOneSubGroup) {
  Load("z3_tricky_fp32_ws4");
  Edit(Optim(3), [](Document* doc) {
    NodeId state = doc->Get(
        doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "optimizer_state_dict"), "state");
    const auto entries = doc->MappingItems(state);
    for (const auto& [k, v] : *entries) {
      if (doc->AsInt(k) == 4) {
        pickle::Node n;
        n.kind = pickle::Kind::kInt;
        n.scalar = 7;
        doc->mutable_node(doc->Get(v, "step")) = n;
      }
    }
  });
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kStep);
  EXPECT_EQ(r.problems[0].file, Optim(3));
  EXPECT_NE(r.problems[0].message.find("is 7 in sub-group 4"), std::string::npos)
      << r.problems[0].message;
  EXPECT_EQ(*r.step, OracleStep(testing::Oracle(fixture_)));
}

}  // namespace
}  // namespace ucfs
