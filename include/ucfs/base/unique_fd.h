// UniqueFd: a file descriptor with one owner, closed when the owner goes.
//
// Every descriptor ucfs opens on a source file lives in one of these (as
// TensorStore's UniqueHandle, passthrough_hp's Inode): no fd is closed by
// hand, none leaks on an error path.
#ifndef UCFS_BASE_UNIQUE_FD_H_
#define UCFS_BASE_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace ucfs {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  // Gives up ownership (to fdopendir, say) and returns the fd.
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace ucfs

#endif  // UCFS_BASE_UNIQUE_FD_H_
