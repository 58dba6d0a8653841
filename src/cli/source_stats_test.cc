#include "cli/source_stats.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace ucfs::cli {
namespace {

TEST(SourceStats, TheDelayIsWholeMillisecondsUpToTenSeconds) {
  EXPECT_EQ(*MetadataDelayOf(nullptr), std::chrono::milliseconds(0));
  EXPECT_EQ(*MetadataDelayOf(""), std::chrono::milliseconds(0));
  EXPECT_EQ(*MetadataDelayOf("0"), std::chrono::milliseconds(0));
  EXPECT_EQ(*MetadataDelayOf("1"), std::chrono::milliseconds(1));
  EXPECT_EQ(*MetadataDelayOf("10000"), std::chrono::milliseconds(10000));
  // A typo is refused, never taken as some other delay.
  for (const char* bad : {"-1", "1.5", "1ms", " 1", "10001", "99999999999999999999999"}) {
    auto delay = MetadataDelayOf(bad);
    ASSERT_FALSE(delay.ok()) << bad;
    EXPECT_NE(delay.status().message().find(kMetadataDelayVariable), std::string::npos);
  }
}

TEST(SourceStats, CountsAreDescribedByKind) {
  EnvCounts c;
  c.opens = 2;
  c.stats = 6;
  c.fstats = 2;
  c.listings = 2;
  c.others = 3;
  c.reads = 4;
  c.bytes_read = 13'670'028;
  EXPECT_EQ(DescribeCounts(c),
            "2 opens, 6 stats (2 of open files), 2 listings, 3 path walks, 4 reads (13.7 MB)");
  c.bytes_read = 56;
  EXPECT_EQ(DescribeCounts(c),
            "2 opens, 6 stats (2 of open files), 2 listings, 3 path walks, 4 reads (56 B)");
}

// Nothing is wrapped unless asked: a mount at the default verbosity plans
// on the host itself.
TEST(SourceStats, CountsOnlyAtVerboseOrWithADelay) {
  ::unsetenv(kMetadataDelayVariable);
  auto quiet = SourceCounter(0);
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(*quiet, nullptr);
  auto verbose = SourceCounter(1);
  ASSERT_TRUE(verbose.ok());
  ASSERT_NE(*verbose, nullptr);
  ASSERT_TRUE((*verbose)->Stat("/").ok());
  EXPECT_EQ((*verbose)->counts().stats, 1u);

  ::setenv(kMetadataDelayVariable, "1", 1);
  auto delayed = SourceCounter(0);
  ::unsetenv(kMetadataDelayVariable);
  ASSERT_TRUE(delayed.ok());
  ASSERT_NE(*delayed, nullptr);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE((*delayed)->Stat("/").ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1));

  ::setenv(kMetadataDelayVariable, "soon", 1);
  EXPECT_FALSE(SourceCounter(0).ok());
  ::unsetenv(kMetadataDelayVariable);
}

}  // namespace
}  // namespace ucfs::cli
