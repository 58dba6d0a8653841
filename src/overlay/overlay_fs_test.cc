#include "ucfs/overlay/overlay_fs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include "test_support.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

// Drives OverlayFs the way the kernel does: by inode numbers.
class OverlayFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    view_ = testing::SmallView();
    fs_ = testing::FreshOverlayFs(view_, "overlay_fs_", &upper_);
    ASSERT_NE(fs_, nullptr);
  }

  InodeId Lookup(InodeId parent, const char* name) {
    auto st = fs_->Lookup(parent, name);
    EXPECT_TRUE(st.ok()) << name << ": " << st.status().ToString();
    return st.ok() ? st->st_ino : 0;
  }

  // The bytes of `inode`, read through a handle as the adapter would.
  std::string Read(InodeId inode) {
    auto h = fs_->Open(inode, O_RDONLY);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return "";
    std::string out;
    if (h->fd >= 0) {
      char buf[256];
      ssize_t n;
      while ((n = ::read(h->fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
      fs_->Release(inode, *h);
    } else {
      std::vector<ReadPiece> pieces;
      EXPECT_TRUE(view_->Plan(h->view_inode, 0, 1 << 20, &pieces).ok());
      for (const ReadPiece& p : pieces) out += p.bytes;
    }
    return out;
  }

  void WriteAll(int fd, std::string_view text) {
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  std::shared_ptr<View> view_;
  std::string upper_;
  std::unique_ptr<OverlayFs> fs_;
};

TEST_F(OverlayFsTest, InodesStayPutAndFollowRenames) {
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId a = Lookup(t, "a");
  EXPECT_EQ(Lookup(t, "a"), a);  // the same number while the kernel holds it
  EXPECT_NE(a, t);
  // View files show the view's owner and mode (as overlayfs shows its lower
  // layer's): the kernel's permission checks go by them.
  const Attr shown = *view_->GetAttr(*view_->Lookup(*view_->Lookup(kRootInode, "t"), "a"));
  EXPECT_EQ(fs_->GetAttr(a)->st_mode, static_cast<mode_t>(S_IFREG | shown.mode));
  EXPECT_EQ(fs_->GetAttr(a)->st_uid, shown.uid);
  EXPECT_EQ(fs_->GetAttr(a)->st_gid, shown.gid);

  // A file written aside and renamed over `latest` keeps its inode there.
  auto made = fs_->Create(kRootInode, "latest.tmp", O_WRONLY, 0644);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  WriteAll(made->second.fd, "t8");
  const InodeId tmp = made->first.st_ino;
  fs_->Release(tmp, made->second);
  const InodeId old_latest = Lookup(kRootInode, "latest");
  ASSERT_TRUE(fs_->Rename(kRootInode, "latest.tmp", kRootInode, "latest", false).ok());
  EXPECT_EQ(Lookup(kRootInode, "latest"), tmp);
  EXPECT_EQ(Read(tmp), "t8");
  // The replaced inode names nothing any more.
  EXPECT_EQ(fs_->GetAttr(old_latest).status().posix_errno(), ESTALE);
  EXPECT_EQ(fs_->Lookup(kRootInode, "latest.tmp").status().posix_errno(), ENOENT);

  // A directory's move carries the inodes below it along.
  auto dir = fs_->MakeDir(kRootInode, "stage", 0755);
  ASSERT_TRUE(dir.ok());
  auto w = fs_->Create(dir->st_ino, "w.pt", O_WRONLY, 0644);
  ASSERT_TRUE(w.ok());
  WriteAll(w->second.fd, "weights");
  fs_->Release(w->first.st_ino, w->second);
  ASSERT_TRUE(fs_->Rename(kRootInode, "stage", kRootInode, "global_step8", false).ok());
  const InodeId moved = Lookup(kRootInode, "global_step8");
  EXPECT_EQ(moved, dir->st_ino);
  EXPECT_EQ(Lookup(moved, "w.pt"), w->first.st_ino);
  EXPECT_EQ(Read(w->first.st_ino), "weights");
}

TEST_F(OverlayFsTest, ForgottenInodesLeaveTheTable) {
  const size_t before = fs_->inode_count();
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId a = Lookup(t, "a");
  Lookup(t, "a");
  EXPECT_EQ(fs_->inode_count(), before + 2);
  fs_->Forget(a, 1);
  EXPECT_EQ(Lookup(t, "a"), a);  // still held once: same number
  fs_->Forget(a, 2);
  fs_->Forget(t, 1);
  EXPECT_EQ(fs_->inode_count(), before);
  // Numbers are never reused.
  EXPECT_GT(Lookup(kRootInode, "t"), a);
  // A failed lookup leaves nothing behind.
  EXPECT_FALSE(fs_->Lookup(kRootInode, "missing").ok());
  EXPECT_EQ(fs_->inode_count(), before + 1);
  // An inode forgotten while a file of it is open goes at its release.
  auto made = fs_->Create(kRootInode, "open", O_WRONLY, 0644);
  ASSERT_TRUE(made.ok());
  fs_->Forget(made->first.st_ino, 1);
  EXPECT_EQ(fs_->inode_count(), before + 2);
  EXPECT_TRUE(fs_->GetAttr(made->first.st_ino, made->second.fd).ok());
  fs_->Release(made->first.st_ino, made->second);
  EXPECT_EQ(fs_->inode_count(), before + 1);
}

TEST_F(OverlayFsTest, OpenFilesOutliveTheirNames) {
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId b = Lookup(t, "b");
  auto h = fs_->Open(b, O_RDWR);  // copies up
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_GE(h->fd, 0);
  EXPECT_EQ(testing::ReadFile(upper_ + "/t/b"), "B-view");
  ASSERT_TRUE(fs_->Unlink(t, "b").ok());
  // fstat, fchmod, futimens, ftruncate of the open file: they arrive
  // without the handle (fchmod) or with it (ftruncate).
  auto st = fs_->GetAttr(b);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->st_size, 6);
  EXPECT_EQ(st->st_ino, b);
  OverlayFs::SetAttrRequest chmod;
  chmod.mode = 0600;
  chmod.mtime = timespec{1234, 0};
  st = fs_->SetAttr(b, chmod);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->st_mode & 07777, 0600u);
  EXPECT_EQ(st->st_mtim.tv_sec, 1234);
  OverlayFs::SetAttrRequest truncate;
  truncate.size = 2;
  st = fs_->SetAttr(b, truncate, h->fd);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(fs_->GetAttr(b, h->fd)->st_size, 2);
  fs_->Release(b, *h);
  // Closed, it is gone.
  EXPECT_EQ(fs_->GetAttr(b).status().posix_errno(), ESTALE);
  EXPECT_EQ(fs_->SetAttr(b, chmod).status().posix_errno(), ESTALE);
  EXPECT_TRUE(fs::exists(upper_ + "/t/.wh.b"));
  auto listing = fs_->ReadDir(t);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->size(), 1u);
  EXPECT_EQ((*listing)[0].first, "a");
  // Listed inodes are the ones lookups give.
  EXPECT_EQ((*listing)[0].second.st_ino, Lookup(t, "a"));
}

