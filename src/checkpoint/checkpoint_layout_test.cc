#include "ucfs/checkpoint/checkpoint_layout.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"

namespace ucfs {
namespace {

TEST(RankFileName, ParsesDeepSpeedNames) {
  auto p = ParseRankFileName("bf16_zero_pp_rank_12_mp_rank_00_optim_states.pt");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kind, RankFileName::Kind::kOptim);
  EXPECT_EQ(p->prefix, "bf16_");
  EXPECT_EQ(p->dp_rank, 12u);
  EXPECT_EQ(p->mp_rank, 0u);
  p = ParseRankFileName("zero_pp_rank_3_mp_rank_01_model_states.pt");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kind, RankFileName::Kind::kModel);
  EXPECT_EQ(p->mp_rank, 1u);
  // The legacy name without an underscore.
  EXPECT_TRUE(ParseRankFileName("zero_pp_rank_0_mp_rank_00optim_states.pt"));
  EXPECT_FALSE(ParseRankFileName("mp_rank_00_model_states.pt"));
  EXPECT_FALSE(ParseRankFileName("bf16_zero_pp_rank_0_mp_rank_00_model_states.pt"));
  EXPECT_FALSE(ParseRankFileName("zero_pp_rank__mp_rank_00_optim_states.pt"));
  EXPECT_FALSE(ParseRankFileName("zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp"));
  EXPECT_EQ(RankFileNameFor(RankFileName::Kind::kOptim, "bf16_", 7),
            "bf16_zero_pp_rank_7_mp_rank_00_optim_states.pt");
  EXPECT_EQ(RankFileNameFor(RankFileName::Kind::kModel, "bf16_", 7),
            "zero_pp_rank_7_mp_rank_00_model_states.pt");
}

class DiscoverTest : public ::testing::Test {
 protected:
  void AddRanks(const std::string& dir, int n, const std::string& prefix = "") {
    for (int r = 0; r < n; ++r) {
      env_.WriteFile(dir + "/" + RankFileNameFor(RankFileName::Kind::kOptim, prefix, r), "x");
      env_.WriteFile(dir + "/" + RankFileNameFor(RankFileName::Kind::kModel, prefix, r), "x");
    }
  }
  MemEnv env_;
};

TEST_F(DiscoverTest, FromRootWithLatest) {
  env_.WriteFile("/ck/latest", "global_step9\n");
  AddRanks("/ck/global_step9", 11, "bf16_");
  env_.WriteFile("/ck/zero_to_fp32.py", "#");
  auto f = DiscoverCheckpoint(env_, "/ck");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->root, "/ck");
  EXPECT_EQ(f->tag, "global_step9");
  EXPECT_EQ(f->tag_dir, "/ck/global_step9");
  EXPECT_EQ(f->world_size, 11u);
  EXPECT_EQ(f->optim_prefix, "bf16_");
  // Numeric, not lexicographic, rank order.
  EXPECT_EQ(f->optim_files[2], "/ck/global_step9/bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt");
  EXPECT_EQ(f->optim_files[10], "/ck/global_step9/bf16_zero_pp_rank_10_mp_rank_00_optim_states.pt");
}

TEST_F(DiscoverTest, FromTagDirectoryAndExplicitTag) {
  env_.WriteFile("/ck/latest", "global_step9");
  AddRanks("/ck/global_step9", 2);
  AddRanks("/ck/global_step5", 3);
  auto f = DiscoverCheckpoint(env_, "/ck/global_step5");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->root, "/ck");
  EXPECT_EQ(f->tag, "global_step5");
  EXPECT_EQ(f->world_size, 3u);
  f = DiscoverCheckpoint(env_, "/ck", std::string("global_step5"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->world_size, 3u);
  EXPECT_FALSE(DiscoverCheckpoint(env_, "/ck", std::string("../etc")).ok());
}

TEST_F(DiscoverTest, MissingRankIsNamed) {
  env_.WriteFile("/ck/latest", "t");
  AddRanks("/ck/t", 4);
  env_.RemoveFile("/ck/t/zero_pp_rank_2_mp_rank_00_optim_states.pt");
  auto f = DiscoverCheckpoint(env_, "/ck");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "/ck/t/zero_pp_rank_2_mp_rank_00_optim_states.pt: missing: the other files imply a "
            "world size of 4");
}

