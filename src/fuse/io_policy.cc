#include "fuse/io_policy.h"

#include <fcntl.h>
#include <sys/stat.h>

namespace ucfs::fuse {

std::optional<ReadAhead::Range> ReadAhead::Next(uint64_t file, uint64_t begin, uint64_t size) {
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

bool DirectWrites(bool enabled, int open_flags, mode_t mode) {
  return enabled && (open_flags & O_ACCMODE) == O_WRONLY && (mode & (S_ISUID | S_ISGID)) == 0;
}

}  // namespace ucfs::fuse