TEST_F(OverlayFsTest, HardLinksAreOneInode) {
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId a = Lookup(t, "a");
  auto linked = fs_->Link(a, kRootInode, "a2");
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->st_ino, a);
  EXPECT_EQ(linked->st_nlink, 2u);
  EXPECT_EQ(Lookup(kRootInode, "a2"), a);
  EXPECT_EQ(fs_->GetAttr(a)->st_nlink, 2u);
  using Names = std::vector<std::pair<InodeId, std::string>>;
  EXPECT_EQ(fs_->NamesOf(a), (Names{{t, "a"}, {kRootInode, "a2"}}));
  // Dropping one name keeps the inode answering by the other.
  ASSERT_TRUE(fs_->Unlink(t, "a").ok());
  EXPECT_EQ(fs_->GetAttr(a)->st_nlink, 1u);
  EXPECT_EQ(Read(a), "A-view");
  // Forgotten and looked up again, two names of one file are one inode.
  ASSERT_TRUE(fs_->Link(a, kRootInode, "a3").ok());
  fs_->Forget(a, 4);  // its lookup, two links, a lookup by the second name
  const InodeId again = Lookup(kRootInode, "a2");
  EXPECT_NE(again, a);
  EXPECT_EQ(Lookup(kRootInode, "a3"), again);
}

