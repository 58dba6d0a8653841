#include "ucfs/views/run_view.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/hf_weights.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

using testing::FixtureDir;
constexpr auto Names = testing::EntryNames;
constexpr auto Resolve = testing::ResolvePath;

// Counts the rank files summarised: a run's listing must read none.
class CountingSource final : public TorchFileSource {
 public:
  explicit CountingSource(Env& env) : direct_(env) {}
  Result<TorchFileSummary> Summarize(const std::string& path) override {
    summarized_.fetch_add(1);
    return direct_.Summarize(path);
  }
  int summarized() const { return summarized_.load(); }

 private:
  DirectTorchFileSource direct_;
  std::atomic<int> summarized_{0};
};

constexpr auto ReadNode = testing::ReadViewFile;

constexpr auto Tree = testing::ViewTree;

class RunViewTest : public ::testing::Test {
 protected:
  // An HF Trainer output_dir: checkpoint-4/ (ZeRO-3) and checkpoint-8/
  // (ZeRO-2) with the trainer's files, an accelerate root with two models'
  // tags, and directories that are no root.
  void SetUp() override {
    Copy("z3_bf16_ws2", "global_step4", "/run/checkpoint-4/global_step4");
    env_.WriteFile("/run/checkpoint-4/latest", "global_step4");
    env_.WriteFile("/run/checkpoint-4/rng_state_0.pth", "rng0");
    env_.WriteFile("/run/checkpoint-4/rng_state_1.pth", "rng1");
    env_.WriteFile("/run/checkpoint-4/trainer_state.json", "{}");
    Copy("z2_tricky_fp32_ws2", "global_step4", "/run/checkpoint-8/global_step4");
    env_.WriteFile("/run/checkpoint-8/latest", "global_step4");
    Copy("z3_fp32_ws2", "global_step4", "/run/accelerate/pytorch_model");
    Copy("z3_bf16_ws2", "global_step4", "/run/accelerate/pytorch_model_1");
    env_.WriteFile("/run/accelerate/latest", "pytorch_model_1");
    env_.WriteFile("/run/runs/events.out", "tensorboard");
    env_.WriteFile("/run/README.md", "# run");
  }

  void Copy(const std::string& fixture, const std::string& tag, const std::string& to) {
    ASSERT_TRUE(env_.CopyTreeFrom(FixtureDir(fixture) + "/checkpoint/" + tag, to).ok());
  }

  MemEnv env_;
};

// Listing the run and its roots shows every tag's views and reads no rank
// file; a root's other files are passed through.
TEST_F(RunViewTest, ListingReadsNoRankFile) {
  CountingSource source(env_);
  RunViewOptions options;
  options.source = &source;
  auto view = BuildRunView(env_, "/run", options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  View& v = **view;
  EXPECT_EQ(Names(v, kRootInode),
            (std::vector<std::string>{"README.md", "accelerate", "checkpoint-4", "checkpoint-8",
                                      "runs"}));
  EXPECT_EQ(Names(v, Resolve(v, "checkpoint-4")),
            (std::vector<std::string>{"global_step4", "global_step4_fp32", "global_step4_universal",
                                      "latest", "latest_universal", "rng_state_0.pth",
                                      "rng_state_1.pth", "trainer_state.json"}));
  EXPECT_EQ(
      Names(v, Resolve(v, "accelerate")),
      (std::vector<std::string>{"latest", "latest_universal", "pytorch_model", "pytorch_model_1",
                                "pytorch_model_1_fp32", "pytorch_model_1_universal",
                                "pytorch_model_fp32", "pytorch_model_universal"}));
  EXPECT_EQ(Names(v, Resolve(v, "runs")), (std::vector<std::string>{"events.out"}));
  // stat of every view directory, too.
  for (const char* dir : {"checkpoint-4/global_step4_universal", "checkpoint-4/global_step4_fp32",
                          "accelerate/pytorch_model_universal"}) {
    auto attr = v.GetAttr(Resolve(v, dir));
    ASSERT_TRUE(attr.ok()) << dir;
    EXPECT_TRUE(attr->is_dir) << dir;
  }
  EXPECT_EQ(source.summarized(), 0);
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "accelerate/latest_universal")),
            "pytorch_model_1_universal");
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "checkpoint-4/rng_state_1.pth")), "rng1");
  EXPECT_EQ(source.summarized(), 0);

  // Looking into one tag's view opens that tag's rank files alone.
  EXPECT_EQ(Names(v, Resolve(v, "checkpoint-4/global_step4_universal")),
            (std::vector<std::string>{"zero", "zero_pp_rank_0_mp_rank_00_model_states.pt",
                                      "zero_pp_rank_1_mp_rank_00_model_states.pt"}));
  // Both optimizer files and rank 0's model states (rank 1's holds no
  // frozen param: it is only passed through).
  EXPECT_EQ(source.summarized(), 3);
}

