#include "fuse/io_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

namespace ucfs::fuse {
namespace {

using Range = ReadAhead::Range;
constexpr uint64_t W = ReadAhead::kWindow;

// A file read from start to end in 1 MiB requests: its first two windows at
// once, then each next window as the reads cross into the one before it.
TEST(ReadAhead, TwoWindowsFirstThenOneAheadOfEachCrossing) {
  ReadAhead ahead;
  const uint64_t r = 1 << 20;
  EXPECT_EQ(ahead.Next(7, 0, r), (Range{0, 2 * W}));
  EXPECT_EQ(ahead.Next(7, r, r), std::nullopt);
  EXPECT_EQ(ahead.Next(7, W - r, r), (Range{2 * W, W}));  // its end reaches window 1
  EXPECT_EQ(ahead.Next(7, W, r), std::nullopt);
  EXPECT_EQ(ahead.Next(7, 2 * W - r, r), (Range{3 * W, W}));
  // Another file starts its own, where its first read is (a loader seeking
  // to a tensor).
  EXPECT_EQ(ahead.Next(8, 5 * W + 3, r), (Range{5 * W + 3, 2 * W}));
  // A read spanning several windows asks for the one after its end.
  EXPECT_EQ(ahead.Next(8, 6 * W, 3 * W), (Range{10 * W, W}));
}

TEST(DirectWrites, WriteOnlyOpensOfFilesWithNoSetIdBits) {
  EXPECT_TRUE(DirectWrites(true, O_WRONLY | O_CREAT | O_TRUNC, S_IFREG | 0644));
  EXPECT_FALSE(DirectWrites(false, O_WRONLY, S_IFREG | 0644));  // --no-direct-writes
  EXPECT_FALSE(DirectWrites(true, O_RDWR, S_IFREG | 0644));     // may be mmap'd
  EXPECT_FALSE(DirectWrites(true, O_RDONLY, S_IFREG | 0644));
  EXPECT_FALSE(DirectWrites(true, O_WRONLY, S_IFREG | 04755));  // the kernel clears set-id bits
  EXPECT_FALSE(DirectWrites(true, O_WRONLY, S_IFREG | 02755));  // on buffered writes only
}

}  // namespace
}  // namespace ucfs::fuse
