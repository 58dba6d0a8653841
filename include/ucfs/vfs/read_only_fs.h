// ReadOnlyFs: the read-only mount as inode operations, without FUSE.
//
// The FileSystem of mounts without --upper (OverlayFs is the writable
// one's): every rule a read-only mount answers by — ENOENT, ENOTDIR,
// EISDIR, ENAMETOOLONG, EROFS for any change — lives here, where tests
// drive it as the kernel would, and the FUSE adapter only translates.
// Inode numbers are the View's own (the tree is fixed once built: no
// lookup counts to keep), and an open file is its view inode's pieces.
//
// Thread safety: every method may be called concurrently; it holds no
// lock of its own (the View's are its only ones).
#ifndef UCFS_VFS_READ_ONLY_FS_H_
#define UCFS_VFS_READ_ONLY_FS_H_

#include <fcntl.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/vfs/file_system.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

// What stat(2) shows for a view entry.
struct stat StatOfAttr(const Attr& attr);

class ReadOnlyFs final : public FileSystem {
 public:
  // `statfs_path`: a path on the file system the sources live on, whose
  // space StatFs reports.
  explicit ReadOnlyFs(std::shared_ptr<View> view, std::string statfs_path = "")
      : view_(std::move(view)), statfs_path_(std::move(statfs_path)) {}

  bool read_only() const override { return true; }
  View& view() override { return *view_; }

  Result<struct stat> Lookup(InodeId parent, std::string_view name) override;
  // The tree never changes: a miss stays one.
  bool MightAppear(std::string_view) override { return false; }
  void Forget(InodeId, uint64_t) override {}
  Result<struct stat> GetAttr(InodeId inode, int fd = -1) override;
  Result<struct stat> SetAttr(InodeId, const SetAttrRequest&, int = -1,
                              const Caller* = nullptr) override {
    return Refused();
  }
  // Entries sorted by name, with their inode numbers.
  Result<DirEntries> ReadDir(InodeId dir) override;
  // Nothing to sync: ENOSYS, which tells the kernel never to ask again (and
  // fsync(2) to succeed).
  Status FsyncDir(InodeId) override { return Unsupported(); }
  Result<std::string> ReadLink(InodeId inode) override;
  struct statvfs StatFs() override {
    return StatFsOf(statfs_path_);
  }

  // Files only, and only for reading (O_WRONLY, O_RDWR, O_TRUNC and
  // O_CREAT are EROFS): a handle of the view file, whose pages the kernel
  // may keep.
  Result<Handle> Open(InodeId inode, int flags, const Caller* caller = nullptr) override;
  Result<std::pair<struct stat, Handle>> Create(InodeId, std::string_view, int, mode_t,
                                                const Caller* = nullptr) override {
    return Refused();
  }
  // The inode itself, with or without an open.
  InodeId ViewFileOf(InodeId inode, const Handle&) override { return inode; }
  Result<WriteTarget> StartWrite(const Handle&, const Caller&) override { return Refused(); }
  Result<size_t> Write(InodeId, const Handle&, std::string_view, uint64_t) override {
    return Refused();
  }
  // As FsyncDir: ENOSYS, the kernel stops asking.
  Status Flush(const Handle&) override { return Unsupported(); }
  Status Fsync(const Handle&, bool) override { return Unsupported(); }
  Status Fallocate(const Handle&, int, off_t, off_t) override { return Refused(); }
  void Release(InodeId, const Handle&) override {}
  // A file passed through whole (View::WholeSource): its source.
  std::optional<WholeFile> WholeFileOf(InodeId inode, const Handle& handle) override;

  Result<struct stat> MakeDir(InodeId, std::string_view, mode_t, const Caller* = nullptr) override {
    return Refused();
  }
  Result<struct stat> MakeNode(InodeId, std::string_view, mode_t, dev_t,
                               const Caller* = nullptr) override {
    return Refused();
  }
  Result<struct stat> Symlink(std::string_view, InodeId, std::string_view,
                              const Caller* = nullptr) override {
    return Refused();
  }
  Result<struct stat> Link(InodeId, InodeId, std::string_view) override { return Refused(); }
  Status Unlink(InodeId, std::string_view) override { return Refused(); }
  Status RemoveDir(InodeId, std::string_view) override { return Refused(); }
  Status Rename(InodeId, std::string_view, InodeId, std::string_view, unsigned) override {
    return Refused();
  }

  // The view's ("user.ucfs.*").
  Result<std::string> GetXattr(InodeId inode, const std::string& name) override;
  Result<std::string> ListXattr(InodeId inode) override;
  Status SetXattr(InodeId, const std::string&, std::string_view, int) override { return Refused(); }
  Status RemoveXattr(InodeId, const std::string&) override { return Refused(); }

  std::vector<InodeId> TakeChangedBehind() override { return {}; }
  std::vector<std::pair<InodeId, std::string>> NamesOf(InodeId) override { return {}; }

  // What every change answers.
  static Status Refused() { return Status::Posix(EROFS, "read-only file system"); }

 private:
  static Status Unsupported() { return Status::Posix(ENOSYS, "nothing to sync"); }

  const std::shared_ptr<View> view_;
  const std::string statfs_path_;
};

}  // namespace ucfs

#endif  // UCFS_VFS_READ_ONLY_FS_H_