// A view carries the time of what it is built from: <tag>_universal and
// <tag>_fp32 the newest rank file's (not the tag directory's, which a file
// created or renamed there later moves past them), latest_universal
// latest's, the Hugging Face weights the newest rank file's.
TEST_F(RunViewTest, ViewsCarryTheTimeOfWhatTheyAreBuiltFrom) {
  env_.WriteFile("/run/checkpoint-4/config.json", R"({"model_type": "llama"})");
  env_.WriteFile("/run/checkpoint-4/global_step4/written_after.json", "{}");
  env_.WriteFile("/run/checkpoint-4/latest", "global_step4");
  int64_t newest = 0;
  auto files = ListParallelCheckpointFiles(env_, "/run/checkpoint-4", "global_step4");
  ASSERT_TRUE(files.ok());
  for (const std::string& f : files->shards[0].optim_files) {
    newest = std::max(newest, env_.Stat(f)->identity.mtime_ns);
  }
  for (const std::string& f : files->shards[0].model_files) {
    newest = std::max(newest, env_.Stat(f)->identity.mtime_ns);
  }
  ASSERT_GT(newest, 0);
  auto view = BuildRunView(env_, "/run", RunViewOptions{});
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  View& v = **view;
  for (const char* dir :
       {"checkpoint-4/global_step4_universal", "checkpoint-4/global_step4_fp32"}) {
    auto attr = v.GetAttr(Resolve(v, dir));
    ASSERT_TRUE(attr.ok()) << dir;
    EXPECT_EQ(attr->mtime_ns, newest) << dir;
  }
  EXPECT_EQ(v.GetAttr(Resolve(v, "checkpoint-4/latest_universal"))->mtime_ns,
            env_.Stat("/run/checkpoint-4/latest")->identity.mtime_ns);
  // The tag mounted alone says the same of its universal tag.
  auto ckpt = Checkpoint::Open(env_, "/run/checkpoint-4");
  ASSERT_TRUE(ckpt.ok());
  auto alone =
      BuildUniversalView(env_, std::make_shared<const Checkpoint>(std::move(ckpt).value()));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ((*alone)->GetAttr(Resolve(**alone, "global_step4_universal"))->mtime_ns, newest);
  // latest_universal and the reshard view's latest are made from `latest`.
  const int64_t latest = env_.Stat("/run/checkpoint-4/latest")->identity.mtime_ns;
  EXPECT_EQ((*alone)->GetAttr(Resolve(**alone, "latest_universal"))->mtime_ns, latest);
  ReshardOptions at3;
  at3.world_size = 3;
  auto ckpt3 = Checkpoint::Open(env_, "/run/checkpoint-4");
  ASSERT_TRUE(ckpt3.ok());
  auto resharded =
      BuildReshardView(env_, std::make_shared<const Checkpoint>(std::move(ckpt3).value()), at3);
  ASSERT_TRUE(resharded.ok()) << resharded.status().ToString();
  EXPECT_EQ((*resharded)->GetAttr(Resolve(**resharded, "latest"))->mtime_ns, latest);
  EXPECT_EQ(ReadNode(env_, **resharded, Resolve(**resharded, "latest")), "global_step4");
}

