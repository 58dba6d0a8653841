#include "fuse/io_policy.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "fuse/libfuse.h"

namespace ucfs::fuse {

std::optional<ReadAhead::Range> ReadAhead::Next(uint64_t file, uint64_t begin, uint64_t size) {
  if (!enabled_) return std::nullopt;
  bool first_read;
  {
    MutexLock lock(mu_);
    first_read = read_before_.insert(file).second;
  }
  if (first_read) return Range{begin, 2 * kWindow};
  if (begin / kWindow != (begin + size) / kWindow) {
    return Range{((begin + size) / kWindow + 1) * kWindow, kWindow};
  }
  return std::nullopt;
}

uint32_t MaxReadForPipe(uint64_t pipe_max_size) {
  const uint64_t pipe_max = pipe_max_size >= (256u << 10) ? pipe_max_size : 1 << 20;
  return static_cast<uint32_t>(std::min<uint64_t>(pipe_max, 1 << 20) - (64u << 10));
}

std::optional<std::string> MountDevice(std::string_view mountinfo, std::string_view mountpoint) {
  std::optional<std::string> device;
  std::istringstream lines{std::string(mountinfo)};
  std::string line;
  while (std::getline(lines, line)) {
    // "36 25 0:52 / /mnt/run7 rw,... - fuse.ucfs ucfs rw,..."
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    if (fields >> id >> parent >> dev >> root >> point && point == mountpoint) device = dev;
  }
  return device;
}

bool DirectWrites(bool enabled, int open_flags, mode_t mode) {
  return enabled && (open_flags & O_ACCMODE) == O_WRONLY && (mode & (S_ISUID | S_ISGID)) == 0;
}

OpenCaching CachingOf(bool direct_writes, int open_flags, bool real_file,
                      std::optional<mode_t> mode, bool same_view_file) {
  OpenCaching c;
  c.keep_cache = !real_file && same_view_file;
  c.direct_io = real_file && mode && DirectWrites(direct_writes, open_flags, *mode);
  return c;
}

namespace {

// A FUSE_CAP_* flag as the 32-bit `want` and `capable` hold it (libfuse
// 3.17 made them 64-bit constants; every one of these fits).
constexpr unsigned Cap(uint64_t flags) { return static_cast<unsigned>(flags); }

}  // namespace

unsigned PassthroughCapability() {
#if UCFS_FUSE_PASSTHROUGH
  return Cap(FUSE_CAP_PASSTHROUGH);
#else
  return 0;
#endif
}

bool UsesPassthrough(unsigned capable, bool enabled, bool privileged) {
  const unsigned cap = PassthroughCapability();
  return enabled && privileged && cap != 0 && (capable & cap) != 0;
}

unsigned WantedCapabilities(unsigned capable, unsigned want, bool splice, bool read_only,
                            bool passthrough) {
  const auto offered = [&](unsigned cap) { return capable & cap; };
  // Files that are one real file whole are read (and written) by the
  // kernel from that file, past the daemon (fuse/passthrough.h).
  if (passthrough) want |= offered(PassthroughCapability());
  // Tensor bytes go from the shards to the kernel by splice.
  if (splice) {
    want |= offered(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  } else {
    want &= ~Cap(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }
  if (read_only) {
    // Files are immutable while mounted: keep their pages across opens.
    return want & ~Cap(FUSE_CAP_AUTO_INVAL_DATA);
  }
  // open(O_TRUNC) arrives as one OPEN, not a SETATTR first: a view file
  // rewritten whole (DeepSpeed's `latest`) is never copied up.
  want |= offered(FUSE_CAP_ATOMIC_O_TRUNC);
  // Writes arrive as they are, spliced from the kernel.
  want |= offered(FUSE_CAP_SPLICE_READ);
  // The daemon's size of a file is the truth (ServeOptions::direct_writes).
  want &= ~Cap(FUSE_CAP_WRITEBACK_CACHE);
  // The caller's umask comes with each create, for ucfs to apply (once:
  // otherwise the kernel applies it and the upper file system the
  // daemon's on top).
  want |= offered(FUSE_CAP_DONT_MASK);
  return want;
}

bool SkipsOpens(unsigned capable, bool read_only, bool passthrough) {
  return read_only && !passthrough && (capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
}

}  // namespace ucfs::fuse