TEST_F(OverlayFsTest, SymlinksNodesExchangeAndXattrs) {
  auto sym = fs_->Symlink("latest", kRootInode, "cur");
  ASSERT_TRUE(sym.ok()) << sym.status().ToString();
  EXPECT_TRUE(S_ISLNK(sym->st_mode));
  EXPECT_EQ(*fs_->ReadLink(sym->st_ino), "latest");
  auto fifo = fs_->MakeNode(kRootInode, "fifo", S_IFIFO | 0600, 0);
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  EXPECT_TRUE(S_ISFIFO(fifo->st_mode));
  // RENAME_EXCHANGE swaps the inodes' names.
  const InodeId latest = Lookup(kRootInode, "latest");
  ASSERT_TRUE(fs_->Rename(kRootInode, "cur", kRootInode, "latest", RENAME_EXCHANGE).ok());
  EXPECT_EQ(Lookup(kRootInode, "latest"), sym->st_ino);
  EXPECT_EQ(Lookup(kRootInode, "cur"), latest);
  EXPECT_EQ(Read(latest), "t");
  // Extended attributes: the view's are read-only; others copy up.
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId a = Lookup(t, "a");
  EXPECT_EQ(fs_->SetXattr(a, "user.ucfs.shape", "[1]", 0).posix_errno(), EPERM);
  EXPECT_EQ(fs_->GetXattr(a, "user.test").status().posix_errno(), ENODATA);
  EXPECT_EQ(*fs_->ViewInodeOf(a), *view_->Lookup(*view_->Lookup(kRootInode, "t"), "a"));
  const Status set = fs_->SetXattr(a, "user.test", "v", 0);
  ASSERT_TRUE(set.ok()) << set.ToString();
  EXPECT_EQ(*fs_->ViewInodeOf(a), 0u);
  EXPECT_EQ(*fs_->GetXattr(a, "user.test"), "v");
  EXPECT_NE(fs_->ListXattr(a)->find("user.test"), std::string::npos);
  ASSERT_TRUE(fs_->RemoveXattr(a, "user.test").ok());
  EXPECT_EQ(fs_->GetXattr(a, "user.test").status().posix_errno(), ENODATA);
  EXPECT_EQ(Read(a), "A-view");
}

TEST_F(OverlayFsTest, SetAttrCopiesUpOnlyWhatItMust) {
  const InodeId latest = Lookup(kRootInode, "latest");
  const InodeId d = Lookup(kRootInode, "d");
  const InodeId x = Lookup(d, "x");
  // Truncation to zero needs none of the old bytes.
  OverlayFs::SetAttrRequest empty;
  empty.size = 0;
  auto st = fs_->SetAttr(latest, empty);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->st_size, 0);
  // The mode it showed, not the open's 0.
  EXPECT_EQ(st->st_mode & 07777, view_->GetAttr(*view_->Lookup(kRootInode, "latest"))->mode);
  EXPECT_EQ(testing::ReadFile(upper_ + "/latest"), "");
  // Truncation to a length keeps the prefix.
  OverlayFs::SetAttrRequest shorter;
  shorter.size = 3;
  shorter.mtime = timespec{1000, 0};
  st = fs_->SetAttr(x, shorter);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(Read(x), "X-v");
  EXPECT_EQ(st->st_mtim.tv_sec, 1000);
  OverlayFs::SetAttrRequest mode;
  mode.mode = 0600;
  st = fs_->SetAttr(x, mode);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->st_mode & 07777, 0600u);
  // The view itself never changes.
  std::vector<ReadPiece> pieces;
  ASSERT_TRUE(
      view_->Plan(*view_->Lookup(*view_->Lookup(kRootInode, "d"), "x"), 0, 64, &pieces).ok());
  EXPECT_EQ(pieces[0].bytes, "X-view");
}

TEST_F(OverlayFsTest, ViewFilesAreServedFromTheViewUntilWritten) {
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId a = Lookup(t, "a");
  auto h = fs_->Open(a, O_RDONLY);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->fd, -1);
  EXPECT_NE(h->view_inode, 0u);
  EXPECT_EQ(*fs_->ViewInodeOf(a), h->view_inode);
  EXPECT_FALSE(fs::exists(upper_ + "/t/a"));  // reading copies nothing
  // O_TRUNC with a read-only open still counts as a write.
  auto trunc = fs_->Open(a, O_RDONLY | O_TRUNC);
  ASSERT_TRUE(trunc.ok());
  ASSERT_GE(trunc->fd, 0);
  ::close(trunc->fd);
  EXPECT_EQ(*fs_->ViewInodeOf(a), 0u);
  EXPECT_EQ(Read(a), "");
  EXPECT_EQ(fs_->Create(t, "a", O_WRONLY | O_EXCL, 0644).status().posix_errno(), EEXIST);
  EXPECT_EQ(fs_->Lookup(kRootInode, "..").status().posix_errno(), EINVAL);
}

