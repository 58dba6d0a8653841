// What the read-only and the writable operation tables share: the server
// state and the replies that turn view pieces and listings into libfuse
// calls. Internal to the FUSE adapter.
#ifndef UCFS_FUSE_SERVER_H_
#define UCFS_FUSE_SERVER_H_

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fuse/fuse_server.h"
#include "fuse/io_policy.h"
#include "ucfs/base/thread_annotations.h"
#include "ucfs/overlay/overlay_fs.h"
#include "ucfs/vfs/read_only_fs.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/vfs/view.h"

namespace ucfs::fuse {

// libfuse splices a read reply only if it fits a pipe (pipe-max-size, 1 MiB
// by default) with room for the header and a page per buffer; a larger
// reply falls back to a malloc'd copy of the whole reply. Reads are capped
// to fit, with room for 14 buffers.
uint32_t MaxReadForSplice();

// A directory listing (in fi->fh), served by ReadDir and freed by
// ReleaseDir: taken at opendir by the read-only mount, at the first readdir
// (`listed`) by the writable one.
struct DirHandle {
  std::vector<std::pair<std::string, struct stat>> entries;
  bool listed = false;
};

// The state every request handler reaches through fuse_req_userdata.
//
// Fixed before the session starts, read by every thread without a lock:
// view, overlay, read_only, options, max_read, timeout, mountpoint,
// statfs_path. Set in INIT, before any other request is dispatched:
// no_open. Thread-safe on their own: sources (its own mutex), overlay
// (its own), the View (its own), read_ahead (its own).
//
// Lock order (outermost first): OverlayFs's table mutex, then the View's
// mutex, then LazyContent's cache mutex; SourceFiles's mutex, ReadAhead's and
// handles_mu are leaves — nothing is called while they are held.
struct Server {
  const std::shared_ptr<View> view;
  // The writable mount's layer over `view`; null for a read-only mount.
  std::unique_ptr<OverlayFs> overlay;
  // The read-only mount's rules (used when `overlay` is null).
  ReadOnlyFs read_only;
  const ServeOptions options;
  const uint32_t max_read = MaxReadForSplice();
  const double timeout;
  std::string statfs_path;
  std::once_flag readahead_raised;
  bool no_open = false;             // the kernel takes ENOSYS from OPEN as "never ask again"
  fuse_session* session = nullptr;  // for notifications (set before it mounts)
  SourceFiles sources;              // every source read of the mount goes through these

  ReadAhead read_ahead;  // what view files' reads ask for ahead

  // The handles the kernel holds (fi->fh), each freed at its release, or,
  // when an unmount dropped that (it aborts the connection with releases
  // still queued), with the Server.
  Mutex handles_mu;
  std::unordered_set<OverlayFs::Handle*> handles UCFS_GUARDED_BY(handles_mu);
  std::unordered_set<DirHandle*> dir_handles UCFS_GUARDED_BY(handles_mu);

  Server(std::shared_ptr<View> v, ServeOptions o)
      : view(std::move(v)),
        read_only(view),
        options(std::move(o)),
        timeout(options.cache_timeout_s),
        sources(*view) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();
};

// fi->fh of a handle the Server keeps until Release gives it back.
uint64_t Keep(Server& s, std::unique_ptr<OverlayFs::Handle> handle);
uint64_t Keep(Server& s, std::unique_ptr<DirHandle> handle);
std::unique_ptr<OverlayFs::Handle> GiveBack(Server& s, uint64_t fh);
std::unique_ptr<DirHandle> GiveBackDir(Server& s, uint64_t fh);

// The fd of source `index`, open and checked against what the view was
// built from, or -errno (EIO for a source that changed).
int SourceFd(Server& s, uint32_t index);

inline Server& Of(fuse_req_t req) { return *static_cast<Server*>(fuse_req_userdata(req)); }

// The errno a Status answers with.
int ErrnoOf(const Status& s);

// Answers a failed lookup: "no such entry" as a negative entry the kernel
// may cache for `negative_timeout` seconds, anything else as its errno.
void ReplyLookupError(fuse_req_t req, const Status& status, double negative_timeout);

// The kernel resets a mount's readahead at INIT; the first request after
// it raises it (once).
void RaiseReadaheadOnce(Server& s);

// Replies to a read of bytes [offset, offset + size) of view file
// `view_inode`: spliced from the sources, with prefetch ahead.
void ReplyViewRead(fuse_req_t req, Server& s, InodeId view_inode, size_t size, off_t offset);

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info* fi);
void ReleaseDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi);

void ReplyGetXattr(fuse_req_t req, const std::vector<Xattr>& xattrs, const char* name, size_t size);
void ReplyListXattr(fuse_req_t req, const std::vector<Xattr>& xattrs, size_t size);

// Shared operations.
void InitConnection(void* userdata, struct fuse_conn_info* conn);
void StatFs(fuse_req_t req, fuse_ino_t ino);

// The operation tables.
fuse_lowlevel_ops ReadOnlyOperations();
fuse_lowlevel_ops WritableOperations();

}  // namespace ucfs::fuse

#endif  // UCFS_FUSE_SERVER_H_
