#include "ucfs/checkpoint/index.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs {
namespace {

// Counts the rank files (*.pt) opened through it.
class RankFileOpenCounter final : public Env {
 public:
  explicit RankFileOpenCounter(Env& base) : base_(base) {}
  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    if (path.ends_with(".pt")) ++opens;
    return base_.Open(path);
  }
  Result<FileStat> Stat(const std::string& path) override { return base_.Stat(path); }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    return base_.ListDir(path);
  }
  std::atomic<int> opens{0};

 private:
  Env& base_;
};

std::string TempDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/ucfs_index_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(TorchFileSummary, EncodingRoundTrips) {
  auto s = SummarizeTorchFile(*Env::Posix(), testing::FixtureDir("z3_bf16_ws2") +
                                                 "/checkpoint/global_step4/"
                                                 "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->small_records.size(), 2u);  // the step tensor, and `version`
  auto d = DecodeSummary(EncodeSummary(*s));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(EncodeSummary(*d), EncodeSummary(*s));
  EXPECT_EQ(d->pickle, s->pickle);
  EXPECT_EQ(d->records.size(), s->records.size());
  std::string bad = EncodeSummary(*s);
  bad.resize(bad.size() - 3);
  EXPECT_FALSE(DecodeSummary(bad).ok());
}

// A second open of an unchanged checkpoint opens no rank file; a changed
// file is read again.
TEST(SummaryIndex, SecondOpenReadsNoShard) {
  MemEnv mem;
  ASSERT_TRUE(
      mem.CopyTreeFrom(testing::FixtureDir("z3_tricky_fp32_ws4") + "/checkpoint", "/ck").ok());
  RankFileOpenCounter env(mem);
  const std::string dir = TempDir("second_open");
  {
    auto index = SummaryIndex::Open(env, dir);
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    CheckpointOptions options;
    options.source = index->get();
    auto c = Checkpoint::Open(env, "/ck", options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ((*index)->cache_hits(), 0u);
    EXPECT_EQ((*index)->cache_misses(), 8u);  // 4 optimizer + 4 model files (frozen params)
    EXPECT_GT(env.opens.load(), 0);
  }
  env.opens = 0;
  auto index = SummaryIndex::Open(env, dir);
  ASSERT_TRUE(index.ok());
  CheckpointOptions options;
  options.source = index->get();
  auto c = Checkpoint::Open(env, "/ck", options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(env.opens.load(), 0);
  EXPECT_EQ((*index)->cache_hits(), 8u);
  auto direct = Checkpoint::Open(mem, "/ck");
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(c->params().size(), direct->params().size());
  EXPECT_EQ(c->scalar_states()[5][0].value, 4.0);

  // Rewriting a shard (same bytes, new identity) makes it miss.
  const std::string rank2 = "/ck/global_step4/zero_pp_rank_2_mp_rank_00_optim_states.pt";
  mem.WriteFile(rank2, *mem.Contents(rank2));
  c = Checkpoint::Open(env, "/ck", options);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(env.opens.load(), 1);
  EXPECT_EQ((*index)->cache_misses(), 1u);
}

TEST(SummaryIndex, UnusableDirectoryIsAnError) {
  auto index = SummaryIndex::Open(*Env::Posix(), "/proc/ucfs-cannot-be-here");
  EXPECT_FALSE(index.ok());
}

// $HOME on a cluster is NFS, GPFS or Lustre: the index goes to local
// storage, per user, and says so.
TEST(PlaceIndex, KeepsTheIndexOffNetworkFileSystems) {
  const int64_t kNfs = 0x6969, kExt4 = 0xEF53, kTmpfs = 0x01021994;
  EXPECT_TRUE(IsNetworkFsType(kNfs));
  EXPECT_TRUE(IsNetworkFsType(0x0BD00BD0));  // Lustre
  EXPECT_TRUE(IsNetworkFsType(0x47504653));  // GPFS
  EXPECT_FALSE(IsNetworkFsType(kExt4));
  EXPECT_FALSE(IsNetworkFsType(kTmpfs));

  auto local = PlaceIndex(std::string("/home/u/.cache/ucfs"),
                          [&](const std::string&) -> Result<int64_t> { return kExt4; });
  EXPECT_EQ(local.dir, "/home/u/.cache/ucfs");
  EXPECT_TRUE(local.note.empty());

  auto fs_of = [&](const std::string& p) -> Result<int64_t> {
    return p.starts_with("/home/") ? kNfs : kTmpfs;
  };
  ::setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
  auto runtime = PlaceIndex(std::string("/home/u/.cache/ucfs"), fs_of);
  EXPECT_EQ(runtime.dir, "/run/user/1234/ucfs");
  EXPECT_NE(runtime.note.find("/home/u/.cache/ucfs is on a network file system"), std::string::npos)
      << runtime.note;
  EXPECT_NE(runtime.note.find("/run/user/1234/ucfs"), std::string::npos) << runtime.note;

  ::unsetenv("XDG_RUNTIME_DIR");
  auto var_tmp = PlaceIndex(std::string("/home/u/.cache/ucfs"), fs_of);
  EXPECT_EQ(var_tmp.dir, "/var/tmp/ucfs-" + std::to_string(::getuid()));
  // A probe that fails (no such path, no permission) keeps what was asked.
  auto unknown = PlaceIndex(std::string("/x"), [](const std::string& p) -> Result<int64_t> {
    return Status::IOError(p);
  });
  EXPECT_EQ(unknown.dir, "/x");
}

TEST(PlaceIndex, StatfsOfAPathNotYetMadeIsItsParentsFileSystem) {
  auto made = StatfsType("/tmp");
  auto missing = StatfsType("/tmp/ucfs-not-made/a/b");
  ASSERT_TRUE(made.ok() && missing.ok());
  EXPECT_EQ(*made, *missing);
}

// Another user's directory (or one anyone may write) in a shared place is
// never used for the index.
TEST(SummaryIndex, RefusesADirectoryOthersMayWrite) {
  const std::string dir = testing::FreshTempDir("index_shared");
  ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  auto index = SummaryIndex::Open(*Env::Posix(), dir);
  ASSERT_FALSE(index.ok());
  EXPECT_NE(index.status().message().find("only it may write"), std::string::npos)
      << index.status().ToString();
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace ucfs
