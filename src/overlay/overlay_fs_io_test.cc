// OverlayFs's calls on open files (overlay_fs_io.cc), as the adapter makes
// them around the bytes it splices: the fd a write goes to and what is
// checked first (the set-id bits a write clears, as a truncation and an
// O_TRUNC open clear them), flush, fsync, fallocate, fsyncdir and statfs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "test_support.h"
#include "ucfs/overlay/overlay_fs.h"

namespace ucfs {
namespace {

class OverlayFsIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_ = testing::FreshOverlayFs(testing::SmallView(), "overlay_fs_io_", &upper_);
    ASSERT_NE(fs_, nullptr);
  }

  InodeId Lookup(InodeId parent, const char* name) {
    auto st = fs_->Lookup(parent, name);
    EXPECT_TRUE(st.ok()) << name << ": " << st.status().ToString();
    return st.ok() ? st->st_ino : 0;
  }

  // A new upper file, open for writing.
  std::pair<InodeId, OverlayFs::Handle> Made(const char* name, mode_t mode = 0644) {
    auto made = fs_->Create(kRootInode, name, O_WRONLY, mode);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (!made.ok()) return {0, OverlayFs::Handle{}};
    return {made->first.st_ino, made->second};
  }

  std::string Contents(const char* name) {
    std::string out;
    const UniqueFd fd(::open((upper_ + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
    char buf[256];
    ssize_t n;
    while (fd && (n = ::read(fd.get(), buf, sizeof buf)) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

  std::string upper_;
  std::unique_ptr<OverlayFs> fs_;
};

// What WriteBuf splices into: the handle's own upper file, which a read
// through another handle then sees.
TEST_F(OverlayFsIoTest, WritesGoToTheHandlesUpperFile) {
  auto [inode, handle] = Made("w");
  const OverlayFs::Caller caller{0, 0, 022, {}};
  auto target = fs_->StartWrite(handle, caller);
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  EXPECT_EQ(target->fd, handle.fd);
  EXPECT_FALSE(target->mode_changed);
  ASSERT_EQ(::pwrite(target->fd, "saved", 5, 0), 5);
  EXPECT_TRUE(fs_->Flush(handle).ok());
  EXPECT_TRUE(fs_->Fsync(handle, /*datasync=*/false).ok());
  EXPECT_TRUE(fs_->Fsync(handle, /*datasync=*/true).ok());
  auto read = fs_->Open(inode, O_RDONLY);
  ASSERT_TRUE(read.ok());
  ASSERT_GE(read->ReadFd(), 0);
  char buf[8] = {};
  EXPECT_EQ(::pread(read->ReadFd(), buf, sizeof buf, 0), 5);
  EXPECT_EQ(std::string(buf), "saved");
  fs_->Release(inode, *read);
  fs_->Release(inode, handle);
  EXPECT_EQ(Contents("w"), "saved");
}

// A write by someone without CAP_FSETID clears the set-id bits first, and
// says so: the kernel's cached mode is stale.
TEST_F(OverlayFsIoTest, AWriteClearsSetIdBitsFirst) {
  auto [inode, handle] = Made("s");
  ASSERT_EQ(::fchmod(handle.fd, 04755), 0);
  const OverlayFs::Caller alice{1001, 1001, 022, [] {
                                  return OverlayFs::Credentials{{1001}, false};
                                }};
  auto target = fs_->StartWrite(handle, alice);
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  EXPECT_TRUE(target->mode_changed);
  EXPECT_EQ(fs_->GetAttr(inode)->st_mode & 07777, 0755u);
  // Nothing left to clear.
  EXPECT_FALSE(fs_->StartWrite(handle, alice)->mode_changed);
  fs_->Release(inode, handle);
}

// fallocate(2) of the handle's file: space, and with mode 0 the size.
TEST_F(OverlayFsIoTest, FallocateGrowsTheUpperFile) {
  auto [inode, handle] = Made("f");
  ASSERT_TRUE(fs_->Fallocate(handle, 0, 0, 1 << 16).ok());
  EXPECT_EQ(fs_->GetAttr(inode, handle.fd)->st_size, 1 << 16);
  EXPECT_EQ(fs_->Fallocate(handle, 0, -1, 1).posix_errno(), EINVAL);
  fs_->Release(inode, handle);
}

// A view file's handle has no upper file: flush and fsync have nothing to
// do, a write or fallocate nothing to go to (EBADF, as the kernel answers
// a write to an fd not open for writing).
TEST_F(OverlayFsIoTest, AViewFilesHandleHasNothingToWriteTo) {
  auto latest = fs_->Lookup(kRootInode, "latest");
  ASSERT_TRUE(latest.ok());
  auto handle = fs_->Open(latest->st_ino, O_RDONLY);
  ASSERT_TRUE(handle.ok());
  ASSERT_LT(handle->fd, 0);
  EXPECT_EQ(fs_->StartWrite(*handle, OverlayFs::Caller{}).status().posix_errno(), EBADF);
  EXPECT_EQ(fs_->Fallocate(*handle, 0, 0, 16).posix_errno(), EBADF);
  EXPECT_TRUE(fs_->Flush(*handle).ok());
  EXPECT_TRUE(fs_->Fsync(*handle, false).ok());
  fs_->Release(latest->st_ino, *handle);
  EXPECT_EQ(Contents("latest"), "");  // never copied up
}

// Directory changes are the upper directory's: a sync of its file system
// covers them; its space is what statfs shows.
TEST_F(OverlayFsIoTest, DirectoriesSyncAndSpaceAreTheUpperDirectorys) {
  ASSERT_TRUE(fs_->MakeDir(kRootInode, "made", 0755).ok());
  EXPECT_TRUE(fs_->FsyncDir(kRootInode).ok());
  struct statvfs real {};
  ASSERT_EQ(::statvfs(upper_.c_str(), &real), 0);
  EXPECT_EQ(fs_->StatFs().f_fsid, real.f_fsid);
}

// What a write, an O_TRUNC open, a truncation and a chown by a caller
// without CAP_FSETID clear of a file's set-id bits (ModeAfterWrite): the
// kernel leaves these to the file system.
TEST_F(OverlayFsIoTest, WritesAndTruncationsClearSetIdBits) {
  const OverlayFs::Caller alice{1001, 1001, 022, [] {
                                  return Overlay::Credentials{{1001, 3000}, false};
                                }};
  const OverlayFs::Caller carol{1003, 3001, 022, [] {
                                  return Overlay::Credentials{{3001}, false};
                                }};
  const OverlayFs::Caller root{0, 0, 022, {}};
  auto make = [&](const char* name, mode_t mode, gid_t gid) {
    auto made = fs_->Create(kRootInode, name, O_WRONLY, mode);
    EXPECT_TRUE(made.ok());
    if (!made.ok()) return OverlayFs::Handle{};
    EXPECT_EQ(::fchown(made->second.fd, 1001, gid), 0);
    EXPECT_EQ(::fchmod(made->second.fd, mode), 0);
    return made->second;
  };
  auto cleared = [this](int fd, const OverlayFs::Caller& caller) {
    auto changed = fs_->BeforeWrite(fd, caller);
    EXPECT_TRUE(changed.ok()) << changed.status().ToString();
    return changed.ok() && *changed;
  };
  auto mode_of = [&](const char* name) {
    return fs_->GetAttr(Lookup(kRootInode, name))->st_mode & 07777;
  };
  OverlayFs::Handle w = make("w", 06755, 3000);
  EXPECT_FALSE(cleared(w.fd, root));
  EXPECT_EQ(mode_of("w"), 06755u);
  EXPECT_TRUE(cleared(w.fd, alice));
  EXPECT_EQ(mode_of("w"), 0755u);
  OverlayFs::Handle g = make("g", 02666, 3000);
  EXPECT_FALSE(cleared(g.fd, alice));  // of the group
  EXPECT_EQ(mode_of("g"), 02666u);
  EXPECT_TRUE(cleared(g.fd, carol));
  EXPECT_EQ(mode_of("g"), 0666u);
  make("o", 06777, 3000);
  EXPECT_TRUE(fs_->TakeChangedBehind().empty());
  auto opened = fs_->Open(Lookup(kRootInode, "o"), O_WRONLY | O_TRUNC, &carol);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(mode_of("o"), 0777u);
  EXPECT_EQ(fs_->TakeChangedBehind(), std::vector<InodeId>{Lookup(kRootInode, "o")});
  make("tr", 04777, 3000);
  OverlayFs::SetAttrRequest truncate;
  truncate.size = 1;
  ASSERT_TRUE(fs_->SetAttr(Lookup(kRootInode, "tr"), truncate, -1, &root).ok());
  EXPECT_EQ(mode_of("tr"), 04777u);
  ASSERT_TRUE(fs_->SetAttr(Lookup(kRootInode, "tr"), truncate, -1, &alice).ok());
  EXPECT_EQ(mode_of("tr"), 0777u);
  // The kernel sends what it clears itself with the truncation, S_ISGID
  // without group execute left for us.
  make("tk", 07563, 0);
  truncate.mode = 03563;
  ASSERT_TRUE(fs_->SetAttr(Lookup(kRootInode, "tk"), truncate, -1, &alice).ok());
  EXPECT_EQ(mode_of("tk"), 01563u);
  // chown(f, -1, -1), an empty setattr: its owner outside the group loses
  // S_ISGID; anyone else's is left for the write it may precede.
  make("c", 02666, 3001);
  const OverlayFs::SetAttrRequest nothing;
  ASSERT_TRUE(fs_->SetAttr(Lookup(kRootInode, "c"), nothing, -1, &root).ok());
  EXPECT_EQ(mode_of("c"), 02666u);
  ASSERT_TRUE(fs_->SetAttr(Lookup(kRootInode, "c"), nothing, -1, &carol).ok());
  EXPECT_EQ(mode_of("c"), 02666u);
  ASSERT_TRUE(fs_->SetAttr(Lookup(kRootInode, "c"), nothing, -1, &alice).ok());
  EXPECT_EQ(mode_of("c"), 0666u);
  fs_->Release(Lookup(kRootInode, "o"), *opened);
}

// What the kernel may read and write itself (FUSE passthrough): an open
// upper file, whole, through its own fd; never a view file (its read-only
// handles must see a copy-up), nor a set-id file (its writes clear bits).
TEST_F(OverlayFsIoTest, AnUpperFileIsWholeAViewFileIsNot) {
  auto [inode, handle] = Made("w");
  auto whole = fs_->WholeFileOf(inode, handle);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->fd, handle.fd);
  EXPECT_FALSE(whole->source.has_value());
  auto read = fs_->Open(inode, O_RDONLY);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(fs_->WholeFileOf(inode, *read), (FileSystem::WholeFile{read->fd, std::nullopt}));

  const InodeId latest = Lookup(kRootInode, "latest");
  auto view_file = fs_->Open(latest, O_RDONLY);
  ASSERT_TRUE(view_file.ok());
  EXPECT_FALSE(fs_->WholeFileOf(latest, *view_file).has_value());
  // Copied up by a write: that handle's file is whole; the read-only
  // handle of the view file still is not (it reads the copy through the
  // daemon).
  auto writer = fs_->Open(latest, O_WRONLY);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_TRUE(fs_->WholeFileOf(latest, *writer).has_value());
  EXPECT_FALSE(fs_->WholeFileOf(latest, *view_file).has_value());

  auto [setid, setid_handle] = Made("s", 04755);
  ASSERT_EQ(::fchmod(setid_handle.fd, 04755), 0);
  EXPECT_FALSE(fs_->WholeFileOf(setid, setid_handle).has_value());
  for (const auto* h : {&handle, &*read, &*view_file, &*writer, &setid_handle}) {
    fs_->Release(h == &setid_handle                  ? setid
                 : h == &*view_file || h == &*writer ? latest
                                                     : inode,
                 *h);
  }
}

}  // namespace
}  // namespace ucfs
