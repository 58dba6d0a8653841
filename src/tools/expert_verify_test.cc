// verify over DeepSpeed 0.19.8's expert-parallel checkpoints: OK as saved;
// an expert file gone, or one of no layer's expert, named.
#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/tools/verify.h"

namespace ucfs {
namespace {

using testing::ModernDir;

class ExpertVerifyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertVerifyTest, OkAsSaved) {
  auto r = Verify(*Env::Posix(), ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << (r->problems.empty() ? "" : r->problems[0].message);
}

TEST_P(ExpertVerifyTest, MissingAndStrayExpertFilesAreNamed) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(ModernDir(GetParam()) + "/checkpoint/global_step4", "/ck/global_step4")
          .ok());
  env.WriteFile("/ck/latest", "global_step4");
  const std::string gone = "/ck/global_step4/layer_0_expert_3_mp_rank_00_model_states.pt";
  const std::string stray = "/ck/global_step4/layer_7_expert_0_mp_rank_00_model_states.pt";
  env.WriteFile(stray, *env.Contents(gone));
  ASSERT_TRUE(env.RemoveFile(gone));
  auto r = Verify(env, "/ck");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->problems.size(), 2u);
  EXPECT_EQ(r->problems[0].kind, VerifyProblem::Kind::kMissing);
  EXPECT_EQ(r->problems[0].file, gone);
  EXPECT_NE(r->problems[0].message.find("missing: expert 3 of MoE layer 0"), std::string::npos)
      << r->problems[0].message;
  EXPECT_EQ(r->problems[1].kind, VerifyProblem::Kind::kStructure);
  EXPECT_EQ(r->problems[1].file, stray);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertVerifyTest,
                         ::testing::Values("moe_z1_fp32_e2d2", "moe_z2_fp32_e2d2",
                                           "autoep_z2_fp32_e2d2"));

// AutoEP at ZeRO-3 keeps its experts in the rank files: no expert files.
TEST(ExpertVerify, AutoEpAtZero3IsOkWithoutExpertFiles) {
  auto r = Verify(*Env::Posix(), ModernDir("autoep_z3_fp32_e2d2") + "/checkpoint");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << (r->problems.empty() ? "" : r->problems[0].message);
}

}  // namespace
}  // namespace ucfs
