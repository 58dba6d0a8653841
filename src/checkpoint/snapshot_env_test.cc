// The shared index's Envs on a real fixture (z3_tricky_fp32_ws4, in a
// MemEnv): what discovery asked is recorded, and replayed without asking
// the source again; a rank file changed since is caught where its bytes
// are read.
#include "ucfs/checkpoint/snapshot_env.h"

#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/base/counting_env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs {
namespace {

constexpr char kTagDir[] = "/ck/global_step4";

std::shared_ptr<MemEnv> Fixture() {
  auto mem = std::make_shared<MemEnv>();
  EXPECT_TRUE(
      mem->CopyTreeFrom(testing::FixtureDir("z3_tricky_fp32_ws4") + "/checkpoint", "/ck").ok());
  return mem;
}

// What `ucfs index` makes: discovery recorded, and every rank file
// summarised.
std::shared_ptr<const TagSnapshot> Record(const std::shared_ptr<MemEnv>& mem) {
  RecordingEnv recording(mem, kTagDir);
  auto c = Checkpoint::Open(recording, "/ck");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  auto dir = mem->Stat(kTagDir);
  EXPECT_TRUE(dir.ok());
  auto snapshot = recording.Snapshot("global_step4", dir->identity);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  return std::make_shared<const TagSnapshot>(std::move(snapshot).value());
}

// The Envs and summary source a mount reads a snapshot through.
struct Replay {
  Replay(std::shared_ptr<Env> below, std::shared_ptr<const TagSnapshot> snapshot)
      : env(std::move(below), kTagDir, snapshot), direct(env), source(kTagDir, snapshot, direct) {}
  Result<Checkpoint> Open() {
    CheckpointOptions options;
    options.source = &source;
    return Checkpoint::Open(env, "/ck", options);
  }
  SnapshotEnv env;
  DirectTorchFileSource direct;
  SummarySource source;
};

TEST(SnapshotEnv, ReplaysDiscoveryWithoutTheSourceAndEqualsIt) {
  auto mem = Fixture();
  auto snapshot = Record(mem);
  EXPECT_FALSE(snapshot->listings.empty());
  EXPECT_EQ(snapshot->summaries.size(), 8u);  // 4 optimizer and 4 model-states files
  // Round-tripped through its file, as a mount reads it.
  auto decoded = DecodeTagSnapshot(EncodeTagSnapshot(*snapshot));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  auto replayed = std::make_shared<const TagSnapshot>(std::move(decoded).value());

  auto counting = std::make_shared<CountingEnv>(mem);
  Replay replay(counting, replayed);
  auto c = replay.Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(replay.source.cache_hits(), 8u);
  // Only the root's `latest` is asked of the source: nothing of the tag.
  const EnvCounts asked = counting->counts();
  EXPECT_LE(asked.metadata(), 3u) << asked.opens << " opens, " << asked.stats << " stats, "
                                  << asked.listings << " listings";

  auto plain = Checkpoint::Open(*mem, "/ck");
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(c->params().size(), plain->params().size());
  for (size_t p = 0; p < c->params().size(); ++p) {
    EXPECT_EQ(c->params()[p].name, plain->params()[p].name);
    for (size_t s = 0; s < c->states().size(); ++s) {
      EXPECT_TRUE(testing::FullState(*c, p, s, &replay.env) ==
                  testing::FullState(*plain, p, s, mem.get()))
          << c->params()[p].name;
    }
  }
  ASSERT_EQ(c->sources().size(), plain->sources().size());
  for (size_t i = 0; i < c->sources().size(); ++i) {
    EXPECT_EQ(c->sources()[i].identity, PortableIdentity(plain->sources()[i].identity));
  }
}

// A rank file rewritten after the snapshot (same size, new identity) is
// not read as the snapshot had it: its reads fail, naming it.
TEST(SnapshotEnv, ARankFileChangedSinceIsCaughtAtItsRead) {
  auto mem = Fixture();
  auto snapshot = Record(mem);
  Replay replay(mem, snapshot);
  auto c = replay.Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  SnapshotEnv& env = replay.env;
  {
    SourceFiles reader(env, [&](uint32_t i) { return c->sources()[i]; });
    EXPECT_TRUE(reader.Get(1).ok());
  }
  const std::string& rank1 = c->sources()[1].path;
  mem->WriteFile(rank1, *mem->Contents(rank1));
  SourceFiles reader(env, [&](uint32_t i) { return c->sources()[i]; });
  auto changed = reader.Get(1);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("changed since"), std::string::npos)
      << changed.status().ToString();
  EXPECT_NE(changed.status().ToString().find("zero_pp_rank_1"), std::string::npos)
      << changed.status().ToString();
}

// Outside the tag directory, and for what it did not record, the snapshot
// answers nothing: the Env below does.
TEST(SnapshotEnv, WhatItDoesNotHoldGoesBelow) {
  auto mem = Fixture();
  auto snapshot = std::make_shared<TagSnapshot>();
  snapshot->listings[""] = {{"only", false, false},
                            {"zero_pp_rank_0_mp_rank_00_optim_states.pt", false, false}};
  snapshot->files["ds_config.json"] = "{}";
  SnapshotEnv env(mem, kTagDir, snapshot);
  ASSERT_EQ(env.ListDir(kTagDir)->size(), 2u);
  EXPECT_EQ(*env.ReadSmallFile(std::string(kTagDir) + "/ds_config.json"), "{}");
  EXPECT_EQ(env.ListDir("/ck")->size(), mem->ListDir("/ck")->size());
  EXPECT_EQ(*env.ReadSmallFile("/ck/latest"), *mem->ReadSmallFile("/ck/latest"));
  auto stat = env.Stat(std::string(kTagDir) + "/zero_pp_rank_0_mp_rank_00_optim_states.pt");
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(stat->identity.device, 0u);
  // A path that only starts like the tag directory is not in it.
  EXPECT_FALSE(env.ListDir("/ck/global_step4x").ok());
}

// An entry of the tag directory that its recorded listing lacks is absent
// (the directory's mtime is the one recorded: nothing was made in it since),
// answered without a question to the source.
TEST(SnapshotEnv, WhatItsListingLacksIsAbsent) {
  auto counting = std::make_shared<CountingEnv>(Fixture());
  auto snapshot = std::make_shared<TagSnapshot>();
  snapshot->listings[""] = {{"only", false, false}};
  SnapshotEnv env(counting, kTagDir, snapshot);
  const std::string rank_file = std::string(kTagDir) + "/zero_pp_rank_0_mp_rank_00_optim_states.pt";
  EXPECT_EQ(env.Stat(rank_file).status().posix_errno(), ENOENT);
  EXPECT_EQ(env.Open(rank_file).status().posix_errno(), ENOENT);
  EXPECT_EQ(env.Stat(std::string(kTagDir) + "/latest").status().posix_errno(), ENOENT);
  EXPECT_EQ(counting->counts().metadata(), 0u);
  // Below a subdirectory, and the listed entry itself, the source answers.
  (void)env.Stat(std::string(kTagDir) + "/only");
  (void)env.Stat(std::string(kTagDir) + "/sub/file");
  EXPECT_EQ(counting->counts().stats, 2u);
}

}  // namespace
}  // namespace ucfs
