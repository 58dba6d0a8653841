#include "ucfs/checkpoint/run_layout.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"

namespace ucfs {
namespace {

// The rank files of a ZeRO-3 tag at `world` ranks (contents do not matter:
// ListRoot opens none of them), less `missing`.
void WriteZero3Tag(MemEnv& env, const std::string& dir, uint32_t world,
                   const std::string& missing = "") {
  for (uint32_t r = 0; r < world; ++r) {
    for (auto kind : {RankFileName::Kind::kOptim, RankFileName::Kind::kModel}) {
      const std::string name = RankFileNameFor(kind, "bf16_", r);
      if (name != missing) env.WriteFile(dir + "/" + name, "x");
    }
  }
}

std::vector<DirEntry> Listing(MemEnv& env, const std::string& dir) {
  auto entries = env.ListDir(dir);
  EXPECT_TRUE(entries.ok());
  return entries.ok() ? *entries : std::vector<DirEntry>{};
}

// An HF Trainer checkpoint-N/: a root whose tags are found by their rank
// files, whatever their names; the trainer's own files and directories are
// none.
TEST(ListRoot, FindsEveryTagByItsRankFiles) {
  MemEnv env;
  const std::string root = "/run/checkpoint-8";
  env.WriteFile(root + "/latest", "global_step8\n");
  WriteZero3Tag(env, root + "/global_step4", 2);
  WriteZero3Tag(env, root + "/global_step8", 2);
  WriteZero3Tag(env, root + "/pytorch_model_1", 3);
  WriteZero3Tag(env, root + "/broken", 2, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt");
  env.WriteFile(root + "/rng_state_0.pth", "r");
  env.WriteFile(root + "/config.json", "{}");
  env.WriteFile(root + "/tokenizer/vocab.json", "{}");

  auto listed = ListRoot(env, root, Listing(env, root));
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->dir, root);
  EXPECT_EQ(listed->latest, "global_step8");
  std::vector<std::string> names;
  for (const TagListing& t : listed->tags) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"broken", "global_step4", "global_step8",
                                             "pytorch_model_1"}));
  const TagListing& broken = listed->tags[0];
  EXPECT_FALSE(broken.complete);
  EXPECT_NE(broken.problem.find("bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt: missing"),
            std::string::npos)
      << broken.problem;
  for (size_t i = 1; i < listed->tags.size(); ++i) {
    const TagListing& t = listed->tags[i];
    EXPECT_TRUE(t.complete) << t.name << ": " << t.problem;
    EXPECT_EQ(t.dir, root + "/" + t.name);
    EXPECT_EQ(t.files().world_size, t.name == "pytorch_model_1" ? 3u : 2u);
    EXPECT_EQ(t.files().optim_prefix, "bf16_");
  }
}

TEST(ListRoot, IsNoneWithoutLatestOrWithoutTags) {
  MemEnv env;
  // A run directory: checkpoints below it, no `latest` of its own.
  env.WriteFile("/run/checkpoint-4/latest", "global_step4");
  WriteZero3Tag(env, "/run/checkpoint-4/global_step4", 2);
  EXPECT_FALSE(ListRoot(env, "/run", Listing(env, "/run")).has_value());
  // A `latest` with no tag directory below it.
  env.WriteFile("/other/latest", "global_step4");
  env.WriteFile("/other/logs/events.out", "e");
  EXPECT_FALSE(ListRoot(env, "/other", Listing(env, "/other")).has_value());
  // A tag directory is no root (its rank files are not below it).
  EXPECT_FALSE(ListRoot(env, "/run/checkpoint-4/global_step4",
                        Listing(env, "/run/checkpoint-4/global_step4"))
                   .has_value());
}

// `latest` naming no tag below it (deleted, or garbage) leaves the tags
// found, with none as latest's.
TEST(ListRoot, LatestNamingNoTagNamesNone) {
  MemEnv env;
  WriteZero3Tag(env, "/r/global_step4", 1);
  env.WriteFile("/r/latest", "global_step9");
  auto listed = ListRoot(env, "/r", Listing(env, "/r"));
  ASSERT_TRUE(listed.has_value());
  EXPECT_FALSE(listed->latest.has_value());
  ASSERT_EQ(listed->tags.size(), 1u);
  env.WriteFile("/r/latest", std::string("\x01\x02 binary", 9));
  listed = ListRoot(env, "/r", Listing(env, "/r"));
  ASSERT_TRUE(listed.has_value());
  EXPECT_FALSE(listed->latest.has_value());
}

// A ZeRO-1/2 tag: one model-states file for the whole model.
TEST(ListRoot, FindsZero12Tags) {
  MemEnv env;
  env.WriteFile("/r/latest", "checkpoint");
  env.WriteFile("/r/checkpoint/mp_rank_00_model_states.pt", "m");
  for (uint32_t r = 0; r < 4; ++r) {
    env.WriteFile("/r/checkpoint/" + RankFileNameFor(RankFileName::Kind::kOptim, "", r), "o");
  }
  auto listed = ListRoot(env, "/r", Listing(env, "/r"));
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->tags.size(), 1u);
  EXPECT_TRUE(listed->tags[0].complete) << listed->tags[0].problem;
  EXPECT_FALSE(listed->tags[0].files().model_per_rank);
  EXPECT_EQ(listed->tags[0].files().world_size, 4u);
  EXPECT_EQ(listed->latest, "checkpoint");
}

