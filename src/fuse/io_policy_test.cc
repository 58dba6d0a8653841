#include "fuse/io_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "fuse/libfuse.h"

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

TEST(ReadAhead, AsksForNothingWhenPrefetchIsOff) {
  ReadAhead off(/*enabled=*/false);
  EXPECT_EQ(off.Next(7, 0, 1 << 20), std::nullopt);
  EXPECT_EQ(off.Next(7, W - 1, 2), std::nullopt);
}

// Reads fit a pipe with room for the header and 14 buffers' pages, up to
// the kernel's 1 MiB.
TEST(MaxReadForPipe, FitsThePipeUpToAMebibyte) {
  EXPECT_EQ(MaxReadForPipe(1 << 20), (1u << 20) - (64u << 10));
  EXPECT_EQ(MaxReadForPipe(256 << 10), 192u << 10);
  EXPECT_EQ(MaxReadForPipe(16 << 20), (1u << 20) - (64u << 10));  // max_pages
  EXPECT_EQ(MaxReadForPipe(0), (1u << 20) - (64u << 10));         // unread: the default
  EXPECT_EQ(MaxReadForPipe(64 << 10), (1u << 20) - (64u << 10));  // implausible
}

TEST(MountDevice, TheLastMountAtThePointInMountinfo) {
  const std::string info =
      "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "36 22 0:52 / /mnt/run7 rw,nosuid shared:9 - fuse.ucfs /ckpt/run7 ro\n"
      "37 22 0:53 / /mnt/run70 rw shared:10 - fuse.ucfs /ckpt/run70 ro\n"
      "38 36 0:54 / /mnt/run7 rw shared:11 - fuse.ucfs /ckpt/run7 rw\n";
  EXPECT_EQ(MountDevice(info, "/mnt/run7"), "0:54");  // mounted over the first
  EXPECT_EQ(MountDevice(info, "/mnt/run70"), "0:53");
  EXPECT_EQ(MountDevice(info, "/mnt"), std::nullopt);
  EXPECT_EQ(MountDevice("", "/mnt/run7"), std::nullopt);
  EXPECT_EQ(MountDevice("garbage\n", "/mnt/run7"), std::nullopt);
}

TEST(DirectWrites, WriteOnlyOpensOfFilesWithNoSetIdBits) {
  EXPECT_TRUE(DirectWrites(true, O_WRONLY | O_CREAT | O_TRUNC, S_IFREG | 0644));
  EXPECT_FALSE(DirectWrites(false, O_WRONLY, S_IFREG | 0644));  // --no-direct-writes
  EXPECT_FALSE(DirectWrites(true, O_RDWR, S_IFREG | 0644));     // may be mmap'd
  EXPECT_FALSE(DirectWrites(true, O_RDONLY, S_IFREG | 0644));
  EXPECT_FALSE(DirectWrites(true, O_WRONLY, S_IFREG | 04755));  // the kernel clears set-id bits
  EXPECT_FALSE(DirectWrites(true, O_WRONLY, S_IFREG | 02755));  // on buffered writes only
}

// A view file keeps its pages while it is the same view file; an upper
// file is read fresh, and written past the page cache when DirectWrites.
TEST(CachingOf, ViewFilesKeepPagesUpperWritersGoDirect) {
  const OpenCaching none{};
  const OpenCaching keep{true, false};
  const OpenCaching direct{false, true};
  EXPECT_EQ(CachingOf(true, O_RDONLY, false, std::nullopt, true), keep);
  EXPECT_EQ(CachingOf(true, O_RDONLY, false, std::nullopt, false), none);  // made anew
  EXPECT_EQ(CachingOf(true, O_RDONLY, true, S_IFREG | 0644, true), none);
  EXPECT_EQ(CachingOf(true, O_WRONLY, true, S_IFREG | 0644, false), direct);
  EXPECT_EQ(CachingOf(false, O_WRONLY, true, S_IFREG | 0644, false), none);
  EXPECT_EQ(CachingOf(true, O_WRONLY, true, S_IFREG | 04755, false), none);
  EXPECT_EQ(CachingOf(true, O_WRONLY, true, std::nullopt, false), none);  // fstat failed
}

