// What a mount serves for each kind of path, decided without the kernel:
// every plan made on a MemEnv holding real DeepSpeed 0.14.5 rank files.
#include "ucfs/mount/mount_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <variant>

#include "test_support.h"
#include "ucfs/vfs/read_only_fs.h"

namespace ucfs {
namespace {

using testing::EntryNames;
using testing::ResolvePath;

class MountPlanTest : public ::testing::Test {
 protected:
  // A checkpoint root at `root`: `tag`'s rank files from fixture `fixture`,
  // and `latest` naming it.
  void PutRoot(const std::string& root, const std::string& fixture,
               const std::string& tag = "global_step4", bool tp = false) {
    const std::string from = (tp ? testing::TpFixtureDir(fixture) : testing::FixtureDir(fixture)) +
                             "/checkpoint/global_step4";
    ASSERT_TRUE(env_.CopyTreeFrom(from, JoinPath(root, tag)).ok());
    env_.WriteFile(JoinPath(root, "latest"), tag);
  }

  MountRequest Request(const std::string& checkpoint) {
    MountRequest r;
    r.checkpoint = checkpoint;
    r.no_cache = true;  // the LMDB index lives on disk
    return r;
  }

  Result<MountPlan> Plan(const MountRequest& r) { return PlanMount(env_, r); }

  static bool Has(const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  }

