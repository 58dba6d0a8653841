// What the FUSE adapter decides about I/O, apart from libfuse so that
// tests reach it: which source ranges to ask the kernel for ahead of a
// view file's reads (ReadAhead), and which handles write past the mount's
// page cache (DirectWrites). bench/README.md measures each.
#ifndef UCFS_FUSE_IO_POLICY_H_
#define UCFS_FUSE_IO_POLICY_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <unordered_set>

#include "ucfs/base/thread_annotations.h"

namespace ucfs::fuse {

// Cold reads of a synthesised file jump between the rank shards, which
// defeats the kernel's readahead on them; ucfs knows which source ranges a
// file needs, so it asks for them ahead (POSIX_FADV_WILLNEED) a window at a
// time. Thread-safe.
class ReadAhead {
 public:
  static constexpr uint64_t kWindow = uint64_t{32} << 20;

  struct Range {
    uint64_t offset = 0;
    uint64_t length = 0;
    bool operator==(const Range&) const = default;
  };

  // What to ask for ahead of a read of [begin, begin + size) of view file
  // `file`: at its first read, its first two windows from where it starts,
  // from all its shards at once (whole files, up to 256 MiB, measured
  // slower on whole-tree reads: too many random requests queued at once);
  // then, each time a read crosses into a new window, the one after it;
  // else nothing.
  std::optional<Range> Next(uint64_t file, uint64_t begin, uint64_t size);

 private:
  Mutex mu_;  // a leaf
  std::unordered_set<uint64_t> read_before_ UCFS_GUARDED_BY(mu_);
};

// Whether an open of an upper file bypasses the mount's page cache
// (FOPEN_DIRECT_IO; ServeOptions::direct_writes says why): only when
// `enabled`, for write-only opens (such a handle cannot be mmap'd), and not
// of a set-id file (`mode`), whose bits the kernel clears on a buffered
// write only.
bool DirectWrites(bool enabled, int open_flags, mode_t mode);

}  // namespace ucfs::fuse

#endif  // UCFS_FUSE_IO_POLICY_H_