// Where a fixture keeps DeepSpeed's (or the rebuilt) universal output.
std::string ReferenceUniversalDir(const std::string& fixture) {
  const std::string ds = FixtureDir(fixture) + "/checkpoint/global_step4_universal";
  return std::filesystem::exists(ds) ? ds
                                     : FixtureDir(fixture) + "/expected/global_step4_universal";
}

// Each root's tag views are byte for byte what DeepSpeed's ds_to_universal
// wrote for that checkpoint (with real CRCs), and the universal view and
// consolidated weights of that tag mounted alone.
TEST_F(RunViewTest, EveryTagServesWhatItsOwnMountWould) {
  RunViewOptions options;
  options.universal.compute_crc = true;
  auto view = BuildRunView(env_, "/run", options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  struct Case {
    std::string root, tag, fixture;
  };
  for (const Case& c : {Case{"checkpoint-4", "global_step4", "z3_bf16_ws2"},
                        Case{"checkpoint-8", "global_step4", "z2_tricky_fp32_ws2"},
                        Case{"accelerate", "pytorch_model", "z3_fp32_ws2"},
                        Case{"accelerate", "pytorch_model_1", "z3_bf16_ws2"}}) {
    SCOPED_TRACE(c.root + "/" + c.tag);
    auto ckpt = Checkpoint::Open(env_, "/run/" + c.root, {c.tag, nullptr, nullptr});
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    auto shared = std::make_shared<const Checkpoint>(std::move(ckpt).value());
    auto alone = BuildUniversalView(env_, shared, options.universal);
    ASSERT_TRUE(alone.ok());
    for (const std::string& dir : {UniversalTag(c.tag), c.tag + "_fp32"}) {
      std::map<std::string, std::string> ours, theirs;
      Tree(env_, **view, Resolve(**view, c.root + "/" + dir), "", &ours);
      Tree(env_, **alone, Resolve(**alone, dir), "", &theirs);
      EXPECT_FALSE(ours.empty()) << dir;
      EXPECT_EQ(ours.size(), theirs.size()) << dir;
      for (const auto& [path, bytes] : theirs) {
        EXPECT_TRUE(ours.count(path) && ours[path] == bytes) << dir << "/" << path;
      }
      if (dir != UniversalTag(c.tag)) continue;
      const std::string ref = ReferenceUniversalDir(c.fixture);
      size_t compared = 0;
      for (const auto& [path, bytes] : ours) {
        if (!std::filesystem::exists(ref + "/" + path)) continue;
        EXPECT_EQ(bytes, testing::ReadFile(ref + "/" + path)) << path;
        ++compared;
      }
      EXPECT_EQ(compared, ours.size());
    }
  }
}

// A tag with a missing rank file is not served (its root's other tags
// are); a real ds_to_universal output on disk is shown as it is.
TEST_F(RunViewTest, IncompleteTagsAreNotServedAndRealOutputWins) {
  env_.RemoveFile("/run/accelerate/pytorch_model/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  env_.RemoveFile("/run/accelerate/pytorch_model/zero_pp_rank_1_mp_rank_00_optim_states.pt");
  env_.WriteFile("/run/checkpoint-4/global_step4_universal/converted.txt", "by ds_to_universal");
  env_.WriteFile("/run/checkpoint-4/latest_universal", "global_step4_universal");
  auto view = BuildRunView(env_, "/run", {});
  ASSERT_TRUE(view.ok());
  View& v = **view;
  EXPECT_EQ(
      Names(v, Resolve(v, "accelerate")),
      (std::vector<std::string>{"latest", "latest_universal", "pytorch_model", "pytorch_model_1",
                                "pytorch_model_1_fp32", "pytorch_model_1_universal"}));
  EXPECT_EQ(Names(v, Resolve(v, "checkpoint-4/global_step4_universal")),
            (std::vector<std::string>{"converted.txt"}));
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "checkpoint-4/latest_universal")),
            "global_step4_universal");
  // The ZeRO-3 fp32 weights are still made for the tag.
  EXPECT_FALSE(Names(v, Resolve(v, "checkpoint-4/global_step4_fp32")).empty());
}

