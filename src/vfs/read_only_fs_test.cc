#include "ucfs/vfs/read_only_fs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "test_support.h"
#include "ucfs/vfs/source_files.h"

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

// The files the kernel may read itself (FUSE passthrough): a source file
// passed through, whole, named by its index of the view's sources, and
// through a graft by the host's index; nothing the view assembles.
TEST(ReadOnlyFs, FilesPassedThroughWholeAreTheirSource) {
  MemEnv env;
  env.WriteFile("/ck/model_states.pt", "model bytes");
  env.WriteFile("/ck/tag/rng_state_0.pth", "rng");
  env.WriteFile("/ck/g/deep.pt", "deep bytes");
  auto view = std::make_shared<View>(env, 0);
  const InodeId model = *view->AddSourceFile(kRootInode, "model_states.pt", "/ck/model_states.pt");
  const InodeId built = *view->AddFile(kRootInode, "built", std::make_shared<InlineContent>("b"));
  const InodeId tag = *view->AddSourceDirectory(kRootInode, "tag", "/ck/tag");
  // A content shorter than its source shows other bytes than the file's.
  const uint32_t short_source = view->AddSource(view->source(0));
  const InodeId cut =
      *view->AddFile(kRootInode, "cut", std::make_shared<SourceContent>(short_source, 5));
  auto graft = view->AddGraft(
      kRootInode, "g",
      [&]() -> Result<View::GraftTarget> {
        auto g = std::make_shared<View>(env, 0);
        EXPECT_TRUE(g->AddSourceFile(kRootInode, "deep.pt", "/ck/g/deep.pt").ok());
        return View::GraftTarget{g, kRootInode};
      },
      0, FileAccess{0755, 0, 0});
  ASSERT_TRUE(graft.ok());
  ReadOnlyFs fs(view);
  const FileSystem::Handle none;

  auto whole = fs.WholeFileOf(model, none);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->fd, -1);
  ASSERT_TRUE(whole->source.has_value());
  EXPECT_EQ(view->source(*whole->source).path, "/ck/model_states.pt");

  const InodeId rng = fs.Lookup(tag, "rng_state_0.pth")->st_ino;
  whole = fs.WholeFileOf(rng, none);
  ASSERT_TRUE(whole && whole->source);
  EXPECT_EQ(view->source(*whole->source).path, "/ck/tag/rng_state_0.pth");

  const InodeId deep = fs.Lookup(*graft, "deep.pt")->st_ino;
  whole = fs.WholeFileOf(deep, none);
  ASSERT_TRUE(whole && whole->source);
  std::vector<ReadPiece> pieces;
  ASSERT_TRUE(view->Plan(deep, 0, 100, &pieces).ok());
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(*whole->source, pieces[0].source);  // the host's index, as reads name it
  EXPECT_EQ(view->source(*whole->source).path, "/ck/g/deep.pt");

  EXPECT_FALSE(fs.WholeFileOf(built, none).has_value());
  EXPECT_FALSE(fs.WholeFileOf(cut, none).has_value());
  EXPECT_FALSE(fs.WholeFileOf(tag, none).has_value());
  EXPECT_FALSE(fs.WholeFileOf(kRootInode, none).has_value());
  EXPECT_FALSE(fs.WholeFileOf(999999, none).has_value());

  // The answer names the source; whoever reads it checks it first, so a
  // source changed since the view was built is refused, not read.
  SourceFiles sources(*view);
  whole = fs.WholeFileOf(model, none);
  EXPECT_TRUE(sources.Get(*whole->source).ok());
  env.WriteFile("/ck/model_states.pt", "other bytes");
  auto changed = sources.Get(*whole->source);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().posix_errno(), EIO);
}

}  // namespace
}  // namespace ucfs