  MemEnv env_;
};

TEST_F(MountPlanTest, ARootIsACheckpointAndShowsItsUniversalView) {
  PutRoot("/ckpt", "z3_fp32_ws2");
  auto plan = Plan(Request("/ckpt"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto* mounted = std::get_if<CheckpointMount>(&plan->kind);
  ASSERT_NE(mounted, nullptr);
  EXPECT_EQ(mounted->checkpoint->world_size(), 2u);
  EXPECT_EQ(mounted->index_note, "no index");
  EXPECT_EQ(plan->description, "universal view");
  EXPECT_EQ(plan->source_dirs, (std::vector<std::string>{"/ckpt", "/ckpt/global_step4"}));
  EXPECT_EQ(plan->layout_roots,
            (std::vector<std::string>{"latest_universal", "global_step4_universal"}));
  EXPECT_EQ(plan->consolidated_root, "global_step4_fp32");
  const auto names = EntryNames(*plan->view, kRootInode);
  for (const char* name : {"latest", "global_step4", "latest_universal", "global_step4_universal",
                           "global_step4_fp32"}) {
    EXPECT_TRUE(Has(names, name)) << name;
  }
  EXPECT_FALSE(plan->writable);
}

// A tag directory is read through an Env confined to its root, and its
// root's directories are what nothing may be written into.
TEST_F(MountPlanTest, ATagDirectoryIsItsRootsCheckpoint) {
  PutRoot("/ckpt", "z3_fp32_ws2");
  auto plan = Plan(Request("/ckpt/global_step4"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(std::holds_alternative<CheckpointMount>(plan->kind));
  EXPECT_EQ(plan->source_dirs, (std::vector<std::string>{"/ckpt", "/ckpt/global_step4"}));
  EXPECT_TRUE(plan->env->Stat("/ckpt/latest").ok());
  EXPECT_EQ(plan->env->Stat("/elsewhere").status().posix_errno(), EACCES);
}

TEST_F(MountPlanTest, AWorldSizeShowsTheTagAtN) {
  PutRoot("/ckpt", "z3_fp32_ws2");
  MountRequest r = Request("/ckpt");
  r.world_size = 3;
  auto plan = Plan(r);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->description, "view at world size 3");
  EXPECT_EQ(plan->layout_roots, (std::vector<std::string>{"latest", "global_step4"}));
  const auto tag = EntryNames(*plan->view, ResolvePath(*plan->view, "global_step4"));
  EXPECT_TRUE(Has(tag, "zero_pp_rank_2_mp_rank_00_optim_states.pt"));
  EXPECT_FALSE(Has(tag, "zero_pp_rank_3_mp_rank_00_optim_states.pt"));
}

TEST_F(MountPlanTest, ARunDirectoryServesItsRootsAsTheyAreFound) {
  PutRoot("/run/checkpoint-4", "z3_fp32_ws2");
  env_.WriteFile("/run/checkpoint-4/config.json", "{}");
  auto plan = Plan(Request("/run"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto* run = std::get_if<RunDirectoryMount>(&plan->kind);
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->views, nullptr);  // read-only: nothing is saved into it
  EXPECT_EQ(plan->source_dirs, std::vector<std::string>{"/run"});
  const auto root = EntryNames(*plan->view, ResolvePath(*plan->view, "checkpoint-4"));
  EXPECT_TRUE(Has(root, "global_step4_universal"));
  EXPECT_TRUE(Has(root, "model.safetensors"));
  // --tag names a tag of one root, not of a run.
  MountRequest tagged = Request("/run");
  tagged.tag = "global_step4";
  auto refused = Plan(tagged);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--tag takes one of its roots"), std::string::npos);
}

// A run's writable mount: --upper made with the run's time, 0755, and the
// checkpoints saved into it asked about by the overlay.
TEST_F(MountPlanTest, ARunsWritableMountRoutesItsUpperDirectory) {
  PutRoot("/run/checkpoint-4", "z3_fp32_ws2");
  MountRequest r = Request("/run");
  r.world_size = 3;
  r.extra_views = false;
  r.upper = "/scratch/up";
  ASSERT_TRUE(env_.MakeDir("/scratch", 0700, 1).ok());
  auto plan = Plan(r);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto* run = std::get_if<RunDirectoryMount>(&plan->kind);
  ASSERT_NE(run, nullptr);
  ASSERT_NE(run->views, nullptr);
  ASSERT_TRUE(plan->writable);
  EXPECT_EQ(plan->writable->upper_dir, "/scratch/up");
  const FileStat up = *env_.Stat("/scratch/up");
  EXPECT_EQ(up.access.mode, 0755u);
  EXPECT_EQ(up.identity.mtime_ns, env_.Stat("/run")->identity.mtime_ns);
  EXPECT_TRUE(plan->writable->options.might_show("model.safetensors"));
  EXPECT_FALSE(plan->writable->options.might_show("rng_state_0.pth"));
  ASSERT_TRUE(plan->writable->options.on_upper_dir);
  // What is saved into it is read through the plan's Env, confined there.
  env_.WriteFile("/scratch/up/checkpoint-8/latest", "global_step8");
  EXPECT_EQ(*plan->env->ReadSmallFile("/scratch/up/checkpoint-8/latest"), "global_step8");
  EXPECT_NE(plan->description.find("tags at world size 3"), std::string::npos);
  EXPECT_NE(plan->description.find("no extra views"), std::string::npos);
}

// A checkpoint's writable mount keeps its consolidated weights read-only.
TEST_F(MountPlanTest, ACheckpointsWritableMountKeepsItsWeightsReadOnly) {
  PutRoot("/ckpt", "z3_fp32_ws2");
  MountRequest r = Request("/ckpt");
  r.world_size = 3;
  r.upper = "/up";
  auto plan = Plan(r);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->writable);
  EXPECT_EQ(plan->writable->upper_dir, "/up");
  EXPECT_EQ(plan->writable->options.read_only, std::vector<std::string>{"global_step4_fp32"});
  EXPECT_FALSE(plan->writable->options.on_upper_dir);
  EXPECT_FALSE(env_.Stat("/up").ok());  // the overlay makes it
}

TEST_F(MountPlanTest, AGridIsATensorAndPipelineParallelCheckpoint) {
  PutRoot("/grid", "tp_z1_fp32_t2d2", "global_step4", /*tp=*/true);
  auto plan = Plan(Request("/grid"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto* grid = std::get_if<GridMount>(&plan->kind);
  ASSERT_NE(grid, nullptr);
  EXPECT_EQ(grid->checkpoint->degrees().tp, 2u);
  EXPECT_NE(plan->description.find("tensor- and pipeline-parallel"), std::string::npos);
  EXPECT_TRUE(Has(EntryNames(*plan->view, kRootInode), "global_step4_universal"));
}

// An earlier mount's --upper laid over the root: its saved tag is served
// like the source's, and is one of the directories never written.
TEST_F(MountPlanTest, ALayerShowsWhatWasSavedThroughAnEarlierMount) {
  PutRoot("/ckpt", "z3_fp32_ws2");
  PutRoot("/layer", "z3_fp32_ws3", "global_step8");
  MountRequest r = Request("/ckpt");
  r.layers = {"/layer"};
  auto plan = Plan(r);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto* mounted = std::get_if<CheckpointMount>(&plan->kind);
  ASSERT_NE(mounted, nullptr);
  EXPECT_EQ(mounted->checkpoint->files().tag, "global_step8");
  EXPECT_EQ(mounted->checkpoint->world_size(), 3u);
  EXPECT_EQ(plan->source_dirs.back(), "/layer");
  // A layer lies over a root, never a tag directory.
  MountRequest tagged = Request("/ckpt/global_step4");
  tagged.layers = {"/layer"};
  auto refused = Plan(tagged);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("is a tag directory"), std::string::npos);
}

// The request's own faults, before any checkpoint file is read.
TEST_F(MountPlanTest, RefusesMountpointsAndUpperDirectoriesWhereTheyMayNotBe) {
  PutRoot("/ckpt", "z3_fp32_ws2");
  ASSERT_TRUE(env_.MakeDir("/mnt", 0755, 1).ok());
  env_.WriteFile("/full/x", "x");
  struct Case {
    std::optional<std::string> mountpoint, upper;
    std::vector<std::string> layers;
    const char* says;
  };
  const Case cases[] = {
      {"/ckpt", std::nullopt, {}, "the mountpoint is not empty"},
      {"/full", std::nullopt, {}, "not empty"},
      {"/nothing", std::nullopt, {}, "must be an existing, empty directory"},
      {"/mnt", "/ckpt/up", {}, "--upper /ckpt/up is inside the checkpoint"},
      {"/mnt", "/", {}, "holds the checkpoint"},
      {std::nullopt, "/ckpt/global_step4/up", {}, "inside the checkpoint"},
      {std::nullopt, "/layer/up", {"/layer"}, "overlap: a layer is only read"},
  };
  ASSERT_TRUE(env_.MakeDir("/layer", 0755, 1).ok());
  for (const Case& c : cases) {
    MountRequest r = Request("/ckpt");
    r.mountpoint = c.mountpoint;
    r.upper = c.upper;
    r.layers = c.layers;
    const Status s = CheckRequest(env_, r);
    SCOPED_TRACE(c.says);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
    // The plan finds it first, and says it is the request's.
    bool request_fault = false;
    auto planned = PlanMount(env_, r, &request_fault);
    ASSERT_FALSE(planned.ok());
    EXPECT_EQ(planned.status().message(), s.message());
    EXPECT_TRUE(request_fault);
  }
  MountRequest fine = Request("/ckpt");
  fine.mountpoint = "/mnt";
  fine.upper = "/up";
  EXPECT_TRUE(CheckRequest(env_, fine).ok());
  // A checkpoint's own fault is not the request's.
  MountRequest missing = Request("/nowhere");
  bool request_fault = false;
  EXPECT_FALSE(PlanMount(env_, missing, &request_fault).ok());
  EXPECT_FALSE(request_fault);
}

TEST(ParseWeightsDtype, NamesWhatItTakes) {
  EXPECT_EQ(*ParseWeightsDtype("bf16"), DType::kBFloat16);
  EXPECT_EQ(*ParseWeightsDtype("half"), DType::kFloat16);
  EXPECT_EQ(*ParseWeightsDtype("float32"), DType::kFloat32);
  auto wrong = ParseWeightsDtype("int8");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("bf16, fp16 or fp32"), std::string::npos);
}

}  // namespace
}  // namespace ucfs