// A tag whose files do not open (a truncated rank file) answers every
// lookup into its views with the error naming the file; the rest of the
// run serves on.
TEST_F(RunViewTest, ABrokenTagIsAnErrorNamingTheFileTheRestServesOn) {
  const std::string bad =
      "/run/checkpoint-4/global_step4/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt";
  env_.WriteFile(bad, env_.Contents(bad)->substr(0, 100));
  auto view = BuildRunView(env_, "/run", {});
  ASSERT_TRUE(view.ok());
  View& v = **view;
  const InodeId u = Resolve(v, "checkpoint-4/global_step4_universal");
  auto listed = v.ReadDir(u);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.status().message().find("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"),
            std::string::npos)
      << listed.status().ToString();
  EXPECT_FALSE(Names(v, Resolve(v, "checkpoint-8/global_step4_universal")).empty());
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "checkpoint-4/trainer_state.json")), "{}");
}

// At --world-size N every complete tag of every root is its reshard view
// at N, byte for byte what mounting that tag alone at N shows; the
// frameworks' per-rank files are shown at N, files inside a tag directory
// pass through, and listing the run still reads no rank file.
TEST_F(RunViewTest, ReshardModeServesEveryTagAtN) {
  env_.WriteFile("/run/accelerate/pytorch_model/metric.json", "{\"loss\": 1}");
  CountingSource source(env_);
  RunViewOptions options;
  options.source = &source;
  options.reshard = ReshardOptions{};
  options.reshard->world_size = 3;
  options.extra_views = false;
  auto view = BuildRunView(env_, "/run", options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  View& v = **view;
  EXPECT_EQ(Names(v, Resolve(v, "checkpoint-4")),
            (std::vector<std::string>{"global_step4", "latest", "rng_state_0.pth",
                                      "rng_state_1.pth", "rng_state_2.pth", "trainer_state.json"}));
  EXPECT_EQ(Names(v, Resolve(v, "accelerate")),
            (std::vector<std::string>{"latest", "pytorch_model", "pytorch_model_1"}));
  EXPECT_EQ(source.summarized(), 0);
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "checkpoint-4/rng_state_2.pth")), "rng0");

  struct Case {
    std::string root, tag;
  };
  for (const Case& c :
       {Case{"checkpoint-4", "global_step4"}, Case{"checkpoint-8", "global_step4"},
        Case{"accelerate", "pytorch_model"}, Case{"accelerate", "pytorch_model_1"}}) {
    SCOPED_TRACE(c.root + "/" + c.tag);
    auto ckpt = Checkpoint::Open(env_, "/run/" + c.root, {c.tag, nullptr, nullptr});
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    auto alone = BuildReshardView(env_, std::make_shared<const Checkpoint>(std::move(ckpt).value()),
                                  *options.reshard);
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    std::map<std::string, std::string> ours, theirs;
    Tree(env_, v, Resolve(v, c.root + "/" + c.tag), "", &ours);
    Tree(env_, **alone, Resolve(**alone, c.tag), "", &theirs);
    EXPECT_EQ(ours, theirs);
    // Three ranks' files (one shared model file at ZeRO-2), none of the
    // saved ranks' own.
    size_t optim = 0;
    for (const auto& [path, bytes] : ours) optim += path.ends_with("optim_states.pt");
    EXPECT_EQ(optim, 3u);
    EXPECT_EQ(ours.count("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt") +
                  ours.count("zero_pp_rank_1_mp_rank_00_optim_states.pt"),
              1u);
  }
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "accelerate/pytorch_model/metric.json")), "{\"loss\": 1}");
}

