// The modes and times the overlay keeps: its upper root's, the set-id bits
// a write clears, a directory made over a removed view directory, the times
// of directories a copy-up lands in, and the atime only listings move.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "test_support.h"
#include "ucfs/overlay/overlay.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

std::string TempUpper(const std::string& name) { return testing::FreshTempDir("overlay_" + name); }

}  // namespace
}  // namespace ucfs

namespace ucfs {
namespace {

TEST(Overlay, MakesItsUpperRootOpenToAllWhateverTheUmask) {
  const mode_t old = ::umask(077);
  const std::string upper = testing::FreshTempDir("overlay_umask");
  auto o = Overlay::Open(upper, testing::SmallView(), *Env::Posix());
  ::umask(old);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(testing::StatOf(upper).st_mode & 07777, 0755u);
}

// The mode a write or truncation leaves, by who makes it (the kernel's
// setattr_should_drop_suidgid).
TEST(Overlay, ModeAfterWriteClearsWhatTheKernelWould) {
  Overlay::Caller alice{1001, 1001, 022, [] { return Overlay::Credentials{{1001, 3000}, false}; }};
  Overlay::Caller root{0, 0, 022, {}};
  Overlay::Caller capable{1001, 1001, 022, [] { return Overlay::Credentials{{}, true}; }};
  Overlay::Caller plain{1003, 3001, 022, {}};  // no credentials asked: uid 0 only is capable
  const mode_t f = S_IFREG;
  EXPECT_EQ(ModeAfterWrite(f | 06777, 0, alice), f | 0777);
  EXPECT_EQ(ModeAfterWrite(f | 06777, 0, root), f | 06777);
  EXPECT_EQ(ModeAfterWrite(f | 06777, 0, capable), f | 06777);
  // S_ISGID without group execute: kept for a member of the file's group
  // (supplementary or primary), cleared for anyone else.
  EXPECT_EQ(ModeAfterWrite(f | 02666, 3000, alice), f | 02666);
  EXPECT_EQ(ModeAfterWrite(f | 02666, 1001, alice), f | 02666);
  EXPECT_EQ(ModeAfterWrite(f | 02666, 3000, plain), f | 0666);
  EXPECT_EQ(ModeAfterWrite(f | 02676, 3000, alice), f | 0676);
  // Only regular files; nothing to clear asks for no credentials.
  EXPECT_EQ(ModeAfterWrite(S_IFDIR | 06777, 0, alice), S_IFDIR | 06777);
  Overlay::Caller asked{1001, 1001, 022, []() -> Overlay::Credentials {
                          ADD_FAILURE() << "credentials asked for";
                          return {};
                        }};
  EXPECT_EQ(ModeAfterWrite(f | 0777, 0, asked), f | 0777);
}

// A directory made where a view directory was removed holds nothing of the
// view: it is no merge, and renames like any new one.
TEST(Overlay, ADirectoryReplacingARemovedViewDirectoryIsItsOwn) {
  auto view = testing::SmallView();
  auto o = Overlay::Open(TempUpper("replaced_dir"), view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE((*o)->Unlink("d/x").ok());
  ASSERT_TRUE((*o)->RemoveDir("d").ok());
  ASSERT_TRUE((*o)->MakeDir("d", 0755).ok());
  auto d = (*o)->Lookup("d");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->in_upper);
  EXPECT_TRUE(d->covers_view);
  EXPECT_EQ(d->lower, 0u);
  testing::Write(**o, "d/mine", "m", O_CREAT);
  ASSERT_TRUE((*o)->Rename("d", "moved").ok());
  EXPECT_EQ(testing::Snapshot(**o, *view).count("d"), 0u);  // the view's stays hidden
  EXPECT_EQ(*testing::Snapshot(**o, *view).at("moved/mine"), "m");
  EXPECT_EQ(testing::Snapshot(**o, *view).count("moved/x"), 0u);
  // A directory holding the view's entries still cannot move.
  EXPECT_EQ((*o)->Rename("t", "t2").posix_errno(), EXDEV);
}

// A copy-up changes nothing the mount shows of the directories it touches
// (as overlayfs restores a copy-up's parent's times), and leaves nothing in
// the upper root.
TEST(Overlay, CopyUpKeepsTheTimesOfTheDirectoriesItLandsIn) {
  auto view = std::make_shared<View>(*Env::Posix(), int64_t{1600000000} * 1000000000);
  const InodeId t = *view->AddDirectory(kRootInode, "t");
  const InodeId u = *view->AddDirectory(t, "u");
  ASSERT_TRUE(view->AddFile(u, "f", std::make_shared<InlineContent>("F")).ok());
  ASSERT_TRUE(view->AddFile(t, "g", std::make_shared<InlineContent>("G")).ok());
  const std::string upper = TempUpper("copy_up_parent_times");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  testing::SetTimes(upper, 1000, 2000);
  // Two directories made on the way, each as the view shows it.
  ASSERT_TRUE((*o)->PrepareChange("t/u/f").ok());
  EXPECT_EQ(testing::StatOf(upper).st_mtim.tv_sec, 2000);
  EXPECT_EQ(testing::StatOf(upper).st_atim.tv_sec, 1000);
  EXPECT_EQ(testing::StatOf(upper + "/t").st_mtim.tv_sec, 1600000000);
  EXPECT_EQ(testing::StatOf(upper + "/t/u").st_mtim.tv_sec, 1600000000);
  EXPECT_EQ((*o)->TakeCopiedUpDirs(), (std::vector<std::string>{"t", "t/u"}));
  EXPECT_TRUE((*o)->TakeCopiedUpDirs().empty());
  // Into a directory already there, by a copy written apart.
  testing::SetTimes(upper + "/t", 3000, 4000);
  auto copy = (*o)->PrepareCopyAside("t/g");
  ASSERT_TRUE(copy.ok() && copy->has_value());
  ASSERT_TRUE((*copy)->Run().ok());
  ASSERT_TRUE((*o)->Adopt("t/g", std::move(**copy)).ok());
  EXPECT_TRUE((*o)->Lookup("t/g")->in_upper);
  EXPECT_EQ(testing::StatOf(upper + "/t").st_mtim.tv_sec, 4000);
  EXPECT_EQ(testing::StatOf(upper + "/t").st_atim.tv_sec, 3000);
  EXPECT_EQ(testing::StatOf(upper).st_mtim.tv_sec, 2000);
  for (const auto& e : fs::directory_iterator(upper)) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".wh.")) << e.path();
  }
  // A copy made empty for a truncation keeps the atime it was shown with.
  ASSERT_TRUE(view->AddFile(t, "e", std::make_shared<InlineContent>("E")).ok());
  auto fd = (*o)->OpenWrite("t/e", O_WRONLY | O_TRUNC, 0);
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(testing::StatOf(upper + "/t/e").st_atim.tv_sec, 1600000000);
  EXPECT_EQ(testing::StatOf(upper + "/t/e").st_size, 0);
}