TEST(WantedCapabilities, SpliceAndWhatEachKindOfMountAsks) {
  const unsigned all = ~0u;
  const unsigned splice = FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
  const unsigned writable = FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_SPLICE_READ | FUSE_CAP_DONT_MASK;
  const unsigned defaults =
      FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_ASYNC_READ;
  // Read-only: splice out, pages kept across opens, nothing of a writer's.
  const unsigned ro = WantedCapabilities(all, defaults, true, true);
  EXPECT_EQ(ro & splice, splice);
  EXPECT_EQ(ro & writable, 0u);
  EXPECT_EQ(ro & FUSE_CAP_AUTO_INVAL_DATA, 0u);
  EXPECT_NE(ro & FUSE_CAP_ASYNC_READ, 0u);  // libfuse's defaults otherwise kept
  // Writable: splice in too, O_TRUNC opens, the umask; no writeback cache.
  const unsigned rw = WantedCapabilities(all, defaults, true, false);
  EXPECT_EQ(rw & (splice | writable), splice | writable);
  EXPECT_EQ(rw & FUSE_CAP_WRITEBACK_CACHE, 0u);
  // --no-splice: neither way out, even where libfuse wanted it.
  EXPECT_EQ(WantedCapabilities(all, defaults | splice, false, true) & splice, 0u);
  EXPECT_EQ(WantedCapabilities(all, defaults | splice, false, false) & splice, 0u);
  // Only what the kernel offers.
  EXPECT_EQ(WantedCapabilities(0, 0, true, false), 0u);
  EXPECT_EQ(WantedCapabilities(FUSE_CAP_SPLICE_WRITE, 0, true, true), FUSE_CAP_SPLICE_WRITE);
}

TEST(SkipsOpens, ReadOnlyMountsOnKernelsThatAllowIt) {
  EXPECT_TRUE(SkipsOpens(FUSE_CAP_NO_OPEN_SUPPORT, true));
  EXPECT_FALSE(SkipsOpens(FUSE_CAP_NO_OPEN_SUPPORT, false));  // handles hold upper fds
  EXPECT_FALSE(SkipsOpens(0, true));
  // A backing file is given with an OPEN's reply: with passthrough, opens come.
  EXPECT_FALSE(SkipsOpens(FUSE_CAP_NO_OPEN_SUPPORT, true, /*passthrough=*/true));
}

// Passthrough needs all three: asked for, offered by the kernel, and the
// privilege to register backing files; libfuse < 3.16 has none of it.
TEST(UsesPassthrough, OnlyWhereEverythingAllowsIt) {
  const unsigned cap = PassthroughCapability();
  if (cap == 0) {
    EXPECT_FALSE(UsesPassthrough(~0u, true, true));  // built against libfuse < 3.16
    EXPECT_EQ(WantedCapabilities(~0u, 0, true, true, true), WantedCapabilities(~0u, 0, true, true));
    return;
  }
  EXPECT_TRUE(UsesPassthrough(cap, true, true));
  EXPECT_FALSE(UsesPassthrough(cap, false, true));  // --no-passthrough
  EXPECT_FALSE(UsesPassthrough(cap, true, false));  // no CAP_SYS_ADMIN
  EXPECT_FALSE(UsesPassthrough(~cap, true, true));  // the kernel offers none
  EXPECT_NE(WantedCapabilities(~0u, 0, true, true, true) & cap, 0u);
  EXPECT_NE(WantedCapabilities(~0u, 0, true, false, true) & cap, 0u);
  EXPECT_EQ(WantedCapabilities(~0u, 0, true, false, false) & cap, 0u);
  EXPECT_EQ(WantedCapabilities(~cap, 0, true, false, true) & cap, 0u);
  // Never with the writeback cache, which the kernel refuses it beside.
  EXPECT_EQ(WantedCapabilities(~0u, FUSE_CAP_WRITEBACK_CACHE, true, false, true) &
                FUSE_CAP_WRITEBACK_CACHE,
            0u);
}

}  // namespace
}  // namespace ucfs::fuse
