// The shared index on a real fixture copied to a real directory (it is
// written through the real write seam): a mount that finds it asks the
// source nothing of the tag and serves the same bytes; a damaged index, or
// one made before the tag changed, is passed over for today's discovery.
#include "ucfs/mount/shared_index.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_support.h"
#include "ucfs/base/counting_env.h"
#include "ucfs/mount/mount_plan.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

struct Mounted {
  EnvCounts asked;
  std::map<std::string, std::string> files;
  int rank_files_opened = 0;  // where counted
};

// The universal view of `ckpt` (or, given `world_size`, the view at N
// without extra views, as a writable mount's) planned on `host`, without
// the per-node index (with the shared index looked for in `index_dir` too,
// where given).
Result<MountPlan> PlanOn(CountingEnv& host, const std::string& ckpt,
                         std::optional<std::string> index_dir,
                         std::optional<uint32_t> world_size = std::nullopt) {
  MountRequest request;
  request.checkpoint = ckpt;
  request.no_cache = true;
  request.index_dir = std::move(index_dir);
  request.world_size = world_size;
  request.extra_views = !world_size;
  auto plan = PlanMount(host, request);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan;
}

// The universal view of `ckpt` planned on a counting host, and every file
// of it.
Mounted MountAndRead(const std::string& ckpt, std::optional<std::string> index_dir = std::nullopt) {
  CountingEnv host(EnvWrapper::NotOwned(Env::Posix()));
  auto plan = PlanOn(host, ckpt, std::move(index_dir));
  Mounted m;
  if (!plan.ok()) return m;
  m.asked = host.counts();
  testing::ViewTree(*plan->env, *plan->view, kRootInode, "", &m.files);
  return m;
}

// A fixture's checkpoint copied into the test's own directory.
std::string CopyOf(const std::string& fixture, const std::string& dir) {
  fs::copy(testing::FixtureDir(fixture) + "/checkpoint", dir + "/" + fixture,
           fs::copy_options::recursive);
  return fs::canonical(dir + "/" + fixture).string();
}

// The view's files but the index itself, which the root shows as it
// shows any file of the root.
std::map<std::string, std::string> WithoutIndex(std::map<std::string, std::string> files) {
  std::erase_if(files, [](const auto& f) { return f.first.ends_with(".ucfs-index"); });
  return files;
}

class SharedIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("shared_index");
    ckpt_ = CopyOf("z3_tricky_fp32_ws4", dir_);
  }
  std::string dir_, ckpt_;
};

TEST_F(SharedIndexTest, AMountReadsItInsteadOfTheTag) {
  const Mounted plain = MountAndRead(ckpt_);
  auto written = WriteSharedIndex(*Env::Posix(), ckpt_, std::nullopt);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, ckpt_ + "/global_step4.ucfs-index");
  const Mounted indexed = MountAndRead(ckpt_);
  // Every file of the view, byte for byte (the rank files' bytes are read
  // from the source in both).
  EXPECT_EQ(indexed.files.size(), plain.files.size() + 1);
  EXPECT_TRUE(WithoutIndex(indexed.files) == plain.files);
  EXPECT_LT(indexed.asked.metadata(), plain.asked.metadata());
  // What the plan asks of the source does not grow with the ranks: the
  // same run saved at 2 ranks and at 4 costs the same (without the index,
  // the 4 ranks' costs more).
  std::vector<Mounted> by_world;
  std::vector<Mounted> plain_by_world;
  std::vector<Mounted> tag_by_world;  // the tag directory mounted, not its root
  for (const char* fixture : {"z3_fp32_ws2", "z3_fp32_ws4"}) {
    const std::string ckpt = CopyOf(fixture, dir_);
    // The converter's output kept beside the fixture is another directory
    // of the root (a stat and a listing more); DeepSpeed's root has none.
    fs::remove_all(ckpt + "/global_step4_universal");
    fs::remove(ckpt + "/latest_universal");
    plain_by_world.push_back(MountAndRead(ckpt));
    ASSERT_TRUE(WriteSharedIndex(*Env::Posix(), ckpt, std::nullopt).ok());
    by_world.push_back(MountAndRead(ckpt));
    tag_by_world.push_back(MountAndRead(ckpt + "/" + testing::ReadFile(ckpt + "/latest")));
  }
  for (const auto* mounts : {&by_world, &tag_by_world}) {
    const std::vector<Mounted>& m = *mounts;
    EXPECT_EQ(m[0].asked.opens, m[1].asked.opens);
    EXPECT_EQ(m[0].asked.stats, m[1].asked.stats);
    EXPECT_EQ(m[0].asked.listings, m[1].asked.listings);
    EXPECT_EQ(m[0].asked.metadata(), m[1].asked.metadata());
  }
  EXPECT_LT(plain_by_world[0].asked.metadata(), plain_by_world[1].asked.metadata());
  // Issue 38's bound for a mount of the root: 10 questions whatever W is
  // (bench/README.md lists them: `latest`, the index, the tag directory's
  // identity, the root's listing).
  EXPECT_LE(by_world[1].asked.metadata(), 10u);
  // Written twice, the same bytes.
  const std::string first = testing::ReadFile(*written);
  ASSERT_TRUE(WriteSharedIndex(*Env::Posix(), ckpt_, std::nullopt).ok());
  EXPECT_EQ(testing::ReadFile(*written), first);
}

