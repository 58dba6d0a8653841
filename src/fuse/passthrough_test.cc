#include "fuse/passthrough.h"

#include <gtest/gtest.h>

#include <vector>

namespace ucfs::fuse {
namespace {

using Handle = FileSystem::Handle;
using WholeFile = FileSystem::WholeFile;

// The kernel's side, as the table calls it: ids handed out, and given back.
struct FakeKernel {
  int next = 100;
  std::vector<int> registered_fds;
  std::vector<int> closed;
  bool refuse = false;
  PassthroughTable::Register Reg() {
    return [this](int fd) {
      registered_fds.push_back(fd);
      return refuse ? 0 : next++;
    };
  }
  PassthroughTable::Unregister Unreg() {
    return [this](int id) { closed.push_back(id); };
  }
};

WholeFile Source(uint32_t index) { return WholeFile{-1, index}; }
WholeFile Fd(int fd) { return WholeFile{fd, std::nullopt}; }
Handle WithFd(int fd) {
  Handle h;
  h.fd = fd;
  return h;
}

// A source is registered once for the mount, whatever inodes show it (a
// rank file and its copies), and never given back before the unmount.
TEST(PassthroughTable, ASourceIsRegisteredOnceAndKept) {
  PassthroughTable table;
  FakeKernel kernel;
  Handle a, b, c;
  EXPECT_EQ(table.Start(10, &a, Source(3), 7, kernel.Reg()), 100);
  EXPECT_EQ(table.Start(10, &b, Source(3), 7, kernel.Reg()), 100);
  EXPECT_EQ(table.Start(11, &c, Source(3), 7, kernel.Reg()), 100);  // a copy
  EXPECT_EQ(kernel.registered_fds, std::vector<int>{7});
  EXPECT_EQ(table.passthrough_handles(), 3u);
  for (auto [ino, h] : {std::pair{10, &a}, {10, &b}, {11, &c}}) table.End(ino, h, kernel.Unreg());
  EXPECT_TRUE(kernel.closed.empty());
  EXPECT_EQ(table.passthrough_handles(), 0u);
  Handle d;
  EXPECT_EQ(table.Start(10, &d, Source(3), 7, kernel.Reg()), 100);
  EXPECT_EQ(kernel.registered_fds.size(), 1u);
}

// An upper file's backing file is shared by every open of its inode (the
// kernel refuses two) and given back with the last of them.
TEST(PassthroughTable, AnUpperFilesBackingGoesWithItsLastHandle) {
  PassthroughTable table;
  FakeKernel kernel;
  Handle w = WithFd(20), r = WithFd(21);
  EXPECT_EQ(table.Start(5, &w, Fd(20), -1, kernel.Reg()), 100);
  EXPECT_EQ(table.Start(5, &r, Fd(21), -1, kernel.Reg()), 100);
  EXPECT_EQ(kernel.registered_fds, std::vector<int>{20});
  table.End(5, &w, kernel.Unreg());
  EXPECT_TRUE(kernel.closed.empty());
  table.End(5, &r, kernel.Unreg());
  EXPECT_EQ(kernel.closed, std::vector<int>{100});
  Handle again = WithFd(22);
  EXPECT_EQ(table.Start(5, &again, Fd(22), -1, kernel.Reg()), 101);
}

// Opens the daemon serves and opens the kernel serves never mix on one
// inode: the kernel would fail the second kind (EIO).
TEST(PassthroughTable, AnInodeIsServedOneWayWhileOpen) {
  PassthroughTable table;
  FakeKernel kernel;
  Handle view_file, upper = WithFd(30), later = WithFd(31);
  // A view file's handle (nothing whole), then, copied up, a whole file:
  // served by the daemon while the first is open.
  EXPECT_EQ(table.Start(8, &view_file, std::nullopt, -1, kernel.Reg()), 0);
  EXPECT_EQ(table.Start(8, &upper, Fd(30), -1, kernel.Reg()), 0);
  EXPECT_TRUE(kernel.registered_fds.empty());
  table.End(8, &view_file, kernel.Unreg());
  table.End(8, &upper, kernel.Unreg());
  EXPECT_EQ(table.Start(8, &later, Fd(31), -1, kernel.Reg()), 100);
  // Made set-id while open through passthrough: its next open has no other
  // way the kernel allows.
  Handle setid = WithFd(32);
  EXPECT_EQ(table.Start(8, &setid, std::nullopt, -1, kernel.Reg()), 100);
  Handle no_fd;
  EXPECT_EQ(table.Start(8, &no_fd, std::nullopt, -1, kernel.Reg()), 0);
}

// Refused by the kernel, or a source that failed its check: served by the
// daemon (whose reads of a changed source fail); a refused source is not
// asked again.
TEST(PassthroughTable, RefusalsFallBackToTheDaemon) {
  PassthroughTable table;
  FakeKernel kernel;
  kernel.refuse = true;
  Handle a, b, c;
  EXPECT_EQ(table.Start(1, &a, Source(0), 4, kernel.Reg()), 0);
  EXPECT_EQ(table.Start(2, &b, Source(0), 4, kernel.Reg()), 0);
  EXPECT_EQ(kernel.registered_fds.size(), 1u);
  kernel.refuse = false;
  EXPECT_EQ(table.Start(3, &c, Source(1), -5, kernel.Reg()), 0);  // changed: -EIO
  EXPECT_EQ(kernel.registered_fds.size(), 1u);
  EXPECT_EQ(table.passthrough_handles(), 0u);
}

}  // namespace
}  // namespace ucfs::fuse
