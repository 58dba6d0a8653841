// ReadOnlyFs: the read-only mount as inode operations, without FUSE.
//
// The counterpart of OverlayFs for mounts without --upper: every rule a
// read-only mount answers by — ENOENT, ENOTDIR, EISDIR, ENAMETOOLONG,
// EROFS for any write — lives here, where tests drive it as the kernel
// would, and the FUSE adapter's read-only table only translates. Inode
// numbers are the View's own (the tree is fixed once built: no lookup
// counts to keep).
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
#include "ucfs/vfs/view.h"

namespace ucfs {

// What stat(2) shows for a view entry.
struct stat StatOfAttr(const Attr& attr);

class ReadOnlyFs {
 public:
  explicit ReadOnlyFs(std::shared_ptr<View> view) : view_(std::move(view)) {}

  Result<struct stat> Lookup(InodeId parent, std::string_view name);
  Result<struct stat> GetAttr(InodeId inode);
  // Entries sorted by name, with their inode numbers.
  Result<std::vector<std::pair<std::string, struct stat>>> ReadDir(InodeId dir);
  // Whether open(2) with `flags` may open `inode`: files only, and only for
  // reading (O_WRONLY, O_RDWR, O_TRUNC and O_CREAT are EROFS).
  Status Open(InodeId inode, int flags);
  // What a symbolic link holds (EINVAL for anything else).
  Result<std::string> ReadLink(InodeId inode);
  // Every write-side operation (create, mkdir, unlink, rename, setattr,
  // setxattr, link, ...) of a read-only mount.
  static Status Write() { return Status::Posix(EROFS, "read-only file system"); }
  Result<std::vector<Xattr>> Xattrs(InodeId inode);

  View& view() { return *view_; }

 private:
  std::shared_ptr<View> view_;
};

}  // namespace ucfs

#endif  // UCFS_VFS_READ_ONLY_FS_H_
