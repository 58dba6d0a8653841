#include "ucfs/base/counting_env.h"

#include <gtest/gtest.h>

#include <chrono>

namespace ucfs {
namespace {

std::shared_ptr<MemEnv> Files() {
  auto mem = std::make_shared<MemEnv>();
  mem->WriteFile("/ck/latest", "global_step4");
  mem->WriteFile("/ck/global_step4/a.pt", std::string(100, 'a'));
  mem->WriteFile("/ck/global_step4/b.pt", std::string(7, 'b'));
  return mem;
}

// Each kind of operation is counted as what it asks of the Env below, and a
// confined Env adds to the same counts.
TEST(CountingEnv, CountsEachKindAndTheConfinedEnvsToo) {
  CountingEnv env(Files());
  ASSERT_TRUE(env.ListDir("/ck/global_step4").ok());
  ASSERT_TRUE(env.Stat("/ck/latest").ok());
  EXPECT_FALSE(env.Stat("/ck/missing").ok());  // a failed stat is a round trip too
  auto file = env.Open("/ck/global_step4/a.pt");
  ASSERT_TRUE(file.ok());
  std::string buf(64, '\0');
  size_t got = 0;
  ASSERT_TRUE((*file)->Read(90, buf.size(), buf.data(), &got).ok());
  EXPECT_EQ(got, 10u);
  ASSERT_TRUE((*file)->Stat().ok());
  auto confined = env.Confine("/ck");
  ASSERT_TRUE(confined.ok()) << confined.status().ToString();
  auto small = (*confined)->ReadSmallFile("/ck/global_step4/b.pt");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small, std::string(7, 'b'));
  const EnvCounts c = env.counts();
  EXPECT_EQ(c.opens, 2u);
  EXPECT_EQ(c.stats, 3u);  // two by path, one of the open file
  EXPECT_EQ(c.fstats, 1u);
  EXPECT_EQ(c.listings, 1u);
  EXPECT_EQ(c.others, 1u);  // Confine
  EXPECT_EQ(c.metadata(), 7u);
  EXPECT_GE(c.reads, 2u);
  EXPECT_EQ(c.bytes_read, 10u + 7u);
  env.Reset();
  EXPECT_EQ(env.counts().metadata(), 0u);
  EXPECT_EQ(env.counts().bytes_read, 0u);
  EXPECT_EQ(env.counts().fstats, 0u);
}

// The delay is paid by metadata operations only, each of them.
TEST(CountingEnv, DelaysMetadataNotReads) {
  const auto delay = std::chrono::milliseconds(20);
  CountingEnv env(Files(), delay);
  auto file = env.Open("/ck/global_step4/a.pt");
  ASSERT_TRUE(file.ok());
  const auto start = std::chrono::steady_clock::now();
  std::string buf(100, '\0');
  size_t got = 0;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*file)->Read(0, buf.size(), buf.data(), &got).ok());
  const auto reads = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(env.Stat("/ck/latest").ok());
  ASSERT_TRUE(env.ListDir("/ck").ok());
  const auto all = std::chrono::steady_clock::now() - start;
  EXPECT_LT(reads, delay);    // five reads, no delay among them
  EXPECT_GE(all, 2 * delay);  // a stat and a listing, each delayed
}

}  // namespace
}  // namespace ucfs
