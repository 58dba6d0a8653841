#include "ucfs/checkpoint/checkpoint_layout.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ucfs
