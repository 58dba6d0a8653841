#include "ucfs/views/upper_root_views.h"

#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

using testing::FixtureDir;
constexpr auto Names = testing::EntryNames;
constexpr auto Resolve = testing::ResolvePath;
constexpr auto ReadNode = testing::ReadViewFile;

// A run at /run (checkpoint-4) whose writable mount's upper directory
// /upper receives checkpoint-12, as a trainer saves it through the mount.
class UpperRootViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Copy("z3_bf16_ws2", "/run/checkpoint-4/global_step4");
    env_.WriteFile("/run/checkpoint-4/latest", "global_step4");
    auto view = BuildRunView(env_, "/run", Options());
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    view_ = *view;
  }

  RunViewOptions Options() const {
    RunViewOptions options;
    options.extra_views = extra_views_;
    return options;
  }

  void Copy(const std::string& fixture, const std::string& to) {
    ASSERT_TRUE(env_.CopyTreeFrom(FixtureDir(fixture) + "/checkpoint/global_step4", to).ok());
  }

  // checkpoint-12 saved into the upper directory: the tag's files, then
  // `latest`.
  void Save(const std::string& fixture) {
    Copy(fixture, "/upper/checkpoint-12/global_step12");
    env_.WriteFile("/upper/checkpoint-12/config.json", "{}");
    env_.WriteFile("/upper/checkpoint-12/latest", "global_step12");
  }

  // The universal view's fp32.pt of `param`, built from `fixture` directly.
  std::string Expected(const std::string& fixture, const std::string& param) {
    MemEnv env;
    EXPECT_TRUE(
        env.CopyTreeFrom(FixtureDir(fixture) + "/checkpoint/global_step4", "/ref/global_step12")
            .ok());
    env.WriteFile("/ref/latest", "global_step12");
    auto ckpt = Checkpoint::Open(env, "/ref");
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    auto view = BuildUniversalView(env, std::make_shared<const Checkpoint>(std::move(*ckpt)));
    EXPECT_TRUE(view.ok());
    return ReadNode(env, **view,
                    Resolve(**view, "global_step12_universal/zero/" + param + "/fp32.pt"));
  }

  MemEnv env_;
  bool extra_views_ = true;
  std::shared_ptr<View> view_;
};

TEST_F(UpperRootViewsTest, ASavedRootGetsTheViewsOfASourceRoot) {
  Save("z3_bf16_ws3");
  UpperRootViews upper(view_, env_, Options());
  ASSERT_TRUE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
  // The view's directory is made where it had none; the saved files are
  // the overlay's to show, not the view's.
  EXPECT_EQ(Names(*view_, Resolve(*view_, "checkpoint-12")),
            (std::vector<std::string>{"global_step12_fp32", "global_step12_universal",
                                      "latest_universal", "model.safetensors"}));
  EXPECT_EQ(ReadNode(env_, *view_, Resolve(*view_, "checkpoint-12/latest_universal")),
            "global_step12_universal");
  EXPECT_EQ(
      ReadNode(env_, *view_,
               Resolve(*view_, "checkpoint-12/global_step12_universal/zero/fc1.weight/fp32.pt")),
      Expected("z3_bf16_ws3", "fc1.weight"));
  // Nothing changed: nothing to do.
  EXPECT_FALSE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
}

TEST_F(UpperRootViewsTest, AHalfSavedTagGetsNoViewUntilWhole) {
  Save("z3_bf16_ws3");
  const std::string held =
      "/upper/checkpoint-12/global_step12/bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt";
  const std::string bytes = *env_.Contents(held);
  ASSERT_TRUE(env_.RemoveFile(held));
  UpperRootViews upper(view_, env_, Options());
  EXPECT_FALSE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
  EXPECT_FALSE(view_->Lookup(kRootInode, "checkpoint-12").ok());
  env_.WriteFile(held, bytes);
  EXPECT_TRUE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
  EXPECT_TRUE(view_->Lookup(Resolve(*view_, "checkpoint-12"), "global_step12_universal").ok());
}

TEST_F(UpperRootViewsTest, ATagSavedAgainGetsItsViewsAnew) {
  Save("z3_bf16_ws3");
  UpperRootViews upper(view_, env_, Options());
  ASSERT_TRUE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
  const InodeId before =
      Resolve(*view_, "checkpoint-12/global_step12_universal/zero/fc1.weight/fp32.pt");
  // Saved again in place, other values (a rank file's bytes replaced by a
  // another run's: the identities change).
  for (int r = 0; r < 3; ++r) {
    const std::string name =
        "bf16_zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_optim_states.pt";
    const std::string from = "/upper/checkpoint-12/global_step12/" + name;
    env_.WriteFile(from, *env_.Contents(from));  // rewritten: a new identity
  }
  ASSERT_TRUE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
  const InodeId after =
      Resolve(*view_, "checkpoint-12/global_step12_universal/zero/fc1.weight/fp32.pt");
  EXPECT_NE(before, after);
  EXPECT_EQ(ReadNode(env_, *view_, after), Expected("z3_bf16_ws3", "fc1.weight"));
}

TEST_F(UpperRootViewsTest, WithoutExtraViewsOnlyTheWeights) {
  extra_views_ = false;
  Save("z3_bf16_ws3");
  UpperRootViews upper(view_, env_, Options());
  ASSERT_TRUE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
  EXPECT_EQ(Names(*view_, Resolve(*view_, "checkpoint-12")),
            (std::vector<std::string>{"model.safetensors"}));
}

TEST_F(UpperRootViewsTest, DirectoriesThatAreNoRootGainNothing) {
  env_.WriteFile("/upper/runs/events.out", "tb");
  env_.WriteFile("/upper/checkpoint-12/global_step12/notes.txt", "not a rank file");
  env_.WriteFile("/upper/checkpoint-12/latest", "global_step12");
  UpperRootViews upper(view_, env_, Options());
  EXPECT_FALSE(upper.Update("runs", "/upper/runs"));
  EXPECT_FALSE(upper.Update("checkpoint-12", "/upper/checkpoint-12"));
  EXPECT_FALSE(upper.Update("missing", "/upper/missing"));
  EXPECT_FALSE(view_->Lookup(kRootInode, "runs").ok());
}

TEST(UpperRootViews, MightShowTheNamesViewsMake) {
  for (const char* name :
       {"global_step12_universal", "latest_universal", "pytorch_model_fp32", "model.safetensors",
        "model.safetensors.index.json", "model-00001-of-00002.safetensors"}) {
    EXPECT_TRUE(UpperRootViews::MightShow(name)) << name;
  }
  for (const char* name : {"zero_pp_rank_0_mp_rank_00_optim_states.pt", "latest", "config.json",
                           "rng_state_0.pth", "global_step12"}) {
    EXPECT_FALSE(UpperRootViews::MightShow(name)) << name;
  }
}

}  // namespace
}  // namespace ucfs