// A read-only handle of a view file reads the copy once the file is
// copied up, through its name or any other way, as overlayfs reopens such
// a file on its upper layer; and fstat of it answers for the copy, after
// the copy lost its name too.
TEST_F(OverlayFsTest, ViewFileHandlesFollowTheCopy) {
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId a = Lookup(t, "a");
  auto h = fs_->Open(a, O_RDONLY);
  ASSERT_TRUE(h.ok());
  ASSERT_NE(h->view_file, nullptr);
  EXPECT_EQ(h->ReadFd(), -1);  // the view serves it
  OverlayFs::SetAttrRequest shorter;
  shorter.size = 3;
  ASSERT_TRUE(fs_->SetAttr(a, shorter).ok());
  ASSERT_GE(h->ReadFd(), 0);
  char buf[16] = {};
  EXPECT_EQ(::pread(h->ReadFd(), buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "A-v");
  // A second handle opened now is the upper file's own.
  auto again = fs_->Open(a, O_RDONLY);
  ASSERT_TRUE(again.ok());
  EXPECT_GE(again->fd, 0);
  fs_->Release(a, *again);
  ASSERT_TRUE(fs_->Unlink(t, "a").ok());
  auto st = fs_->GetAttr(a);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->st_size, 3);
  EXPECT_EQ(st->st_nlink, 0u);
  fs_->Release(a, *h);
  // Renamed first, then copied up by a write through the new name.
  const InodeId b = Lookup(t, "b");
  auto hb = fs_->Open(b, O_RDONLY);
  ASSERT_TRUE(hb.ok());
  ASSERT_TRUE(fs_->Rename(t, "b", kRootInode, "b2", 0).ok());
  EXPECT_GE(hb->ReadFd(), 0);  // a rename copies a view file up
  auto w = fs_->Open(b, O_WRONLY);
  ASSERT_TRUE(w.ok());
  WriteAll(w->fd, "XY");
  fs_->Release(b, *w);
  EXPECT_EQ(::pread(hb->ReadFd(), buf, sizeof buf, 0), 6);
  EXPECT_EQ(std::string(buf, 6), "XYview");
}

// fchmod, fchown, futimens through a read-only handle of a view file whose
// names are all gone: the file is copied to one of no name, which the
// handle reads and changes from then on (as a local file system's
// unlinked file stays one for its fds; ucfs(1), Open files).
TEST_F(OverlayFsTest, NamelessViewFilesAreCopiedForTheirHandles) {
  const InodeId t = Lookup(kRootInode, "t");
  const InodeId a = Lookup(t, "a");
  auto h = fs_->Open(a, O_RDONLY);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(fs_->Unlink(t, "a").ok());
  EXPECT_EQ(fs_->GetAttr(a)->st_size, 6);  // the view's, while nothing is changed
  OverlayFs::SetAttrRequest chmod;
  chmod.mode = 0600;
  chmod.mtime = timespec{1234, 0};
  auto st = fs_->SetAttr(a, chmod);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->st_mode & 07777, 0600u);
  EXPECT_EQ(st->st_mtim.tv_sec, 1234);
  EXPECT_EQ(st->st_nlink, 0u);
  ASSERT_GE(h->ReadFd(), 0);
  char buf[16] = {};
  EXPECT_EQ(::pread(h->ReadFd(), buf, sizeof buf, 0), 6);
  EXPECT_EQ(std::string(buf, 6), "A-view");
  EXPECT_EQ(fs_->GetAttr(a)->st_mode & 07777, 0600u);
  // Nothing of it in DIR but the whiteout.
  for (const auto& e : fs::recursive_directory_iterator(upper_)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "t" || name == ".wh.a") << e.path();
  }
  fs_->Release(a, *h);
}