TEST_F(SharedIndexTest, ADamagedOrStaleIndexIsPassedOver) {
  const Mounted plain = MountAndRead(ckpt_);
  auto written = WriteSharedIndex(*Env::Posix(), ckpt_, std::nullopt);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  const std::string good = testing::ReadFile(*written);
  {
    std::ofstream(*written, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() / 2);
  }
  TagLocation where{ckpt_, "global_step4", ckpt_ + "/global_step4", *written};
  std::string note;
  EXPECT_EQ(ReadSharedIndex(*Env::Posix(), where.index_file, *Env::Posix(), where, &note), nullptr);
  EXPECT_NE(note.find("checksum"), std::string::npos) << note;
  Mounted m = MountAndRead(ckpt_);
  EXPECT_TRUE(WithoutIndex(m.files) == plain.files);
  // Today's discovery, whole (and the index file looked at).
  EXPECT_GE(m.asked.metadata(), plain.asked.metadata());
  // A file added to the tag after the index: the directory changed.
  { std::ofstream(*written, std::ios::binary | std::ios::trunc) << good; }
  EXPECT_NE(ReadSharedIndex(*Env::Posix(), where.index_file, *Env::Posix(), where, &note), nullptr);
  { std::ofstream(ckpt_ + "/global_step4/notes.txt") << "later"; }
  EXPECT_EQ(ReadSharedIndex(*Env::Posix(), where.index_file, *Env::Posix(), where, &note), nullptr);
  EXPECT_NE(note.find("made before"), std::string::npos) << note;
  // Another tag's index under this tag's name.
  where.tag = "global_step5";
  EXPECT_EQ(ReadSharedIndex(*Env::Posix(), where.index_file, *Env::Posix(), where, &note), nullptr);
  EXPECT_NE(note.find("an index of tag 'global_step4'"), std::string::npos) << note;
  // No index at all: nothing to say.
  fs::remove(*written);
  EXPECT_EQ(ReadSharedIndex(*Env::Posix(), where.index_file, *Env::Posix(), where, &note), nullptr);
  EXPECT_EQ(note, "");
}

// An index that decodes and is current but lies about the tag (here: its
// listing lacks rank 1's optimizer file, which discovery then finds
// missing) must not make the checkpoint unmountable: the plan made with it
// fails, and the tag is read as if there were no index.
TEST_F(SharedIndexTest, AnIndexThatLiesIsPassedOverWhenTheMountFailsWithIt) {
  const Mounted plain = MountAndRead(ckpt_);
  auto written = WriteSharedIndex(*Env::Posix(), ckpt_, std::nullopt);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  auto snapshot = DecodeTagSnapshot(testing::ReadFile(*written));
  ASSERT_TRUE(snapshot.ok());
  std::vector<DirEntry>& listing = snapshot->listings[""];
  const size_t before = listing.size();
  std::erase_if(listing, [](const DirEntry& e) {
    return e.name == "zero_pp_rank_1_mp_rank_00_optim_states.pt";
  });
  ASSERT_EQ(listing.size(), before - 1);
  { std::ofstream(*written, std::ios::binary | std::ios::trunc) << EncodeTagSnapshot(*snapshot); }
  const Mounted lied_to = MountAndRead(ckpt_);
  EXPECT_TRUE(WithoutIndex(lied_to.files) == plain.files);
}