// A read-only mount at N shows the extra views too; at N = 1 HF's
// rng_state.pth appears and ranks beyond 0 are hidden.
TEST_F(RunViewTest, ReshardModeWithExtraViewsAtOneRank) {
  RunViewOptions options;
  options.reshard = ReshardOptions{};
  options.reshard->world_size = 1;
  auto view = BuildRunView(env_, "/run", options);
  ASSERT_TRUE(view.ok());
  View& v = **view;
  EXPECT_EQ(Names(v, Resolve(v, "checkpoint-4")),
            (std::vector<std::string>{"global_step4", "global_step4_fp32", "global_step4_universal",
                                      "latest", "latest_universal", "rng_state.pth",
                                      "rng_state_0.pth", "trainer_state.json"}));
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "checkpoint-4/rng_state.pth")), "rng0");
  EXPECT_EQ(Names(v, Resolve(v, "checkpoint-4/global_step4")),
            (std::vector<std::string>{"bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                      "zero_pp_rank_0_mp_rank_00_model_states.pt"}));
  EXPECT_FALSE(Names(v, Resolve(v, "checkpoint-4/global_step4_universal")).empty());
}

// A root with a config.json and no weights gains model.safetensors of
// latest's tag: listing it opens that tag alone (its names depend on its
// size), and only there.
TEST_F(RunViewTest, HfWeightsBesideConfigJsonOpenLatestsTagOnly) {
  env_.WriteFile("/run/checkpoint-4/config.json", "{}");
  env_.WriteFile("/run/checkpoint-8/config.json", "{}");
  env_.WriteFile("/run/checkpoint-8/model.safetensors", "own");
  // The rank files are user 7's, one of them its alone: so are the weights
  // made from them.
  auto tag_files = env_.ListDir("/run/checkpoint-4/global_step4");
  ASSERT_TRUE(tag_files.ok());
  for (const DirEntry& e : *tag_files) {
    env_.SetAccess("/run/checkpoint-4/global_step4/" + e.name, FileAccess{0644, 7, 8});
  }
  env_.SetAccess("/run/checkpoint-4/global_step4/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
                 FileAccess{0600, 7, 8});
  CountingSource source(env_);
  RunViewOptions options;
  options.source = &source;
  auto view = BuildRunView(env_, "/run", options);
  ASSERT_TRUE(view.ok());
  View& v = **view;
  Names(v, kRootInode);
  EXPECT_EQ(source.summarized(), 0);
  auto names = Names(v, Resolve(v, "checkpoint-4"));
  EXPECT_EQ(std::count(names.begin(), names.end(), "model.safetensors"), 1);
  EXPECT_EQ(source.summarized(), 3);  // global_step4's files
  auto attr = v.GetAttr(Resolve(v, "checkpoint-4/model.safetensors"));
  ASSERT_TRUE(attr.ok());
  EXPECT_GT(attr->size, 132u * 2);  // 132 bf16 elements and a header
  EXPECT_EQ(attr->mode, 0400u);
  EXPECT_EQ(attr->uid, 7u);
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "checkpoint-8/model.safetensors")), "own");
  // Its bytes are those of the weights built from the checkpoint itself
  // (their pieces renumbered into the run view's sources).
  auto ckpt = Checkpoint::Open(env_, "/run/checkpoint-4");
  ASSERT_TRUE(ckpt.ok());
  auto shared = std::make_shared<const Checkpoint>(std::move(ckpt).value());
  auto direct = HfWeightsFiles(env_, shared);
  ASSERT_TRUE(direct.ok() && direct->size() == 1);
  std::vector<ReadPiece> pieces;
  ASSERT_TRUE((*direct)[0].content->Plan(0, (*direct)[0].content->size(), &pieces).ok());
  SourceFiles reader(env_, [&](uint32_t i) { return shared->sources()[i]; });
  std::string want;
  ASSERT_TRUE(reader.Read(pieces, &want).ok());
  EXPECT_EQ(ReadNode(env_, v, Resolve(v, "checkpoint-4/model.safetensors")), want);
  Names(v, Resolve(v, "accelerate"));
  EXPECT_EQ(source.summarized(), 3);
}

