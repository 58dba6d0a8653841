// What both file systems a mount serves answer alike, through the
// FileSystem interface the FUSE adapter drives: a read-only mount
// (ReadOnlyFs) and a writable one (OverlayFs) over the same view, before
// anything is written, are the same tree to lookup, readdir, readlink, the
// xattr calls and an open for reading.
#include "ucfs/vfs/file_system.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>

#include "test_support.h"
#include "ucfs/overlay/overlay_fs.h"
#include "ucfs/vfs/read_only_fs.h"

namespace ucfs {
namespace {

// A view of a source directory (a file and a link to it) with built files
// beside it, one of them with the view's extended attributes.
std::shared_ptr<View> TestView(const std::string& src) {
  std::filesystem::create_directories(src);
  testing::WriteFile(src + "/target", "bytes");
  std::filesystem::create_symlink("target", src + "/link");
  auto view = std::make_shared<View>(*Env::Posix(), 0);
  view->BackRootBy(src);
  EXPECT_TRUE(view->AddFile(kRootInode, "latest", std::make_shared<InlineContent>("t")).ok());
  const InodeId t = *view->AddDirectory(kRootInode, "t");
  const std::vector<Xattr> xattrs = {{"user.ucfs.shape", "[4]"}, {"user.ucfs.dtype", "float32"}};
  EXPECT_TRUE(view->AddFile(t, "a", std::make_shared<InlineContent>("A-view"), xattrs).ok());
  EXPECT_TRUE(view->AddFile(t, "b", std::make_shared<InlineContent>("B-view")).ok());
  return view;
}

struct ReadOnly {
  static std::unique_ptr<FileSystem> Make(std::shared_ptr<View> view, const std::string& dir) {
    return std::make_unique<ReadOnlyFs>(std::move(view), dir);
  }
};

struct Writable {
  static std::unique_ptr<FileSystem> Make(std::shared_ptr<View> view, const std::string& dir) {
    auto overlay = Overlay::Open(dir + "/upper", view, *Env::Posix());
    EXPECT_TRUE(overlay.ok()) << overlay.status().ToString();
    if (!overlay.ok()) return nullptr;
    return std::make_unique<OverlayFs>(std::move(overlay).value(), std::move(view));
  }
};

template <typename Kind>
class FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = testing::FreshTempDir(std::string("file_system_") + test->type_param() + "_" +
                                 test->name());
    std::filesystem::create_directories(dir_ + "/upper");
    fs_ = Kind::Make(TestView(dir_ + "/src"), dir_);
    ASSERT_NE(fs_, nullptr);
  }

  InodeId Ino(InodeId parent, const char* name) {
    auto st = fs_->Lookup(parent, name);
    EXPECT_TRUE(st.ok()) << name << ": " << st.status().ToString();
    return st.ok() ? st->st_ino : 0;
  }

  std::string dir_;
  std::unique_ptr<FileSystem> fs_;
};

using Kinds = ::testing::Types<ReadOnly, Writable>;
class KindNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, ReadOnly> ? "ReadOnly" : "Writable";
  }
};
TYPED_TEST_SUITE(FileSystemTest, Kinds, KindNames);

TYPED_TEST(FileSystemTest, LooksUpListsAndStatsTheView) {
  FileSystem& fs = *this->fs_;
  auto latest = fs.Lookup(kRootInode, "latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_TRUE(S_ISREG(latest->st_mode));
  EXPECT_EQ(latest->st_size, 1);
  EXPECT_EQ(latest->st_nlink, 1u);
  const InodeId t = this->Ino(kRootInode, "t");
  EXPECT_TRUE(S_ISDIR(fs.GetAttr(t)->st_mode));
  EXPECT_EQ(fs.GetAttr(t)->st_ino, t);
  auto listed = fs.ReadDir(t);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].first, "a");
  EXPECT_EQ((*listed)[0].second.st_ino, this->Ino(t, "a"));
  EXPECT_EQ((*listed)[1].first, "b");
  EXPECT_EQ((*listed)[1].second.st_size, 6);
  auto root = fs.ReadDir(kRootInode);
  ASSERT_TRUE(root.ok());
  std::vector<std::string> names;
  for (const auto& [name, st] : *root) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "link", "t", "target"}));
}