TEST_F(DiscoverTest, OnlyRankZerosModelStatesIsTolerated) {
  env_.WriteFile("/ck/latest", "t");
  AddRanks("/ck/t", 3);
  env_.RemoveFile("/ck/t/zero_pp_rank_1_mp_rank_00_model_states.pt");
  env_.RemoveFile("/ck/t/zero_pp_rank_2_mp_rank_00_model_states.pt");
  auto f = DiscoverCheckpoint(env_, "/ck");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->model_files[1], "");
  env_.RemoveFile("/ck/t/zero_pp_rank_0_mp_rank_00_model_states.pt");
  f = DiscoverCheckpoint(env_, "/ck");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("zero_pp_rank_0_mp_rank_00_model_states.pt: missing"),
            std::string::npos);
}

TEST_F(DiscoverTest, BadInputsAreExplained) {
  env_.WriteFile("/a/readme", "x");
  auto f = DiscoverCheckpoint(env_, "/a");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("no `latest` file"), std::string::npos);

  env_.WriteFile("/b/latest", "../../etc");
  f = DiscoverCheckpoint(env_, "/b");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/b/latest: does not name a tag directory"),
            std::string::npos);
  EXPECT_EQ(f.status().message().find("etc"), std::string::npos) << "echoes the contents";

  // A file that is no tag at all (a secret, say) is described, not shown.
  env_.WriteFile("/s/latest", "root:$6$hash:19000:0:99999:7:::\nuser:$6$other:19000\n");
  f = DiscoverCheckpoint(env_, "/s");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/s/latest: does not name a tag directory (52 bytes: "
                                      "control characters)"),
            std::string::npos)
      << f.status().ToString();
  EXPECT_EQ(f.status().message().find("hash"), std::string::npos) << f.status().ToString();

  env_.WriteFile("/c/latest", "gone");
  env_.WriteFile("/c/other/x", "x");
  f = DiscoverCheckpoint(env_, "/c");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/c/gone: tag directory does not exist"), std::string::npos);

  env_.WriteFile("/d/latest", "t");
  AddRanks("/d/t", 2);
  AddRanks("/d/t", 2, "bf16_");
  f = DiscoverCheckpoint(env_, "/d");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("both bf16_ and plain"), std::string::npos);

  env_.WriteFile("/e/latest", "t");
  env_.WriteFile("/e/t/mp_rank_00_model_states.pt", "x");
  f = DiscoverCheckpoint(env_, "/e");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("saved without ZeRO"), std::string::npos);

  EXPECT_FALSE(DiscoverCheckpoint(env_, "/nowhere").ok());
}

// Issue 10: one empty file named zero_pp_rank_999999999_... made every
// command allocate per rank until the kernel killed it.
TEST_F(DiscoverTest, RankFarBeyondTheFilesIsAnErrorNamingTheFile) {
  env_.WriteFile("/f/latest", "t");
  AddRanks("/f/t", 4);
  env_.WriteFile("/f/t/zero_pp_rank_999999999_mp_rank_00_optim_states.pt", "");
  for (bool list : {false, true}) {
    auto f = list ? ListCheckpointFiles(env_, "/f") : DiscoverCheckpoint(env_, "/f");
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("/f/t/zero_pp_rank_999999999_mp_rank_00_optim_states.pt: "
                                        "rank 999999999 is far beyond the 9 rank files"),
              std::string::npos)
        << f.status().ToString();
  }
  // A few missing ranks are still missing ranks, each named.
  env_.RemoveFile("/f/t/zero_pp_rank_999999999_mp_rank_00_optim_states.pt");
  env_.WriteFile("/f/t/zero_pp_rank_20_mp_rank_00_optim_states.pt", "");
  auto f = ListCheckpointFiles(env_, "/f");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->world_size, 21u);
  f = DiscoverCheckpoint(env_, "/f");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("zero_pp_rank_4_mp_rank_00_optim_states.pt: missing"),
            std::string::npos);
}

TEST_F(DiscoverTest, ControlCharactersInLatestAreNeverPrinted) {
  env_.WriteFile("/g/latest", std::string("a/\x1b[2J\0b", 8));
  auto f = DiscoverCheckpoint(env_, "/g");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message().find('\x1b'), std::string::npos) << f.status().message();
  EXPECT_EQ(f.status().message().find('\0'), std::string::npos) << f.status().message();
}