// Tensor- and pipeline-parallel tags in a run directory: each served with
// what its own mount would show, universal views and the view at a new D;
// the run's per-rank files of such a root are shown as saved.
TEST(RunViewGridTest, GridTagsServeWhatTheirOwnMountWould) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(testing::TpFixtureDir("tp_z1_fp32_t2d2") + "/checkpoint", "/run/tp").ok());
  ASSERT_TRUE(
      env.CopyTreeFrom(testing::TpFixtureDir("pp_bf16opt_p2t2d2") + "/checkpoint", "/run/pp").ok());
  env.WriteFile("/run/pp/rng_state_0.pth", "rng0");
  for (const std::string root : {"tp", "pp"}) {
    SCOPED_TRACE(root);
    auto grid = ParallelCheckpoint::Open(env, "/run/" + root);
    ASSERT_TRUE(grid.ok()) << grid.status().ToString();
    auto shared = std::make_shared<const ParallelCheckpoint>(std::move(grid).value());
    {
      RunViewOptions options;
      auto view = BuildRunView(env, "/run", options);
      ASSERT_TRUE(view.ok()) << view.status().ToString();
      auto alone = BuildUniversalView(env, shared, options.universal);
      ASSERT_TRUE(alone.ok()) << alone.status().ToString();
      for (const std::string dir : {"global_step4_universal", "global_step4_fp32"}) {
        std::map<std::string, std::string> ours, theirs;
        Tree(env, **view, Resolve(**view, root + "/" + dir), "", &ours);
        Tree(env, **alone, Resolve(**alone, dir), "", &theirs);
        EXPECT_FALSE(ours.empty()) << dir;
        EXPECT_EQ(ours, theirs) << dir;
      }
      EXPECT_EQ(ReadNode(env, **view, Resolve(**view, root + "/latest_universal")),
                "global_step4_universal");
    }
    RunViewOptions options;
    options.reshard = ReshardOptions{};
    options.reshard->world_size = 3;
    options.extra_views = false;
    auto view = BuildRunView(env, "/run", options);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    auto alone = BuildReshardView(env, shared, *options.reshard);
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    std::map<std::string, std::string> ours, theirs;
    Tree(env, **view, Resolve(**view, root + "/global_step4"), "", &ours);
    Tree(env, **alone, Resolve(**alone, "global_step4"), "", &theirs);
    EXPECT_EQ(ours, theirs);
    const uint32_t mp = shared->degrees().mp();
    size_t optim = 0;
    for (const auto& [path, bytes] : ours) optim += path.ends_with("optim_states.pt");
    EXPECT_EQ(optim, 3u * mp);
    if (root == "pp") {
      EXPECT_EQ(Names(**view, Resolve(**view, "pp")),
                (std::vector<std::string>{"global_step4", "latest", "rng_state_0.pth"}));
    }
  }
}

// --universal-info reaches every tag of a run: a T = 1 Megatron run's
// universal files laid out with the supplied row-parallel patterns, as its
// own mount with the flag lays them out (and not as without it).
TEST(RunViewGridTest, SuppliedUniversalInfoReachesEveryTag) {
  MemEnv env;
  const std::string dir = testing::TpFixtureDir("tp1_z1_megatron_d2");
  ASSERT_TRUE(env.CopyTreeFrom(dir + "/checkpoint", "/run/megatron").ok());
  RunViewOptions options;
  options.universal_info = std::make_shared<const SuppliedUniversalInfo>(SuppliedUniversalInfo{
      dir + "/universal_info_rows.json", testing::ReadFile(dir + "/universal_info_rows.json")});
  auto view = BuildRunView(env, "/run", options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  std::map<std::string, std::string> ours;
  Tree(env, **view, Resolve(**view, "megatron/global_step4_universal"), "", &ours);
  for (const bool supplied : {true, false}) {
    CheckpointOptions open;
    if (supplied) open.universal_info = options.universal_info;
    auto ckpt = Checkpoint::Open(env, "/run/megatron", open);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    auto alone = BuildUniversalView(
        env, std::make_shared<const Checkpoint>(std::move(ckpt).value()), options.universal);
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    std::map<std::string, std::string> theirs;
    Tree(env, **alone, Resolve(**alone, "global_step4_universal"), "", &theirs);
    EXPECT_EQ(ours == theirs, supplied);
  }
}

}  // namespace
}  // namespace ucfs