TYPED_TEST(FileSystemTest, MissesAndWrongKindsCarryTheKernelsErrnos) {
  FileSystem& fs = *this->fs_;
  const InodeId latest = this->Ino(kRootInode, "latest");
  EXPECT_EQ(fs.Lookup(kRootInode, "missing").status().posix_errno(), ENOENT);
  EXPECT_EQ(fs.Lookup(kRootInode, std::string(256, 'n')).status().posix_errno(), ENAMETOOLONG);
  EXPECT_EQ(fs.Lookup(kRootInode, std::string(255, 'n')).status().posix_errno(), ENOENT);
  EXPECT_EQ(fs.Lookup(latest, "x").status().posix_errno(), ENOTDIR);
  // Nothing was added: a miss stays one, and the kernel may cache it.
  EXPECT_FALSE(fs.MightAppear("missing"));
}

TYPED_TEST(FileSystemTest, OpensViewFilesForReadingAsTheirPieces) {
  FileSystem& fs = *this->fs_;
  const InodeId t = this->Ino(kRootInode, "t");
  const InodeId a = this->Ino(t, "a");
  auto handle = fs.Open(a, O_RDONLY);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  // No real file: the adapter splices the view file's pieces.
  EXPECT_LT(handle->ReadFd(), 0);
  std::vector<ReadPiece> pieces;
  ASSERT_TRUE(fs.view().Plan(fs.ViewFileOf(a, *handle), 0, 64, &pieces).ok());
  std::string bytes;
  for (const ReadPiece& p : pieces) bytes += p.bytes;
  EXPECT_EQ(bytes, "A-view");
  // The view file is what an earlier open saw: its pages may stay cached.
  auto again = fs.Open(a, O_RDONLY);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->keep_cache);
  // A handle opened for reading has nothing to write to (EROFS, EBADF).
  EXPECT_FALSE(fs.StartWrite(*handle, FileSystem::Caller{}).ok());
  fs.Release(a, *again);
  fs.Release(a, *handle);
  EXPECT_EQ(fs.Open(t, O_RDONLY).status().posix_errno(), EISDIR);
}

TYPED_TEST(FileSystemTest, SymlinksAreShownAndReadAsLinks) {
  FileSystem& fs = *this->fs_;
  auto link = fs.Lookup(kRootInode, "link");
  ASSERT_TRUE(link.ok());
  EXPECT_TRUE(S_ISLNK(link->st_mode));
  EXPECT_EQ(*fs.ReadLink(link->st_ino), "target");
  EXPECT_EQ(fs.Open(link->st_ino, O_RDONLY).status().posix_errno(), ELOOP);
  EXPECT_EQ(fs.ReadLink(this->Ino(kRootInode, "target")).status().posix_errno(), EINVAL);
}

TYPED_TEST(FileSystemTest, ShowsTheViewsExtendedAttributes) {
  FileSystem& fs = *this->fs_;
  const InodeId a = this->Ino(this->Ino(kRootInode, "t"), "a");
  EXPECT_EQ(*fs.GetXattr(a, "user.ucfs.shape"), "[4]");
  EXPECT_EQ(*fs.GetXattr(a, "user.ucfs.dtype"), "float32");
  EXPECT_EQ(fs.GetXattr(a, "user.ucfs.numel").status().posix_errno(), ENODATA);
  // The kernel asks for this one before every write.
  EXPECT_EQ(fs.GetXattr(a, "security.capability").status().posix_errno(), ENODATA);
  EXPECT_EQ(*fs.ListXattr(a), std::string("user.ucfs.shape\0user.ucfs.dtype\0", 32));
  EXPECT_EQ(*fs.ListXattr(this->Ino(kRootInode, "latest")), "");
  // Whatever else a file system allows, the view's own stay as they are.
  EXPECT_FALSE(fs.SetXattr(a, "user.ucfs.shape", "[5]", 0).ok());
  EXPECT_FALSE(fs.RemoveXattr(a, "user.ucfs.shape").ok());
  EXPECT_EQ(*fs.GetXattr(a, "user.ucfs.shape"), "[4]");
}

TYPED_TEST(FileSystemTest, ReportsTheSpaceOfARealFileSystem) {
  const struct statvfs sv = this->fs_->StatFs();
  struct statvfs real {};
  ASSERT_EQ(::statvfs(this->dir_.c_str(), &real), 0);
  EXPECT_EQ(sv.f_fsid, real.f_fsid);
  EXPECT_EQ(sv.f_bsize, real.f_bsize);
}

TEST(StatFsOf, AnUnreadablePathIsAnEmptyFileSystemOfUsualShape) {
  const struct statvfs sv = StatFsOf("");
  EXPECT_EQ(sv.f_bsize, 4096u);
  EXPECT_EQ(sv.f_namemax, 255u);
  EXPECT_EQ(sv.f_blocks, 0u);
  EXPECT_EQ(StatFsOf("/nonexistent/ucfs").f_bsize, 4096u);
}

}  // namespace
}  // namespace ucfs
