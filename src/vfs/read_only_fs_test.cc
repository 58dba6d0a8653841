#include "ucfs/vfs/read_only_fs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "test_support.h"

namespace ucfs {
namespace {

// The read-only mount's answers, as the kernel would ask for them.
class ReadOnlyFsTest : public ::testing::Test {
 protected:
  ReadOnlyFs fs_{testing::SmallView()};

  InodeId Ino(InodeId parent, const char* name) {
    auto st = fs_.Lookup(parent, name);
    EXPECT_TRUE(st.ok()) << name << ": " << st.status().ToString();
    return st.ok() ? st->st_ino : 0;
  }
};

TEST_F(ReadOnlyFsTest, LooksUpAndStatsLikeAFileSystem) {
  auto latest = fs_.Lookup(kRootInode, "latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_TRUE(S_ISREG(latest->st_mode));
  EXPECT_EQ(latest->st_size, 1);
  EXPECT_EQ(latest->st_nlink, 1u);
  auto t = fs_.Lookup(kRootInode, "t");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(S_ISDIR(t->st_mode));
  EXPECT_EQ(fs_.GetAttr(t->st_ino)->st_ino, t->st_ino);
  auto listed = fs_.ReadDir(t->st_ino);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].first, "a");
  EXPECT_EQ((*listed)[0].second.st_ino, Ino(t->st_ino, "a"));
}

TEST_F(ReadOnlyFsTest, ErrorsCarryTheErrnoAKernelExpects) {
  const InodeId latest = Ino(kRootInode, "latest");
  const InodeId t = Ino(kRootInode, "t");
  EXPECT_EQ(fs_.Lookup(kRootInode, "missing").status().posix_errno(), ENOENT);
  EXPECT_EQ(fs_.Lookup(latest, "x").status().posix_errno(), ENOTDIR);
  EXPECT_EQ(fs_.Lookup(kRootInode, std::string(256, 'n')).status().posix_errno(), ENAMETOOLONG);
  EXPECT_EQ(fs_.Lookup(kRootInode, std::string(255, 'n')).status().posix_errno(), ENOENT);
  EXPECT_EQ(fs_.ReadDir(latest).status().posix_errno(), ENOTDIR);
  EXPECT_EQ(fs_.GetAttr(999999).status().posix_errno(), ENOENT);
  EXPECT_EQ(fs_.Open(t, O_RDONLY).status().posix_errno(), EISDIR);
  EXPECT_TRUE(fs_.Open(latest, O_RDONLY).ok());
  for (int flags :
       {O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC, O_RDONLY | O_CREAT, O_WRONLY | O_APPEND}) {
    EXPECT_EQ(fs_.Open(latest, flags).status().posix_errno(), EROFS) << flags;
  }
  EXPECT_EQ(ReadOnlyFs::Refused().posix_errno(), EROFS);
}

// Every change, through the interface the adapter drives, as the kernel
// would send it were the mount not "ro" already.
TEST_F(ReadOnlyFsTest, EveryChangeIsRefused) {
  FileSystem& fs = fs_;
  const InodeId latest = Ino(kRootInode, "latest");
  const InodeId t = Ino(kRootInode, "t");
  const FileSystem::Caller caller;
  FileSystem::SetAttrRequest truncate;
  truncate.size = 0;
  const auto erofs = [](const Status& s) { return s.posix_errno() == EROFS; };
  EXPECT_TRUE(erofs(fs.SetAttr(latest, truncate, -1, &caller).status()));
  EXPECT_TRUE(erofs(fs.Create(t, "c", O_WRONLY, 0644, &caller).status()));
  EXPECT_TRUE(erofs(fs.MakeDir(t, "d", 0755, &caller).status()));
  EXPECT_TRUE(erofs(fs.MakeNode(t, "f", S_IFIFO | 0644, 0, &caller).status()));
  EXPECT_TRUE(erofs(fs.Symlink("a", t, "s", &caller).status()));
  EXPECT_TRUE(erofs(fs.Link(latest, t, "l").status()));
  EXPECT_TRUE(erofs(fs.Unlink(t, "a")));
  EXPECT_TRUE(erofs(fs.RemoveDir(kRootInode, "t")));
  EXPECT_TRUE(erofs(fs.Rename(t, "a", t, "z", 0)));
  EXPECT_TRUE(erofs(fs.SetXattr(latest, "user.x", "v", 0)));
  EXPECT_TRUE(erofs(fs.RemoveXattr(latest, "user.x")));
  auto handle = fs.Open(latest, O_RDONLY);
  ASSERT_TRUE(handle.ok());
  EXPECT_TRUE(erofs(fs.StartWrite(*handle, caller).status()));
  EXPECT_TRUE(erofs(fs.Fallocate(*handle, 0, 0, 4096)));
  // Nothing to sync: ENOSYS, so that the kernel stops asking (fsync(2)
  // and close(2) then succeed without a request).
  EXPECT_EQ(fs.Flush(*handle).posix_errno(), ENOSYS);
  EXPECT_EQ(fs.Fsync(*handle, true).posix_errno(), ENOSYS);
  EXPECT_EQ(fs.FsyncDir(t).posix_errno(), ENOSYS);
  EXPECT_EQ(fs.ReadDir(t)->size(), 2u);  // all as it was
  EXPECT_TRUE(fs.TakeChangedBehind().empty());
}

// The kernel reads without an open once told OPEN is not needed: such a
// read, with no handle, is of the inode's own view file, as an opened one.
TEST_F(ReadOnlyFsTest, ReadsNeedNoOpen) {
  const InodeId latest = Ino(kRootInode, "latest");
  auto handle = fs_.Open(latest, O_RDONLY);
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(fs_.ViewFileOf(latest, *handle), latest);
  EXPECT_EQ(fs_.ViewFileOf(latest, FileSystem::Handle{}), latest);
  EXPECT_TRUE(handle->keep_cache);  // the file never changes
  EXPECT_LT(handle->ReadFd(), 0);
}

TEST(ReadOnlyFs, SourceLinksAreLinks) {
  const std::string src = testing::FreshTempDir("read_only_fs_links");
  std::filesystem::create_directories(src);
  testing::WriteFile(src + "/target", "bytes");
  std::filesystem::create_symlink("target", src + "/link");
  auto view = std::make_shared<View>(*Env::Posix(), 0);
  view->BackRootBy(src);
  ReadOnlyFs fs(view);
  auto st = fs.Lookup(kRootInode, "link");
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(S_ISLNK(st->st_mode));
  EXPECT_EQ(st->st_size, 6);
  EXPECT_EQ(*fs.ReadLink(st->st_ino), "target");
  EXPECT_EQ(fs.Open(st->st_ino, O_RDONLY).status().posix_errno(), ELOOP);
  auto file = fs.Lookup(kRootInode, "target");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(fs.ReadLink(file->st_ino).status().posix_errno(), EINVAL);
}

}  // namespace
}  // namespace ucfs
