// What the FUSE adapter decides about I/O, apart from the calls that
// carry it out so that tests reach it: which source ranges to ask the
// kernel for ahead of a view file's reads (ReadAhead), how large a read
// may be (MaxReadForPipe) and how far the kernel reads ahead of the mount
// (MountDevice, kMountReadaheadKb) and how many of its requests it keeps
// outstanding (kMaxBackground), how the kernel caches an open file
// (CachingOf), and what the connection asks of the kernel at INIT
// (WantedCapabilities, SkipsOpens). bench/README.md measures each switch.
#ifndef UCFS_FUSE_IO_POLICY_H_
#define UCFS_FUSE_IO_POLICY_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

  // `enabled` false (ServeOptions::prefetch): nothing is ever asked for.
  explicit ReadAhead(bool enabled = true) : enabled_(enabled) {}

  // What to ask for ahead of a read of [begin, begin + size) of view file
  // `file`: at its first read, its first two windows from where it starts,
  // from all its shards at once (whole files, up to 256 MiB, measured
  // slower on whole-tree reads: too many random requests queued at once);
  // then, each time a read crosses into a new window, the one after it;
  // else nothing.
  std::optional<Range> Next(uint64_t file, uint64_t begin, uint64_t size);

 private:
  const bool enabled_;
  Mutex mu_;  // a leaf
  std::unordered_set<uint64_t> read_before_ UCFS_GUARDED_BY(mu_);
};

// libfuse splices a read reply only if it fits a pipe (`pipe_max_size`,
// /proc/sys/fs/pipe-max-size, 1 MiB by default) with room for the header
// and a page per buffer; a larger reply falls back to a malloc'd copy of
// the whole reply. Reads are capped to fit, with room for 14 buffers, and
// at 1 MiB (the kernel's max_pages); a pipe size below 256 KiB is taken
// as unreadable (1 MiB).
uint32_t MaxReadForPipe(uint64_t pipe_max_size);

// The kernel gives a FUSE mount 128 KiB of readahead, so reads arrive in
// 128 KiB requests; root may raise it to this (the kernel caps requests at
// max_pages, 1 MiB): fewer, larger requests for the big sequential reads
// of tensor files.
inline constexpr int kMountReadaheadKb = 16384;

// How many readahead requests the kernel keeps outstanding to the daemon
// (its default: 12, throttled from 9). A mount's readahead of
// kMountReadaheadKb is 17 requests of MaxReadForPipe's 960 KiB, so the
// default held back readahead the daemon's threads would serve meanwhile;
// at 32 a file of several shards comes 20-25% sooner, cold or from cached
// sources (bench/README.md, "The first tensor"). The kernel caps it for an
// unprivileged mount (fuse's max_user_bgreq).
inline constexpr unsigned kMaxBackground = 32;
inline constexpr unsigned kCongestionThreshold = kMaxBackground * 3 / 4;

// The device ("0:52") of the mount at `mountpoint` in `mountinfo`
// (/proc/self/mountinfo's text; the last mount there wins), whose
// /sys/class/bdi/<device>/read_ahead_kb is the mount's readahead. From
// mountinfo because a stat of the mountpoint would wait for the daemon
// asking. A mountpoint mountinfo escapes (a space in it) is not found.
std::optional<std::string> MountDevice(std::string_view mountinfo, std::string_view mountpoint);

// Whether an open of an upper file bypasses the mount's page cache
// (FOPEN_DIRECT_IO; ServeOptions::direct_writes says why): only when
// `enabled`, for write-only opens (such a handle cannot be mmap'd), and not
// of a set-id file (`mode`), whose bits the kernel clears on a buffered
// write only.
bool DirectWrites(bool enabled, int open_flags, mode_t mode);

// How the kernel is to cache an open file's pages.
struct OpenCaching {
  bool keep_cache = false;  // FOPEN_KEEP_CACHE: pages kept from earlier opens
  bool direct_io = false;   // FOPEN_DIRECT_IO: past the page cache
  bool operator==(const OpenCaching&) const = default;
};

// An open with `open_flags` of a real (upper) file of mode `mode` (nullopt
// where its fstat failed: cached as usual), or, `mode` unused, of a view
// file (`real_file` false) whose pages may stay cached from an earlier open
// while it is the same view file (`same_view_file`); upper files are read
// fresh at each open, in case the upper directory was touched directly.
// `direct_writes`: ServeOptions::direct_writes.
OpenCaching CachingOf(bool direct_writes, int open_flags, bool real_file,
                      std::optional<mode_t> mode, bool same_view_file);

// FUSE_CAP_PASSTHROUGH where libfuse has it (>= 3.16), else 0: never
// offered.
unsigned PassthroughCapability();

// Whether the mount hands files that are one real file whole to the kernel
// as backing files (FUSE passthrough): `enabled` (ServeOptions::
// passthrough), the kernel `capable` of it (>= 6.9, libfuse >= 3.16) and
// the daemon `privileged` (CAP_SYS_ADMIN, which registering a backing file
// needs).
bool UsesPassthrough(unsigned capable, bool enabled, bool privileged);

// The libfuse capabilities (FUSE_CAP_*) to want of those the kernel is
// `capable` of, from libfuse's default `want`: splicing source bytes out
// when `splice` (ServeOptions::splice); passthrough when `passthrough`
// (UsesPassthrough); for a writable mount (`read_only` false), O_TRUNC
// opens as one OPEN (a view file rewritten whole is never copied up),
// writes spliced in, the caller's umask left to the daemon and no
// writeback cache (ServeOptions::direct_writes says why; the kernel allows
// no passthrough with it either); for a read-only one, pages kept across
// opens (no FUSE_CAP_AUTO_INVAL_DATA).
unsigned WantedCapabilities(unsigned capable, unsigned want, bool splice, bool read_only,
                            bool passthrough = false);

// Whether OPEN is answered ENOSYS, which makes the kernel stop sending OPEN
// and RELEASE for files and keep their pages: only for a read-only mount,
// whose files need nothing per open, on a kernel that supports it, and not
// with `passthrough`: a backing file is given in the reply to an OPEN.
bool SkipsOpens(unsigned capable, bool read_only, bool passthrough = false);

}  // namespace ucfs::fuse

#endif  // UCFS_FUSE_IO_POLICY_H_