// `ucfs index --index-dir DIR`, for a checkpoint its indexer cannot write
// into: the index lands in DIR under a name of the tag's path, nothing is
// written beside the tag, and a mount finds it with the same --index-dir
// (and only with it).
TEST_F(SharedIndexTest, AnIndexDirHoldsItApartFromTheCheckpoint) {
  const Mounted plain = MountAndRead(ckpt_);
  const std::string index_dir = dir_ + "/indexes";
  fs::create_directory(index_dir);
  auto written = WriteSharedIndex(*Env::Posix(), ckpt_, std::nullopt, index_dir);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_TRUE(written->starts_with(index_dir + "/global_step4-")) << *written;
  EXPECT_TRUE(written->ends_with(".ucfs-index")) << *written;
  EXPECT_FALSE(fs::exists(ckpt_ + "/global_step4.ucfs-index"));
  // Another checkpoint's tag of the same name gets another file.
  const std::string other = CopyOf("z3_fp32_ws2", dir_);
  auto other_written = WriteSharedIndex(*Env::Posix(), other, std::nullopt, index_dir);
  ASSERT_TRUE(other_written.ok());
  EXPECT_NE(*other_written, *written);

  const Mounted with_dir = MountAndRead(ckpt_, index_dir);
  EXPECT_TRUE(with_dir.files == plain.files);
  EXPECT_LT(with_dir.asked.metadata(), plain.asked.metadata());
  const Mounted without_dir = MountAndRead(ckpt_);
  EXPECT_TRUE(without_dir.files == plain.files);
  EXPECT_GT(without_dir.asked.metadata(), with_dir.asked.metadata());
  // The other checkpoint's index, renamed to this one's name, is refused.
  fs::rename(*other_written, *written);
  const Mounted swapped = MountAndRead(ckpt_, index_dir);
  EXPECT_TRUE(swapped.files == plain.files);
  EXPECT_GE(swapped.asked.metadata(), plain.asked.metadata());
}

// A tensor- and pipeline-parallel grid (the runs of a thousand nodes):
// `ucfs index` records its discovery too, and a mount with it serves the
// same bytes, reading no rank file to plan.
TEST_F(SharedIndexTest, AGridIsIndexedAndMountedFromIt) {
  const std::string grid = dir_ + "/grid";
  fs::copy(testing::TpFixtureDir("pp_bf16opt_p2t2d2") + "/checkpoint", grid,
           fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(grid)) {
    if (e.path().filename().string().ends_with("_universal")) fs::remove_all(e.path());
  }
  const Mounted plain = MountAndRead(grid);
  auto written = WriteSharedIndex(*Env::Posix(), grid, std::nullopt);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  const Mounted indexed = MountAndRead(grid);
  EXPECT_TRUE(WithoutIndex(indexed.files) == plain.files);
  EXPECT_EQ(indexed.asked.opens, 2u);  // `latest` and the index
  EXPECT_LE(indexed.asked.metadata(), 10u);
  EXPECT_LT(indexed.asked.metadata(), plain.asked.metadata());
}

// A run directory's tag looked into (its universal view's time, its
// listing, every file's size), counted from after the plan: what opening the tag
// asks of the source; and the view's files.
Mounted LookIntoRunTag(const std::string& run, const std::string& tag_view,
                       std::optional<std::string> index_dir = std::nullopt,
                       std::optional<uint32_t> world_size = std::nullopt) {
  CountingEnv host(EnvWrapper::NotOwned(Env::Posix()));
  auto plan = PlanOn(host, run, std::move(index_dir), world_size);
  if (!plan.ok()) return {};
  host.Reset();
  Mounted m;
  bool looking = true;
  host.set_tracer([&m, &looking](const char* kind, const std::string& path) {
    if (looking && std::string_view(kind) == "open" && path.ends_with(".pt")) ++m.rank_files_opened;
  });
  const InodeId dir = testing::ResolvePath(*plan->view, tag_view);
  EXPECT_TRUE(plan->view->GetAttr(dir).ok());  // its time: its rank files' newest
  EXPECT_FALSE(testing::EntryNames(*plan->view, dir).empty());
  m.asked = host.counts();
  looking = false;
  testing::ViewTree(*plan->env, *plan->view, dir, "", &m.files);
  return m;
}