// A removed directory (or special file) still answers while the kernel
// holds it (an fd of it): as it was, with no links of its own left, and its
// attributes may still change.
TEST_F(OverlayFsTest, RemovedDirectoriesAnswerAsTheyWere) {
  auto made = fs_->MakeDir(kRootInode, "e", 0750);
  ASSERT_TRUE(made.ok());
  const InodeId e = made->st_ino;
  ASSERT_TRUE(fs_->RemoveDir(kRootInode, "e").ok());
  auto st = fs_->GetAttr(e);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(S_ISDIR(st->st_mode));
  EXPECT_EQ(st->st_mode & 07777, 0750u);
  EXPECT_EQ(st->st_nlink, 0u);
  OverlayFs::SetAttrRequest chmod;
  chmod.mode = 0700;
  chmod.atime = timespec{77, 0};
  ASSERT_TRUE(fs_->SetAttr(e, chmod).ok());
  EXPECT_EQ(fs_->GetAttr(e)->st_mode & 07777, 0700u);
  EXPECT_EQ(fs_->GetAttr(e)->st_atim.tv_sec, 77);
  ASSERT_TRUE(fs_->ReadDir(e).ok());
  EXPECT_TRUE(fs_->ReadDir(e)->empty());
  OverlayFs::SetAttrRequest truncate;
  truncate.size = 0;
  EXPECT_EQ(fs_->SetAttr(e, truncate).status().posix_errno(), EISDIR);
  // The view's directory, emptied and removed; a FIFO unlinked.
  const InodeId d = Lookup(kRootInode, "d");
  ASSERT_TRUE(fs_->Unlink(d, "x").ok());
  ASSERT_TRUE(fs_->RemoveDir(kRootInode, "d").ok());
  EXPECT_TRUE(S_ISDIR(fs_->GetAttr(d)->st_mode));
  auto fifo = fs_->MakeNode(kRootInode, "p", S_IFIFO | 0640, 0);
  ASSERT_TRUE(fifo.ok());
  ASSERT_TRUE(fs_->Unlink(kRootInode, "p").ok());
  EXPECT_TRUE(S_ISFIFO(fs_->GetAttr(fifo->st_ino)->st_mode));
  EXPECT_EQ(fs_->GetAttr(fifo->st_ino)->st_nlink, 0u);
  // Forgotten, they are gone.
  fs_->Forget(e, 1);
  EXPECT_EQ(fs_->GetAttr(e).status().posix_errno(), ESTALE);
}

// A merged directory shows one link (as overlayfs shows it: not counted);
// a view directory copied up to make room for a change below it becomes
// one, and the kernel is to be told.
TEST_F(OverlayFsTest, MergedDirectoriesShowOneLink) {
  EXPECT_EQ(fs_->GetAttr(kRootInode)->st_nlink, 1u);
  const InodeId d = Lookup(kRootInode, "d");
  const InodeId x = Lookup(d, "x");
  EXPECT_EQ(fs_->GetAttr(d)->st_nlink, 2u);  // the view's
  EXPECT_TRUE(fs_->TakeChangedBehind().empty());
  OverlayFs::SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(x, chmod).ok());
  EXPECT_EQ(fs_->GetAttr(d)->st_nlink, 1u);
  EXPECT_EQ(fs_->TakeChangedBehind(), std::vector<InodeId>{d});
  EXPECT_TRUE(fs_->TakeChangedBehind().empty());
  // A directory of the upper directory alone counts its own.
  auto e = fs_->MakeDir(kRootInode, "e", 0755);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(fs_->MakeDir(e->st_ino, "f", 0755).ok());
  EXPECT_EQ(fs_->GetAttr(e->st_ino)->st_nlink, 3u);
}

}  // namespace
}  // namespace ucfs

namespace ucfs {
namespace {

// A file whose bytes come only when the test says so: a copy-up of it
// blocks in the middle, as a copy of gigabytes would take its time.
class GatedContent final : public FileContent {
 public:
  explicit GatedContent(std::shared_future<void> gate) : gate_(std::move(gate)) {}
  uint64_t size() const override { return 4; }
  Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const override {
    gate_.wait();
    return bytes_.Plan(offset, length, out);  // pieces that point into bytes_
  }

