// The FUSE adapter's state and the replies its one operation table
// (operations.cc) shares with the read path (read_reply.cc). Internal to
// the FUSE adapter.
#ifndef UCFS_FUSE_SERVER_H_
#define UCFS_FUSE_SERVER_H_

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
#include "fuse/libfuse.h"
#include "fuse/passthrough.h"
#include "ucfs/base/thread_annotations.h"
#include "ucfs/vfs/file_system.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/vfs/view.h"

namespace ucfs::fuse {

using Handle = FileSystem::Handle;

// The largest read the kernel is to send: MaxReadForPipe of this
// machine's pipe-max-size.
uint32_t MaxReadForSplice();

// A directory listing (in fi->fh), served by ReadDir and freed by
// ReleaseDir: taken at opendir by a read-only file system, at the first
// readdir (`listed`) and each rewind by a writable one
// (FileSystem::read_only).
struct DirHandle {
  FileSystem::DirEntries entries;
  bool listed = false;
};

// The state every request handler reaches through fuse_req_userdata.
//
// Fixed before the session starts, read by every thread without a lock:
// fs (the pointer), view, options, max_read, timeout. Set in INIT, before
// any other request is dispatched: no_open, passthrough. Thread-safe on
// their own: sources (its own mutex), the FileSystem (its own), the View
// (its own), read_ahead and backing (their own).
//
// Lock order (outermost first): the FileSystem's (OverlayFs's table
// mutex), then the View's mutex, then LazyContent's cache mutex;
// SourceFiles's mutex, ReadAhead's and handles_mu are leaves — nothing is
// called while they are held.
struct Server {
  const std::unique_ptr<FileSystem> fs;
  View& view;  // the FileSystem's
  const ServeOptions options;
  const uint32_t max_read = MaxReadForSplice();
  const double timeout;
  std::once_flag readahead_raised;
  bool no_open = false;             // the kernel takes ENOSYS from OPEN as "never ask again"
  bool passthrough = false;         // UsesPassthrough, decided in INIT
  fuse_session* session = nullptr;  // for notifications (set before it mounts)
  SourceFiles sources;              // every source read of the mount goes through these

  ReadAhead read_ahead;      // what view files' reads ask for ahead
  PassthroughTable backing;  // how each inode's opens are served (passthrough)

  // The handles the kernel holds (fi->fh), each freed at its release, or,
  // when an unmount dropped that (it aborts the connection with releases
  // still queued), with the Server.
  Mutex handles_mu;
  std::unordered_set<Handle*> handles UCFS_GUARDED_BY(handles_mu);
  std::unordered_set<DirHandle*> dir_handles UCFS_GUARDED_BY(handles_mu);

  Server(std::unique_ptr<FileSystem> file_system, ServeOptions o)
      : fs(std::move(file_system)),
        view(fs->view()),
        options(std::move(o)),
        timeout(options.cache_timeout_s),
        sources(view),
        read_ahead(options.prefetch) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();
};

// fi->fh of a handle the Server keeps until Release gives it back.
uint64_t Keep(Server& s, std::unique_ptr<Handle> handle);
uint64_t Keep(Server& s, std::unique_ptr<DirHandle> handle);
std::unique_ptr<Handle> GiveBack(Server& s, uint64_t fh);
std::unique_ptr<DirHandle> GiveBackDir(Server& s, uint64_t fh);

// The fd of source `index`, open and checked against what the view was
// built from (once per `read`), or -errno (EIO for a source that changed).
int SourceFd(SourcesOfRead& read, uint32_t index);

inline Server& Of(fuse_req_t req) { return *static_cast<Server*>(fuse_req_userdata(req)); }

// The errno a Status answers with.
int ErrnoOf(const Status& s);

// The kernel resets a mount's readahead at INIT; the first request after
// it raises it (once).
void RaiseReadaheadOnce(Server& s);

// Replies to a read of bytes [offset, offset + size) of view file
// `view_inode`: spliced from the sources, with prefetch ahead.
void ReplyViewRead(fuse_req_t req, Server& s, InodeId view_inode, size_t size, off_t offset);

// Asks what the connection wants of the kernel (WantedCapabilities).
void InitConnection(void* userdata, struct fuse_conn_info* conn);

// Whether this process may register backing files (CAP_SYS_ADMIN).
bool HasSysAdmin();

// An open of `ino` through `handle` (kept in fi->fh), before its reply:
// served through passthrough where it can be (fi->backing_id set, the page
// cache flags cleared), else left to the daemon. A source that changed
// since the view was built is left to the daemon, whose reads of it fail.
void StartPassthrough(fuse_req_t req, Server& s, fuse_ino_t ino, const Handle& handle,
                      fuse_file_info* fi);
// The release of a handle StartPassthrough was given; `req` null where the
// open's reply failed (req is gone): an upper file's backing id is then
// left to the unmount, which drops them all.
void EndPassthrough(fuse_req_t req, Server& s, fuse_ino_t ino, const Handle& handle);

// The operation table: every request, of either kind of FileSystem.
fuse_lowlevel_ops Operations();

}  // namespace ucfs::fuse

#endif  // UCFS_FUSE_SERVER_H_