// `ucfs index RUN`: every tag of every root of a run directory, each
// opened from its index when the run view looks into it, asking the source
// the same at 2 ranks as at 4 and serving the same bytes; run again, it
// writes nothing.
TEST_F(SharedIndexTest, ARunsTagsAreIndexedAndOpenedFromTheirIndexes) {
  std::vector<Mounted> plain_by_world, by_world, by_world_in_dir;
  for (const char* fixture : {"z3_fp32_ws2", "z3_fp32_ws4"}) {
    const std::string run = dir_ + "/run_" + fixture;
    fs::create_directories(run + "/output");
    fs::copy(testing::FixtureDir(fixture) + "/checkpoint", run + "/output/checkpoint-4",
             fs::copy_options::recursive);
    const std::string root = run + "/output/checkpoint-4";
    fs::remove_all(root + "/global_step4_universal");
    fs::remove(root + "/latest_universal");
    const std::string tag_view = "output/checkpoint-4/global_step4_universal";
    plain_by_world.push_back(LookIntoRunTag(run, tag_view));
    const Mounted plain_at_3 =
        LookIntoRunTag(run, "output/checkpoint-4/global_step4", std::nullopt, 3);

    const std::string index_dir = run + "-indexes";
    fs::create_directory(index_dir);
    auto in_dir = WriteRunIndexes(*Env::Posix(), run, index_dir);
    ASSERT_TRUE(in_dir.ok()) << in_dir.status().ToString();
    ASSERT_EQ(in_dir->size(), 1u);
    EXPECT_TRUE((*in_dir)[0].written);
    EXPECT_TRUE((*in_dir)[0].index_file.starts_with(index_dir + "/global_step4-"));
    by_world_in_dir.push_back(LookIntoRunTag(run, tag_view, index_dir));

    auto indexed = WriteRunIndexes(*Env::Posix(), run);
    ASSERT_TRUE(indexed.ok()) << indexed.status().ToString();
    ASSERT_EQ(indexed->size(), 1u);
    EXPECT_TRUE((*indexed)[0].error.ok()) << (*indexed)[0].error.ToString();
    EXPECT_TRUE((*indexed)[0].written);
    EXPECT_EQ((*indexed)[0].index_file, root + "/global_step4.ucfs-index");
    EXPECT_EQ((*indexed)[0].tag_dir, root + "/global_step4");
    by_world.push_back(LookIntoRunTag(run, tag_view));
    // The tag at N = 3, as a writable mount shows it (its graft the only
    // holder of the tag's views, which it drops once built: the view must
    // keep the index's Env).
    const Mounted at_3 = LookIntoRunTag(run, "output/checkpoint-4/global_step4", std::nullopt, 3);
    EXPECT_EQ(at_3.rank_files_opened, 0);
    EXPECT_TRUE(at_3.files == plain_at_3.files);
    EXPECT_FALSE(at_3.files.empty());
    // After the next save: the current index is left as it is.
    auto again = WriteRunIndexes(*Env::Posix(), run);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(again->size(), 1u);
    EXPECT_FALSE((*again)[0].written);
    EXPECT_TRUE((*again)[0].error.ok());
  }
  for (size_t w = 0; w < 2; ++w) {
    EXPECT_FALSE(plain_by_world[w].files.empty());
    EXPECT_TRUE(by_world[w].files == plain_by_world[w].files);
    EXPECT_TRUE(by_world_in_dir[w].files == plain_by_world[w].files);
    EXPECT_LT(by_world[w].asked.metadata(), plain_by_world[w].asked.metadata());
    EXPECT_LT(by_world_in_dir[w].asked.metadata(), plain_by_world[w].asked.metadata());
  }
  // Opening the tag from its index: no rank file opened, and the same
  // questions at 2 ranks and 4 (the run's directories, the root's
  // `latest`, the index and the tag directory's identity); without it,
  // each rank's files, and 4 ranks' cost more.
  for (const auto* mounts : {&by_world, &by_world_in_dir}) {
    for (const Mounted& m : *mounts) EXPECT_EQ(m.rank_files_opened, 0);
    EXPECT_EQ((*mounts)[0].asked.metadata(), (*mounts)[1].asked.metadata());
  }
  EXPECT_GE(plain_by_world[1].rank_files_opened, 4);  // each rank's optimizer file
  EXPECT_LT(plain_by_world[0].asked.metadata(), plain_by_world[1].asked.metadata());
}

// A run's tag whose index decodes and is current but lies (its listing
// lacks rank 1's optimizer file): the tag is opened without it, with the
// same bytes.
TEST_F(SharedIndexTest, ARunsTagWithALyingIndexIsReadItself) {
  const std::string run = dir_ + "/run";
  fs::create_directory(run);
  fs::rename(ckpt_, run + "/ckpt");
  const std::string tag_view = "ckpt/global_step4_universal";
  const Mounted plain = LookIntoRunTag(run, tag_view);
  auto written = WriteRunIndexes(*Env::Posix(), run);
  ASSERT_TRUE(written.ok() && written->size() == 1u);
  const std::string index_file = (*written)[0].index_file;
  auto snapshot = DecodeTagSnapshot(testing::ReadFile(index_file));
  ASSERT_TRUE(snapshot.ok());
  std::erase_if(snapshot->listings[""], [](const DirEntry& e) {
    return e.name == "zero_pp_rank_1_mp_rank_00_optim_states.pt";
  });
  { std::ofstream(index_file, std::ios::binary | std::ios::trunc) << EncodeTagSnapshot(*snapshot); }
  const Mounted lied_to = LookIntoRunTag(run, tag_view);
  EXPECT_FALSE(plain.files.empty());
  EXPECT_TRUE(lied_to.files == plain.files);
  EXPECT_GT(lied_to.rank_files_opened, 0);
}

}  // namespace
}  // namespace ucfs
