#include "ucfs/checkpoint/index.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs {
namespace {

// Counts the rank files (*.pt) opened through it.
class CountingEnv final : public Env {
 public:
  explicit CountingEnv(Env& base) : base_(base) {}
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
  CountingEnv env(mem);
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

}  // namespace
}  // namespace ucfs
