// The FUSE adapter: serves a FileSystem (ReadOnlyFs or OverlayFs) through
// libfuse's low-level API.
//
// Thin by design: every decision about what a file contains lives in the
// View, every rule of the tree in the FileSystem; the adapter only
// translates inode numbers, attributes and read pieces into libfuse calls. Source pieces become
// fd-backed buffers, so the kernel can splice tensor bytes from the shards without a copy through
// user space.
#ifndef UCFS_FUSE_FUSE_SERVER_H_
#define UCFS_FUSE_FUSE_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ucfs/vfs/file_system.h"

namespace ucfs::fuse {

struct ServeOptions {
  std::string mountpoint;
  bool foreground = false;
  // Options for libfuse and the kernel ("allow_other"): the mount's own
  // ("ro", "fsname", "default_permissions") come first.
  std::vector<std::string> fuse_options;
  bool fuse_debug = false;
  // How long the kernel may cache names and attributes (and, read-only,
  // pages): files of a read-only mount never change while mounted.
  double cache_timeout_s = 3600;
  // What mount(8), df and findmnt show as the source.
  std::string fsname = "ucfs";
  // Tuning switches (bench/README.md measures each): reading ahead in the
  // source files a file's next pieces come from, and splicing source bytes
  // to the kernel instead of copying them, on by default; dropping source
  // pages once their bytes are in the mount's own page cache, off by
  // default: it halves the page cache a cold read fills, but the
  // invalidation, in the reply path and on the same page-cache lock as the
  // readahead, cost a fifth of cold-read throughput. Kept, the source pages
  // are touched once and so are the first the kernel reclaims.
  bool prefetch = true;
  bool splice = true;
  bool drop_source_pages = false;
  // A writable mount's write-only handles of upper files bypass the
  // mount's page cache (FOPEN_DIRECT_IO), on by default: a write(2) goes
  // to the daemon as the caller's own pages, its megabyte requests in
  // parallel (async direct I/O), one copy fewer than through the page
  // cache; 1.2-2.8x the buffered path's throughput (bench/write_bench.sh).
  // Only write-only handles (such a handle cannot be mmap'd; the kernel
  // drops cached pages a direct write overlaps, so other handles' reads
  // stay coherent). The kernel clears a set-id file's bits only on a
  // buffered write: the daemon clears them on every write (WriteBuf,
  // FileSystem::StartWrite), direct or not. The kernel's writeback cache,
  // faster than buffered but slower than this, is not used: it trusts its
  // own size of a file over the daemon's, so two mounts sharing one upper
  // directory would read each other's files short.
  bool direct_writes = true;
  // Files that are one real file whole (FileSystem::WholeFileOf: a source
  // file passed through, an upper file) are handed to the kernel as backing
  // files, which it then reads and writes itself, past the daemon (FUSE
  // passthrough, fuse/passthrough.h), where the kernel (>= 6.9), libfuse
  // (>= 3.16) and the daemon's privilege (CAP_SYS_ADMIN) allow it; else
  // every read comes to the daemon, as with it off. A read-only mount then
  // takes OPEN and RELEASE (the backing file is given with the open).
  bool passthrough = true;
  // libfuse's worker threads at most: requests served at once (a cold read
  // of a synthesised file waits on its shards' disks, so reads of other
  // files go on meanwhile).
  unsigned max_threads = 16;
  // Called once the file system is mounted (and, without `foreground`, the
  // process has become a daemon).
  std::function<void()> on_mounted;
};

// Mounts `fs` and serves it until unmounted or signalled (SIGINT, SIGTERM,
// SIGHUP): read-only ("ro") or writable as FileSystem::read_only says.
// Returns a process exit status; errors before the mount exists are
// printed to stderr.
int Serve(std::unique_ptr<FileSystem> fs, const ServeOptions& options);

}  // namespace ucfs::fuse

#endif  // UCFS_FUSE_FUSE_SERVER_H_