// The overlay's own looks into a directory (is it empty? what is there to
// clear?) are no reading of it: its atime stays. A listing asked for moves
// it as the upper file system moves a read directory's.
TEST(Overlay, OnlyListingsAskedForMoveADirectorysAtime) {
  auto view = testing::SmallView();
  const std::string upper = TempUpper("listing_atime");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE((*o)->MakeDir("e", 0755).ok());
  testing::Write(**o, "e/f", "f", O_CREAT);
  auto old_atime = [&] { testing::SetTimes(upper + "/e", 1000, 2000); };
  old_atime();
  ASSERT_TRUE((*o)->Lookup("e/f").ok());
  EXPECT_EQ((*o)->RemoveDir("e").posix_errno(), ENOTEMPTY);
  ASSERT_TRUE((*o)->ReadDir("e").ok());
  EXPECT_EQ(testing::StatOf(upper + "/e").st_atim.tv_sec, 1000);
  // Whether this file system moves atimes at all (relatime: an atime
  // older than the mtime moves).
  {
    auto listed = fs::directory_iterator(upper + "/e");
    (void)listed;
  }
  if (testing::StatOf(upper + "/e").st_atim.tv_sec == 1000)
    GTEST_SKIP() << "atimes do not move here";
  old_atime();
  ASSERT_TRUE((*o)->ReadDir("e", /*reading=*/true).ok());
  EXPECT_NE(testing::StatOf(upper + "/e").st_atim.tv_sec, 1000);
}

}  // namespace
}  // namespace ucfs
