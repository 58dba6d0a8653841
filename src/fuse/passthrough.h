// FUSE passthrough: which opens the kernel serves from a backing file.
//
// A file that is one real file whole (FileSystem::WholeFileOf) — a source
// file passed through as it is (a model-states file, `latest`, a per-rank
// file and its copies at N), or an upper file of a writable mount — can be
// handed to the kernel with its OPEN reply as a backing file: reads (and
// writes) of it then go from the kernel to that file's page cache, past
// the daemon, as on the file system below (kernel >= 6.9, libfuse >= 3.16,
// CAP_SYS_ADMIN). Everything the views assemble stays with the daemon.
//
// The kernel takes every open of an inode through the same backing file,
// or none: an open that differs from the others open fails (EIO to its
// caller). So this table keeps, per inode, how its open handles were
// served, and serves a new open the same way. A source is registered once
// and kept for the mount (many inodes may show it: a rank file's copies);
// an upper file's backing file is given back with its inode's last
// passthrough handle.
//
// Staleness: a source is checked (device, inode, size, mtime, ctime) at
// every open, before its backing file is given, so a source changed since
// the view was built is refused at open (EIO), as any read of it is. While
// a file is open through passthrough the kernel reads the source itself: an
// in-place edit made meanwhile shows through that open as on the source,
// where the daemon's reads would fail; replaced by a rename, it goes on
// reading the file it opened (the bytes the view was built from).
//
// Kernel-free: registering and giving back backing files are callbacks
// (fuse_passthrough_open/close in the adapter), so tests drive it.
// Thread-safe; its mutex is a leaf but for the callbacks, which take none.
#ifndef UCFS_FUSE_PASSTHROUGH_H_
#define UCFS_FUSE_PASSTHROUGH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ucfs/base/thread_annotations.h"
#include "ucfs/vfs/file_system.h"

namespace ucfs::fuse {

class PassthroughTable {
 public:
  // Registers `fd` as a backing file: its id (> 0), or <= 0 if the kernel
  // refused it (EPERM without CAP_SYS_ADMIN, a file on a stacked file
  // system, ...).
  using Register = std::function<int(int fd)>;
  using Unregister = std::function<void(int backing_id)>;

  // An open of `inode` through `handle` (kept by the adapter until its
  // release), which the file system says is `whole`; `source_fd` is that
  // source's fd, open and checked (>= 0), when `whole` names a source.
  // Returns the backing id to reply with, or 0: served by the daemon (and
  // counted so, so that no later open of the inode asks for passthrough
  // while this one is open).
  int Start(InodeId inode, const FileSystem::Handle* handle,
            std::optional<FileSystem::WholeFile> whole, int source_fd, const Register& reg);
  // The release of a handle Start was given.
  void End(InodeId inode, const FileSystem::Handle* handle, const Unregister& unreg);

  // Handles open through passthrough, for tests and logs.
  size_t passthrough_handles();

 private:
  struct InodeIo {
    int backing_id = 0;  // while passthrough > 0
    bool owned = false;  // given back with the last passthrough handle
    uint32_t passthrough = 0;
    uint32_t cached = 0;
  };
  Mutex mu_;
  std::unordered_map<InodeId, InodeIo> inodes_ UCFS_GUARDED_BY(mu_);
  // A source's backing id for the mount, or -1: refused once, never asked
  // again (all its inodes are then served by the daemon).
  std::unordered_map<uint32_t, int> sources_ UCFS_GUARDED_BY(mu_);
  std::unordered_set<const FileSystem::Handle*> handles_ UCFS_GUARDED_BY(mu_);
};

}  // namespace ucfs::fuse

#endif  // UCFS_FUSE_PASSTHROUGH_H_
