// PosixWriteEnv: the real file system's writes, one system call each.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "ucfs/base/write_env.h"

namespace ucfs {
namespace {

// Runs `call` (a system call answering -1 and errno) again while it is
// interrupted: its last answer.
template <typename Call>
auto Retrying(Call call) {
  for (;;) {
    const auto r = call();
    if (r >= 0 || errno != EINTR) return r;
  }
}

// "<op> <name>", or "<op>" of an fd's own file.
std::string Named(std::string_view op, const std::string& name) {
  return name.empty() ? std::string(op) : std::string(op) + " " + Printable(name);
}

// An fd's own entry, by a path the path-only calls accept.
std::string ProcPathOf(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

class PosixWriteEnv final : public WriteEnv {
 public:
  Result<UniqueFd> OpenAt(int dir, const std::string& name, int flags, mode_t mode) override {
    UniqueFd fd(Retrying([&] { return ::openat(dir, name.c_str(), flags | O_CLOEXEC, mode); }));
    if (!fd) return Failed(Named("open", name), errno);
    return fd;
  }

  Status MakeDirAt(int dir, const std::string& name, mode_t mode) override {
    if (::mkdirat(dir, name.c_str(), mode) != 0) return Failed(Named("mkdir", name), errno);
    return Status::OK();
  }

  Status MakeNodeAt(int dir, const std::string& name, mode_t mode, dev_t rdev) override {
    if (::mknodat(dir, name.c_str(), mode, rdev) != 0) return Failed(Named("mknod", name), errno);
    return Status::OK();
  }

  Status SymlinkAt(const std::string& target, int dir, const std::string& name) override {
    if (::symlinkat(target.c_str(), dir, name.c_str()) != 0) {
      return Failed(Named("symlink", name), errno);
    }
    return Status::OK();
  }

  Status LinkAt(int from_dir, const std::string& from, int to_dir, const std::string& to,
                int flags) override {
    if (::linkat(from_dir, from.c_str(), to_dir, to.c_str(), flags) != 0) {
      return Failed(Named("link", from) + " to " + Printable(to), errno);
    }
    return Status::OK();
  }

  Status RenameAt(int from_dir, const std::string& from, int to_dir, const std::string& to,
                  unsigned flags) override {
    if (::renameat2(from_dir, from.c_str(), to_dir, to.c_str(), flags) != 0) {
      return Failed(Named("rename", from) + " to " + Printable(to), errno);
    }
    return Status::OK();
  }

  Status UnlinkAt(int dir, const std::string& name, int flags) override {
    if (::unlinkat(dir, name.c_str(), flags) != 0) {
      return Failed(Named(flags & AT_REMOVEDIR ? "rmdir" : "unlink", name), errno);
    }
    return Status::OK();
  }

  Result<size_t> Write(int fd, std::string_view data, uint64_t offset) override {
    const ssize_t w = Retrying(
        [&] { return ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)); });
    if (w < 0) {
      return Failed(
          "write of " + std::to_string(data.size()) + " bytes at offset " + std::to_string(offset),
          errno);
    }
    return static_cast<size_t>(w);
  }

  Result<size_t> CopyRange(int in, uint64_t in_offset, int out, uint64_t out_offset,
                           size_t n) override {
    loff_t from = static_cast<loff_t>(in_offset);
    loff_t to = static_cast<loff_t>(out_offset);
    const ssize_t c = Retrying([&] { return ::copy_file_range(in, &from, out, &to, n, 0); });
    if (c < 0) {
      return Failed(
          "copy of " + std::to_string(n) + " bytes to offset " + std::to_string(out_offset), errno);
    }
    return static_cast<size_t>(c);
  }

  Status Sync(int fd, bool data_only) override {
    if (Retrying([&] { return data_only ? ::fdatasync(fd) : ::fsync(fd); }) != 0) {
      return Failed(data_only ? "fdatasync" : "fsync", errno);
    }
    return Status::OK();
  }

  Status SyncFileSystem(int fd) override {
    if (Retrying([&] { return ::syncfs(fd); }) != 0) return Failed("syncfs", errno);
    return Status::OK();
  }

  Status Truncate(int fd, uint64_t size) override {
    if (Retrying([&] { return ::ftruncate(fd, static_cast<off_t>(size)); }) != 0) {
      return Failed("truncate to " + std::to_string(size) + " bytes", errno);
    }
    return Status::OK();
  }

  Status Allocate(int fd, int mode, uint64_t offset, uint64_t length) override {
    if (Retrying([&] {
          return ::fallocate(fd, mode, static_cast<off_t>(offset), static_cast<off_t>(length));
        }) != 0) {
      return Failed(
          "fallocate of " + std::to_string(length) + " bytes at offset " + std::to_string(offset),
          errno);
    }
    return Status::OK();
  }

  Status ChmodAt(int dir, const std::string& name, mode_t mode) override {
    const int rc = name.empty() ? ::fchmod(dir, mode) : ::fchmodat(dir, name.c_str(), mode, 0);
    if (rc != 0) return Failed(Named("chmod", name), errno);
    return Status::OK();
  }

  Status ChownAt(int dir, const std::string& name, uid_t uid, gid_t gid, int flags) override {
    const int rc =
        name.empty() ? ::fchown(dir, uid, gid) : ::fchownat(dir, name.c_str(), uid, gid, flags);
    if (rc != 0) return Failed(Named("chown", name), errno);
    return Status::OK();
  }

  Status SetTimesAt(int dir, const std::string& name, const timespec times[2], int flags) override {
    const int rc =
        name.empty() ? ::futimens(dir, times) : ::utimensat(dir, name.c_str(), times, flags);
    if (rc != 0) return Failed(Named("utimensat", name), errno);
    return Status::OK();
  }

  Status SetXattr(int fd, const std::string& name, std::string_view value, int flags) override {
    if (::setxattr(ProcPathOf(fd).c_str(), name.c_str(), value.data(), value.size(), flags) != 0) {
      return Failed(Named("setxattr", name), errno);
    }
    return Status::OK();
  }

  Status RemoveXattr(int fd, const std::string& name) override {
    if (::removexattr(ProcPathOf(fd).c_str(), name.c_str()) != 0) {
      return Failed(Named("removexattr", name), errno);
    }
    return Status::OK();
  }
};

}  // namespace

WriteEnv* WriteEnv::Posix() {
  static PosixWriteEnv env;
  return &env;
}

}  // namespace ucfs