TEST(RankFileIdentity, ArchiveFolderNamingAnotherRankIsAnError) {
  CheckpointFiles files;
  files.world_size = 2;
  files.optim_files = {"/t/zero_pp_rank_0_mp_rank_00_optim_states.pt",
                       "/t/zero_pp_rank_1_mp_rank_00_optim_states.pt"};
  files.model_files = {"/t/zero_pp_rank_0_mp_rank_00_model_states.pt", ""};
  EXPECT_TRUE(
      CheckRankFileIdentity(files, files.optim_files[0], "zero_pp_rank_0_mp_rank_00_optim_states")
          .ok());
  EXPECT_TRUE(CheckRankFileIdentity(files, files.optim_files[0], "archive").ok());
  Status s =
      CheckRankFileIdentity(files, files.optim_files[0], "zero_pp_rank_1_mp_rank_00_optim_states");
  EXPECT_EQ(s.message(),
            "/t/zero_pp_rank_0_mp_rank_00_optim_states.pt: was saved as "
            "zero_pp_rank_1_mp_rank_00_optim_states.pt (the top folder of its zip records), not "
            "under its own name: rank files renamed or swapped; "
            "/t/zero_pp_rank_1_mp_rank_00_optim_states.pt is the file of that name here");
  // Model and optimizer files swapped: the kind differs.
  EXPECT_FALSE(
      CheckRankFileIdentity(files, files.optim_files[0], "zero_pp_rank_0_mp_rank_00_model_states")
          .ok());
}

TEST(LayerFileName, ParsesDeepSpeedsPipelineNames) {
  auto a = ParseLayerFileName("layer_03-model_01-model_states.pt");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->layer, 3u);
  EXPECT_EQ(a->tp_rank, 1u);
  auto b = ParseLayerFileName("layer_100-model_states.pt");  // no model axis; {:02d} grows
  ASSERT_TRUE(b);
  EXPECT_EQ(b->layer, 100u);
  EXPECT_FALSE(b->tp_rank);
  for (const char* bad :
       {"layer_03-model_01-model_states.pth", "layer_-model_states.pt",
        "layer_03_expert_0_mp_rank_00_model_states.pt", "layers_03-model_states.pt"}) {
    EXPECT_FALSE(ParseLayerFileName(bad)) << bad;
  }
  EXPECT_EQ(LayerFileNameFor(3, 1), "layer_03-model_01-model_states.pt");
  EXPECT_EQ(LayerFileNameFor(100, std::nullopt), "layer_100-model_states.pt");
}

// The real DeepSpeed 0.14.5 fixtures' grids: mp rank m is stage m / T,
// tensor-parallel rank m % T; each shard group a D-rank checkpoint.
TEST(ParallelCheckpointFiles, TheFixturesGrids) {
  struct Case {
    const char* fixture;
    ParallelDegrees degrees;
    bool model_per_rank;
    size_t layer_files;
  };
  for (const Case& c : {Case{"tp_z1_fp32_t2d2", {1, 2, 2}, false, 0},
                        Case{"pp_bf16opt_p2t2d2", {2, 2, 2}, false, 8},
                        Case{"z3_tp_fp32_t2d2", {1, 2, 2}, true, 0}}) {
    SCOPED_TRACE(c.fixture);
    const std::string root = testing::TpFixtureDir(c.fixture) + "/checkpoint";
    auto grid = ListParallelCheckpointFiles(*Env::Posix(), root);
    ASSERT_TRUE(grid.ok()) << grid.status().ToString();
    EXPECT_EQ(grid->degrees, c.degrees);
    EXPECT_EQ(grid->layer_files.size(), c.layer_files);
    ASSERT_EQ(grid->shards.size(), c.degrees.mp());
    EXPECT_TRUE(CheckNoParallelFileMissing(*grid).ok());
    for (uint32_t m = 0; m < grid->shards.size(); ++m) {
      const CheckpointFiles& shard = grid->shards[m];
      EXPECT_EQ(shard.mp_rank, m);
      EXPECT_EQ(shard.world_size, c.degrees.dp);
      EXPECT_EQ(shard.model_per_rank, c.model_per_rank);
      for (uint32_t d = 0; d < c.degrees.dp; ++d) {
        auto name = ParseRankFileName(BaseName(shard.optim_files[d]));
        ASSERT_TRUE(name) << shard.optim_files[d];
        EXPECT_EQ(name->mp_rank, m);
        EXPECT_EQ(name->dp_rank, d);
      }
      EXPECT_EQ(BaseName(shard.model_files[0]),
                c.model_per_rank ? RankFileNameFor(RankFileName::Kind::kModel, "", 0, m)
                                 : SharedModelFileName(m));
    }
    // The pipeline's stage 1, tensor rank 0 is mp rank 2.
    if (c.degrees.pp == 2) {
      EXPECT_EQ(grid->Stage(2), 1u);
      EXPECT_EQ(grid->TpRank(2), 0u);
    }
    // Not served yet, and said so with the grid.
    auto dp_only = ListCheckpointFiles(*Env::Posix(), root);
    ASSERT_FALSE(dp_only.ok());
    EXPECT_EQ(dp_only.status().code(), Status::Code::kNotSupported);
    EXPECT_NE(dp_only.status().message().find(DescribeDegrees(c.degrees)), std::string::npos)
        << dp_only.status().ToString();
  }
}