// OpenRLHF: ckpt/_actor/ and ckpt/_critic/, two levels below the run.
TEST(FindFirstRoot, FindsANestedRootOrSaysWhatARootIs) {
  MemEnv env;
  env.WriteFile("/run/ckpt/_actor/latest", "global_step2");
  WriteZero3Tag(env, "/run/ckpt/_actor/global_step2", 2);
  env.WriteFile("/run/ckpt/_critic/latest", "global_step2");
  WriteZero3Tag(env, "/run/ckpt/_critic/global_step2", 2);
  env.WriteFile("/run/logs/a/b/c/d/latest", "x");
  auto found = FindFirstRoot(env, "/run");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->dir, "/run/ckpt/_actor");
  EXPECT_FALSE(FindFirstRoot(env, "/run", 1).ok());
  auto none = FindFirstRoot(env, "/run/logs");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("/run/logs: no DeepSpeed checkpoint"), std::string::npos);
  EXPECT_NE(none.status().message().find("`latest`"), std::string::npos);
  EXPECT_FALSE(FindFirstRoot(env, "/nowhere").ok());
  // A root or a tag directory is a checkpoint directory; the run is none.
  EXPECT_TRUE(IsCheckpointDirectory(env, "/run/ckpt/_actor"));
  EXPECT_TRUE(IsCheckpointDirectory(env, "/run/ckpt/_actor/global_step2"));
  EXPECT_FALSE(IsCheckpointDirectory(env, "/run"));
  EXPECT_FALSE(IsCheckpointDirectory(env, "/run/ckpt"));
}

// Lightning's default layout puts the root four levels below
// default_root_dir; depth is no bound, the directories listed are.
TEST(FindFirstRoot, LightningsDefaultRootFourLevelsDown) {
  MemEnv env;
  const std::string root = "/run/lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt";
  env.WriteFile(root + "/latest", "checkpoint");
  WriteZero3Tag(env, root + "/checkpoint", 2);
  env.WriteFile("/run/lightning_logs/version_0/hparams.yaml", "{}");
  auto found = FindFirstRoot(env, "/run");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->dir, root);
  // /run, lightning_logs, version_0, checkpoints and the root: five listings.
  EXPECT_TRUE(FindFirstRoot(env, "/run", 5).ok());
  auto stopped = FindFirstRoot(env, "/run", 4);
  ASSERT_FALSE(stopped.ok());
  EXPECT_NE(stopped.status().message().find(
                "/run: stopped looking for DeepSpeed checkpoints after listing 4 directories "
                "below it, 4 levels down, having found none"),
            std::string::npos)
      << stopped.status().ToString();
  // Every root, or an error: never some of them.
  EXPECT_TRUE(FindRoots(env, "/run").ok());
  EXPECT_FALSE(FindRoots(env, "/run", 4).ok());
}

// inspect and verify of a run go over every root, in walk order, never
// below a root.
TEST(FindRoots, EveryRootBreadthFirstNoneBelowARoot) {
  MemEnv env;
  env.WriteFile("/run/checkpoint-8/latest", "global_step8");
  WriteZero3Tag(env, "/run/checkpoint-8/global_step8", 2);
  env.WriteFile("/run/checkpoint-4/latest", "global_step4");
  WriteZero3Tag(env, "/run/checkpoint-4/global_step4", 2);
  env.WriteFile("/run/ckpt/_critic/latest", "global_step2");
  WriteZero3Tag(env, "/run/ckpt/_critic/global_step2", 2);
  env.WriteFile("/run/ckpt/_actor/latest", "global_step2");
  WriteZero3Tag(env, "/run/ckpt/_actor/global_step2", 2);
  // A root inside a root's own directory is not looked for.
  env.WriteFile("/run/checkpoint-4/nested/latest", "t");
  WriteZero3Tag(env, "/run/checkpoint-4/nested/t", 2);
  auto roots = FindRoots(env, "/run");
  ASSERT_TRUE(roots.ok()) << roots.status().ToString();
  std::vector<std::string> dirs;
  for (const RootListing& r : *roots) dirs.push_back(r.dir);
  EXPECT_EQ(dirs, (std::vector<std::string>{"/run/checkpoint-4", "/run/checkpoint-8",
                                            "/run/ckpt/_actor", "/run/ckpt/_critic"}));
  auto none = FindRoots(env, "/run/ckpt/_actor/global_step2");
  EXPECT_FALSE(none.ok());
}

// Lightning's last.ckpt links to the newest checkpoint: a root is found by
// its own name, once, and a linked tag is no second tag.
TEST(FindRoots, NotThroughLinks) {
  namespace fs = std::filesystem;
  const std::string run = testing::FreshTempDir("find_roots_links");
  const std::string root = run + "/checkpoints/epoch=0-step=4.ckpt";
  fs::create_directories(root + "/checkpoint");
  testing::WriteFile(root + "/latest", "checkpoint");
  for (uint32_t r = 0; r < 2; ++r) {
    for (auto kind : {RankFileName::Kind::kOptim, RankFileName::Kind::kModel}) {
      testing::WriteFile(root + "/checkpoint/" + RankFileNameFor(kind, "", r), "x");
    }
  }
  fs::create_symlink("epoch=0-step=4.ckpt", run + "/checkpoints/last.ckpt");
  fs::create_symlink("checkpoint", root + "/checkpoint_link");
  auto roots = FindRoots(*Env::Posix(), run);
  ASSERT_TRUE(roots.ok()) << roots.status().ToString();
  ASSERT_EQ(roots->size(), 1u);
  EXPECT_EQ((*roots)[0].dir, root);
  ASSERT_EQ((*roots)[0].tags.size(), 1u);
  EXPECT_EQ((*roots)[0].tags[0].name, "checkpoint");
}

}  // namespace
}  // namespace ucfs
