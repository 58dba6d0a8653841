#include "fuse/source_fds.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ucfs::fuse {

SourceFds::~SourceFds() {
  for (const Open& o : fds_) {
    if (o.fd >= 0) ::close(o.fd);
  }
}

int SourceFds::Get(uint32_t index) {
  {
    std::shared_lock lock(mu_);
    if (index < fds_.size() && fds_[index].fd >= 0) return Check(index, fds_[index]);
  }
  std::unique_lock lock(mu_);
  if (fds_.size() <= index) fds_.resize(index + 1);
  if (fds_[index].fd < 0) {
    const SourceFile src = view_.source(index);
    int fd = ::open(src.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && errno == EPERM) fd = ::open(src.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      spdlog::error("{}: cannot open source file: {}", src.path, std::strerror(errno));
      return -EIO;
    }
    fds_[index] = Open{fd, src.identity};
  }
  return Check(index, fds_[index]);
}

int SourceFds::Check(uint32_t index, const Open& open) {
  struct stat st {};
  if (::fstat(open.fd, &st) != 0) return -EIO;
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (static_cast<uint64_t>(st.st_size) != open.identity.size || mtime != open.identity.mtime_ns) {
    const SourceFile src = view_.source(index);
    std::call_once(ChangedOnce(index), [&] {
      spdlog::error(
          "{}: changed since it was mounted (size {} -> {}); reads that need it fail "
          "with EIO",
          src.path, src.identity.size, st.st_size);
    });
    return -EIO;
  }
  return open.fd;
}

std::once_flag& SourceFds::ChangedOnce(uint32_t index) {
  std::lock_guard lock(once_mu_);
  while (changed_.size() <= index) changed_.emplace_back();
  return changed_[index];
}

}  // namespace ucfs::fuse
