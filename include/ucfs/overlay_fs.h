// OverlayFs: the writable mount as inode operations, without FUSE.
//
// The FUSE adapter speaks inode numbers; the Overlay speaks paths. This
// layer keeps the table between them, the way the kernel expects it:
// a number per path that stays put while the kernel holds it (lookup
// counts, forget), follows its file through renames, and is never reused.
// Every operation answers like a file system would — a `struct stat` or
// a Status carrying the errno — so tests drive it exactly as the kernel
// would and compare with a model, and the adapter stays a translation.
//
// Files of the upper directory are served by their own fds (opened here,
// read and written by the caller, closed by the caller); files of the view
// by the view's pieces, as in the read-only mount.
//
// Thread safety: every method may be called concurrently; one mutex
// serialises them (metadata operations are rare next to reads and writes,
// which never take it). Lock order: OverlayFs::mu_, then View's.
#ifndef UCFS_OVERLAY_FS_H_
#define UCFS_OVERLAY_FS_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ucfs/overlay.h"
#include "ucfs/status.h"
#include "ucfs/view.h"

namespace ucfs {

class OverlayFs {
 public:
  // An open file: an fd of the upper file (the caller closes it), or the
  // view inode whose pieces serve reads.
  struct Handle {
    int fd = -1;
    InodeId view_inode = 0;
  };

  // What a setattr asks for; times may be UTIME_NOW in tv_nsec.
  struct SetAttrRequest {
    std::optional<mode_t> mode;
    std::optional<uid_t> uid;
    std::optional<gid_t> gid;
    std::optional<uint64_t> size;
    std::optional<timespec> atime;
    std::optional<timespec> mtime;
  };

  OverlayFs(std::unique_ptr<Overlay> overlay, std::shared_ptr<View> view);
  ~OverlayFs();

  // Every entry returned by Lookup, Create and MakeDir counts one lookup,
  // which Forget gives back.
  Result<struct stat> Lookup(InodeId parent, std::string_view name);
  void Forget(InodeId inode, uint64_t count);
  // `fd` >= 0: an open file's fd, which answers even after an unlink.
  Result<struct stat> GetAttr(InodeId inode, int fd = -1);
  // Entries sorted by name, with their inode numbers.
  Result<std::vector<std::pair<std::string, struct stat>>> ReadDir(InodeId dir);

  // `flags` as open(2) gets them (no O_CREAT: that is Create).
  Result<Handle> Open(InodeId inode, int flags);
  Result<std::pair<struct stat, Handle>> Create(InodeId parent, std::string_view name, int flags,
                                                mode_t mode);
  Result<struct stat> MakeDir(InodeId parent, std::string_view name, mode_t mode);
  Status Unlink(InodeId parent, std::string_view name);
  Status RemoveDir(InodeId parent, std::string_view name);
  Status Rename(InodeId parent, std::string_view name, InodeId new_parent,
                std::string_view new_name, bool no_replace);
  // A view file is copied up first (truncation to 0 skips the copy).
  Result<struct stat> SetAttr(InodeId inode, const SetAttrRequest& request, int fd = -1);

  // The view inode serving `inode`, or 0 if it is an upper entry.
  Result<InodeId> ViewInodeOf(InodeId inode);

  View& view() { return *view_; }
  const std::string& upper_dir() const { return overlay_->upper_dir(); }
  // Inodes in the table (for tests: forgotten ones must go).
  size_t inode_count();

 private:
  struct Node {
    std::string path;  // "" for the root; empty and `detached` once unlinked
    bool detached = false;
    uint64_t lookups = 0;
  };

  Result<std::string> PathOf(InodeId inode);
  Result<std::string> ChildPath(InodeId parent, std::string_view name);
  // The inode of `path`, made if new; `count` lookups added.
  InodeId InodeFor(const std::string& path, uint64_t count);
  Result<struct stat> StatPath(const std::string& path, InodeId inode);
  // The entry at `path` is gone: its inode no longer names a path.
  void Detach(const std::string& path);
  // `from` (and, for a directory, everything below it) is now at `to`.
  void Move(const std::string& from, const std::string& to);

  std::unique_ptr<Overlay> overlay_;
  std::shared_ptr<View> view_;
  const uid_t uid_;
  const gid_t gid_;
  std::mutex mu_;
  InodeId next_inode_ = kRootInode + 1;
  std::unordered_map<InodeId, Node> nodes_;
  std::unordered_map<std::string, InodeId> by_path_;
};

}  // namespace ucfs

#endif  // UCFS_OVERLAY_FS_H_