TEST(ParallelCheckpointFiles, MissingFilesOfTheGridAreNamed) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(testing::TpFixtureDir("pp_bf16opt_p2t2d2") + "/checkpoint", "/ck").ok());
  ASSERT_TRUE(env.RemoveFile("/ck/global_step4/layer_03-model_01-model_states.pt"));
  auto grid = ListParallelCheckpointFiles(env, "/ck");
  ASSERT_TRUE(grid.ok()) << grid.status().ToString();
  Status s = CheckNoParallelFileMissing(*grid);
  EXPECT_NE(s.message().find("layer_03-model_01-model_states.pt: missing"), std::string::npos)
      << s.ToString();
  ASSERT_TRUE(env.RemoveFile("/ck/global_step4/bf16_zero_pp_rank_1_mp_rank_02_optim_states.pt"));
  grid = ListParallelCheckpointFiles(env, "/ck");
  ASSERT_TRUE(grid.ok());
  s = CheckNoParallelFileMissing(*grid);
  EXPECT_NE(s.message().find("bf16_zero_pp_rank_1_mp_rank_02_optim_states.pt: missing"),
            std::string::npos)
      << s.ToString();
  // Stages of 2 tensor ranks do not divide 3 model-parallel ranks.
  ASSERT_TRUE(env.RemoveFile("/ck/global_step4/mp_rank_03_model_states.pt"));
  for (int d = 0; d < 2; ++d) {
    env.RemoveFile("/ck/global_step4/bf16_zero_pp_rank_" + std::to_string(d) +
                   "_mp_rank_03_optim_states.pt");
  }
  grid = ListParallelCheckpointFiles(env, "/ck");
  ASSERT_FALSE(grid.ok());
  EXPECT_NE(grid.status().message().find("no whole number of pipeline stages"), std::string::npos)
      << grid.status().ToString();
}

TEST(ResolveCheckpointRoot, ATagDirectoryIsConfinedToItsRoot) {
  namespace fs = std::filesystem;
  const std::string base = testing::FreshTempDir("resolve_root");
  fs::create_directories(base + "/ckpt/tag");
  testing::WriteFile(base + "/ckpt/latest", "tag");
  fs::create_symlink(base + "/ckpt", base + "/link");
  const std::string real = fs::canonical(base + "/ckpt").string();
  EXPECT_EQ(*ResolveCheckpointRoot(*Env::Posix(), base + "/ckpt"), real);
  EXPECT_EQ(*ResolveCheckpointRoot(*Env::Posix(), base + "/ckpt/tag"), real);
  EXPECT_EQ(*ResolveCheckpointRoot(*Env::Posix(), base + "/link/tag"), real);
  fs::create_directories(base + "/lone/tag");
  EXPECT_EQ(*ResolveCheckpointRoot(*Env::Posix(), base + "/lone/tag"),
            fs::canonical(base + "/lone/tag").string());
  EXPECT_FALSE(ResolveCheckpointRoot(*Env::Posix(), base + "/missing").ok());
}

// DeepSpeed's rule through any Env: a MemEnv's paths resolve as on disk.
TEST(ResolveCheckpointRoot, ThroughTheMemoryEnv) {
  MemEnv env;
  env.WriteFile("/ckpt/latest", "tag");
  env.WriteFile("/ckpt/tag/zero_pp_rank_0_mp_rank_00_optim_states.pt", "x");
  env.WriteFile("/lone/tag/zero_pp_rank_0_mp_rank_00_optim_states.pt", "x");
  EXPECT_EQ(*ResolveCheckpointRoot(env, "/ckpt/tag/"), "/ckpt");
  EXPECT_EQ(*ResolveCheckpointRoot(env, "/ckpt"), "/ckpt");
  EXPECT_EQ(*ResolveCheckpointRoot(env, "/lone/tag"), "/lone/tag");
  EXPECT_FALSE(ResolveCheckpointRoot(env, "/missing").ok());
}

}  // namespace
}  // namespace ucfs