 private:
  std::shared_future<void> gate_;
  InlineContent bytes_{"gate"};
};

// While one file is being copied up, every other operation of the mount
// goes on: the copy is written with the table unlocked.
TEST(OverlayFsCopyUp, OtherOperationsGoOnWhileAFileIsCopiedUp) {
  std::promise<void> open_gate;
  auto view = std::make_shared<View>(*Env::Posix(), 0);
  ASSERT_TRUE(view->AddFile(kRootInode, "big",
                            std::make_shared<GatedContent>(open_gate.get_future().share()))
                  .ok());
  ASSERT_TRUE(view->AddFile(kRootInode, "small", std::make_shared<InlineContent>("s")).ok());
  const std::string upper = testing::FreshTempDir("overlay_fs_copy_unlocked");
  auto overlay = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(overlay.ok());
  OverlayFs fs(std::move(overlay).value(), view);
  const InodeId big = fs.Lookup(kRootInode, "big")->st_ino;

  auto writer = std::async(std::launch::async, [&] { return fs.Open(big, O_RDWR); });
  // The copy-up is under way (blocked on the gate); lookups, listings and
  // a create must not wait for it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto others = std::async(std::launch::async, [&] {
    EXPECT_TRUE(fs.Lookup(kRootInode, "small").ok());
    EXPECT_TRUE(fs.ReadDir(kRootInode).ok());
    auto made = fs.Create(kRootInode, "new", O_WRONLY | O_CREAT, 0644);
    EXPECT_TRUE(made.ok());
    if (made.ok()) fs.Release(made->first.st_ino, made->second);
  });
  const bool went_on = others.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  open_gate.set_value();
  EXPECT_TRUE(went_on) << "operations waited for a copy-up";
  others.wait();
  auto handle = writer.get();
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  ASSERT_GE(handle->fd, 0);
  char buf[8] = {};
  EXPECT_EQ(::pread(handle->fd, buf, sizeof buf, 0), 4);
  EXPECT_EQ(std::string(buf, 4), "gate");
  fs.Release(big, *handle);
}

// A trainer's save is creates and writes: each resolves its path from the
// upper root at most twice (passthrough_hp keeps an fd per inode; here the
// parent's walk is passed on), where it walked six times.
TEST_F(OverlayFsTest, CreatesAndOpensForWriteWalkAtMostTwice) {
  auto dir = fs_->MakeDir(kRootInode, "global_step12", 0755);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto walks_of = [this](const std::function<void()>& op) {
    const uint64_t before = fs_->walks();
    op();
    return fs_->walks() - before;
  };
  InodeId made = 0;
  EXPECT_LE(walks_of([&] {
              auto c = fs_->Create(dir->st_ino, "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                   O_WRONLY | O_CREAT, 0644);
              ASSERT_TRUE(c.ok()) << c.status().ToString();
              made = c->first.st_ino;
              WriteAll(c->second.fd, "shard");
              fs_->Release(made, c->second);
            }),
            2u);
  EXPECT_EQ(Read(made), "shard");
  // Saved again: the same name truncated.
  EXPECT_LE(walks_of([&] {
              auto c = fs_->Create(dir->st_ino, "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
              ASSERT_TRUE(c.ok()) << c.status().ToString();
              EXPECT_EQ(c->first.st_ino, made);
              WriteAll(c->second.fd, "again");
              fs_->Release(made, c->second);
            }),
            2u);
  EXPECT_LE(walks_of([&] {
              auto h = fs_->Open(made, O_WRONLY | O_APPEND);
              ASSERT_TRUE(h.ok()) << h.status().ToString();
              WriteAll(h->fd, "+");
              fs_->Release(made, *h);
            }),
            2u);
  EXPECT_EQ(Read(made), "again+");
  // A view file opened for writing is copied up: its walk before the copy
  // (made with the lock let go), and one to adopt it, which opens it where
  // it put it; with O_TRUNC there is nothing to copy.
  const InodeId t = Lookup(kRootInode, "t");
  ASSERT_TRUE(fs_->MakeDir(t, "made_upper", 0755).ok());  // "t" is an upper directory now
  const InodeId a = Lookup(t, "a");
  EXPECT_LE(walks_of([&] {
              auto h = fs_->Open(a, O_RDWR);
              ASSERT_TRUE(h.ok()) << h.status().ToString();
              fs_->Release(a, *h);
            }),
            2u);
  const InodeId b = Lookup(t, "b");
  EXPECT_LE(walks_of([&] {
              auto h = fs_->Open(b, O_WRONLY | O_TRUNC);
              ASSERT_TRUE(h.ok()) << h.status().ToString();
              fs_->Release(b, *h);
            }),
            2u);
  // At the root too (`latest`, written last).
  EXPECT_LE(walks_of([&] {
              auto c = fs_->Create(kRootInode, "latest.new", O_WRONLY | O_CREAT, 0644);
              ASSERT_TRUE(c.ok()) << c.status().ToString();
              fs_->Release(c->first.st_ino, c->second);
            }),
            2u);
}

}  // namespace
}  // namespace ucfs
