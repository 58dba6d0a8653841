// Source files of a View, opened once and checked on every use.
#ifndef UCFS_SRC_FUSE_SOURCE_FDS_H_
#define UCFS_SRC_FUSE_SOURCE_FDS_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "ucfs/view.h"

namespace ucfs::fuse {

// Source files, opened on first use and checked against the identity the
// view recorded: a file rewritten since makes reads of it fail (EIO),
// never return other bytes.
class SourceFds {
 public:
  explicit SourceFds(View& view) : view_(view) {}
  ~SourceFds();
  SourceFds(const SourceFds&) = delete;
  SourceFds& operator=(const SourceFds&) = delete;

  // The fd of source `index`, or -errno.
  int Get(uint32_t index);

 private:
  struct Open {
    int fd = -1;
    FileIdentity identity;  // what the view was built from
  };

  // A changed size or mtime means the bytes the view maps are gone.
  int Check(uint32_t index, const Open& open);
  std::once_flag& ChangedOnce(uint32_t index);

  View& view_;
  std::shared_mutex mu_;
  std::vector<Open> fds_;
  std::mutex once_mu_;
  std::deque<std::once_flag> changed_;
};

}  // namespace ucfs::fuse

#endif  // UCFS_SRC_FUSE_SOURCE_FDS_H_
