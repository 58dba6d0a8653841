#include "ucfs/checkpoint/rank_families.h"

#include <gtest/gtest.h>

#include "ucfs/checkpoint/checkpoint_layout.h"

namespace ucfs {
namespace {

std::vector<std::string> Prefixes(const RankFamilies& f) {
  std::vector<std::string> out;
  for (const RankFamily& family : f.complete) out.push_back(family.prefix + "|" + family.suffix);
  return out;
}

// What an HF Trainer checkpoint-N/ and accelerate's root hold at W = 3:
// the per-rank files are families, nothing else is.
TEST(FindRankFamilies, FindsTheFrameworksPerRankFiles) {
  const std::vector<std::string> names = {
      "rng_state_0.pth",
      "rng_state_1.pth",
      "rng_state_2.pth",  // HF Trainer
      "random_states_2.pkl",
      "random_states_0.pkl",
      "random_states_1.pkl",  // accelerate
      "model-00001-of-00003.safetensors",
      "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors",  // zero-padded shard numbers
      "custom_checkpoint_0.pkl",
      "custom_checkpoint_1.pkl",
      "custom_checkpoint_2.pkl",  // accelerate numbers objects, not ranks
      "scheduler.bin",
      "scheduler_1.bin",
      "scheduler_2.bin",  // from 1
      "zero_pp_rank_0_mp_rank_00_optim_states.pt",
      "zero_pp_rank_1_mp_rank_00_optim_states.pt",
      "zero_pp_rank_2_mp_rank_00_optim_states.pt",  // DeepSpeed's own
      "trainer_state.json",
      "latest"};
  RankFamilies f = FindRankFamilies(names, 3);
  EXPECT_EQ(Prefixes(f), (std::vector<std::string>{"random_states_|.pkl", "rng_state_|.pth"}));
  EXPECT_TRUE(f.problems.empty()) << f.problems[0];
  EXPECT_EQ(f.complete[1].NameFor(7), "rng_state_7.pth");
  EXPECT_EQ(SingleRankName(f.complete[1]), "rng_state.pth");
  EXPECT_EQ(SingleRankName(f.complete[0]), "");
}

TEST(FindRankFamilies, DirectoryOfRankFilesAndSingleRankRuns) {
  RankFamilies f = FindRankFamilies({"rank_0.pt", "rank_1.pt"}, 2);  // dataloader/
  EXPECT_EQ(Prefixes(f), (std::vector<std::string>{"rank_|.pt"}));
  // accelerate names its one rank's file random_states_0.pkl.
  f = FindRankFamilies({"random_states_0.pkl", "scheduler.bin"}, 1);
  EXPECT_EQ(Prefixes(f), (std::vector<std::string>{"random_states_|.pkl"}));
  // Two numbers in a name: the one that runs 0..W-1 is the rank.
  f = FindRankFamilies({"state_0_of_2.pt", "state_1_of_2.pt"}, 2);
  EXPECT_EQ(Prefixes(f), (std::vector<std::string>{"state_|_of_2.pt"}));
}

// DeepSpeed's MoE expert files number experts, not ranks (as many as the
// ranks in the fixtures, 4): never a family, whatever N is.
TEST(FindRankFamilies, ExpertFilesAreNoFamily) {
  RankFamilies f = FindRankFamilies(
      {"layer_0_expert_0_mp_rank_00_model_states.pt", "layer_0_expert_1_mp_rank_00_model_states.pt",
       "expert_0_mp_rank_00_model_states.pt", "expert_1_mp_rank_00_model_states.pt"},
      2);
  EXPECT_TRUE(f.complete.empty());
  EXPECT_TRUE(IsExpertFileName("layer_12_expert_7_mp_rank_01_model_states.pt"));
  EXPECT_FALSE(IsExpertFileName("layer_01-model_00-model_states.pt"));
  EXPECT_FALSE(IsExpertFileName("layer_0_expert_x_mp_rank_00_model_states.pt"));
}

// A gap, or more ranks than the checkpoint has, is no family: passed
// through, with a problem naming what is wrong.
TEST(FindRankFamilies, GapsAndOtherWorldSizesAreProblems) {
  RankFamilies f = FindRankFamilies({"rng_state_0.pth", "rng_state_2.pth"}, 3);
  EXPECT_TRUE(f.complete.empty());
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_NE(f.problems[0].find("rng_state_1.pth is missing (the checkpoint has 3"),
            std::string::npos)
      << f.problems[0];

  f = FindRankFamilies({"rng_state_0.pth", "rng_state_1.pth", "rng_state_2.pth"}, 2);
  EXPECT_TRUE(f.complete.empty());
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_NE(f.problems[0].find("ranks 0..2 saved (the checkpoint has 2"), std::string::npos)
      << f.problems[0];

  // One numbered file at W > 1 is nothing at all (a log, a version).
  f = FindRankFamilies({"events_0.log"}, 4);
  EXPECT_TRUE(f.complete.empty());
  EXPECT_TRUE(f.problems.empty());
  // Leading zeros and huge numbers are not ranks.
  f = FindRankFamilies({"rng_state_00.pth", "rng_state_01.pth", "x_0.pt", "x_99999999999.pt"}, 2);
  EXPECT_TRUE(f.complete.empty());
  EXPECT_TRUE(f.problems.empty());
}

}  // namespace
}  // namespace ucfs
