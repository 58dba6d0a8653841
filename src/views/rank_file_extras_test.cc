#include "ucfs/views/rank_file_extras.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace ucfs {
namespace {

constexpr auto Names = testing::EntryNames;
constexpr auto Resolve = testing::ResolvePath;

// An HF Trainer checkpoint-N/ saved at three ranks, with LLaMA-Factory's
// dataloader/ beside it.
void WriteRoot(MemEnv& env) {
  for (int r = 0; r < 3; ++r) {
    env.WriteFile("/ck/rng_state_" + std::to_string(r) + ".pth", "rng" + std::to_string(r));
    env.WriteFile("/ck/dataloader/rank_" + std::to_string(r) + ".pt", "dl" + std::to_string(r));
  }
  env.WriteFile("/ck/trainer_state.json", "{}");
}

std::shared_ptr<View> ViewAt(MemEnv& env, uint32_t n, bool copies = true) {
  auto view = std::make_shared<View>(env, 0);
  view->BackRootBy("/ck");
  RankFileOptions options{3, n, copies};
  view->DecorateSourceDirectories(
      [options](const std::string& dir, const std::vector<DirEntry>& entries) {
        return RankFileExtras(dir, entries, options);
      });
  return view;
}

std::string Read(MemEnv& env, View& view, const std::string& path) {
  return testing::ReadViewFile(env, view, Resolve(view, path));
}

TEST(RankFileExtras, NewRanksGetCopiesOfRankRModW) {
  MemEnv env;
  WriteRoot(env);
  auto view = ViewAt(env, 5);
  EXPECT_EQ(Names(*view, kRootInode),
            (std::vector<std::string>{"dataloader", "rng_state_0.pth", "rng_state_1.pth",
                                      "rng_state_2.pth", "rng_state_3.pth", "rng_state_4.pth",
                                      "trainer_state.json"}));
  EXPECT_EQ(Read(env, *view, "rng_state_1.pth"), "rng1");
  EXPECT_EQ(Read(env, *view, "rng_state_3.pth"), "rng0");
  EXPECT_EQ(Read(env, *view, "rng_state_4.pth"), "rng1");
  EXPECT_EQ(Read(env, *view, "dataloader/rank_4.pt"), "dl1");
  EXPECT_EQ(Names(*view, Resolve(*view, "dataloader")).size(), 5u);
  // A copy is the saved file passed through: its size before any read.
  auto attr = view->GetAttr(Resolve(*view, "rng_state_3.pth"));
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->size, 4u);
}

TEST(RankFileExtras, RanksBeyondNAreHiddenAndNEqualsOneAddsHfsName) {
  MemEnv env;
  WriteRoot(env);
  auto view = ViewAt(env, 2);
  EXPECT_EQ(Names(*view, kRootInode),
            (std::vector<std::string>{"dataloader", "rng_state_0.pth", "rng_state_1.pth",
                                      "trainer_state.json"}));
  EXPECT_FALSE(view->Lookup(kRootInode, "rng_state_2.pth").ok());

  auto one = ViewAt(env, 1);
  EXPECT_EQ(Names(*one, kRootInode),
            (std::vector<std::string>{"dataloader", "rng_state.pth", "rng_state_0.pth",
                                      "trainer_state.json"}));
  EXPECT_EQ(Read(env, *one, "rng_state.pth"), "rng0");
  EXPECT_EQ(Names(*one, Resolve(*one, "dataloader")), (std::vector<std::string>{"rank_0.pt"}));
}

TEST(RankFileExtras, CopiesOffLeavesNewRanksWithout) {
  MemEnv env;
  WriteRoot(env);
  auto view = ViewAt(env, 4, /*copies=*/false);
  EXPECT_EQ(Names(*view, Resolve(*view, "dataloader")),
            (std::vector<std::string>{"rank_0.pt", "rank_1.pt", "rank_2.pt"}));
  EXPECT_FALSE(view->Lookup(kRootInode, "rng_state_3.pth").ok());
}

// A family with a gap is no family: nothing is copied or hidden.
TEST(RankFileExtras, AGapPassesTheFilesThroughAsSaved) {
  MemEnv env;
  env.WriteFile("/ck/rng_state_0.pth", "a");
  env.WriteFile("/ck/rng_state_2.pth", "c");
  auto view = ViewAt(env, 2);
  EXPECT_EQ(Names(*view, kRootInode),
            (std::vector<std::string>{"rng_state_0.pth", "rng_state_2.pth"}));
}

}  // namespace
}  // namespace ucfs
