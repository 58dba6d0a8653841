// PosixEnv, the real file system, and ConfinedPosixEnv, the real file
// system below one directory.
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "ucfs/base/env.h"
#include "ucfs/base/unique_fd.h"
#include "ucfs/base/write_env.h"

namespace ucfs {

namespace {

FileStat StatOf(const struct stat& st) {
  FileStat out;
  out.identity.size = static_cast<uint64_t>(st.st_size);
  out.identity.mtime_ns = NanosOf(st.st_mtim);
  out.identity.ctime_ns = NanosOf(st.st_ctim);
  out.identity.inode = st.st_ino;
  out.identity.device = st.st_dev;
  out.access = FileAccess{static_cast<uint32_t>(st.st_mode & 07777), st.st_uid, st.st_gid};
  out.is_dir = S_ISDIR(st.st_mode);
  return out;
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(std::string path, UniqueFd fd, FileStat opened)
      : path_(std::move(path)), fd_(std::move(fd)), opened_(std::move(opened)) {}

  Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_.get(), buf + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        *bytes_read = done;
        return Status::FromErrno(path_ + ": read at offset " + std::to_string(offset + done), errno)
            .WithFile(path_);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    *bytes_read = done;
    return Status::OK();
  }
  uint64_t Size() const override { return opened_.identity.size; }
  Result<FileStat> Stat() const override {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) return Status::FromErrno(path_, errno);
    return StatOf(st);
  }
  Result<FileStat> OpenedStat() const override { return opened_; }
  const std::string& path() const override { return path_; }
  int fd() const override { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
  FileStat opened_;
};

// The error for an open(2) or stat(2) of `path` that failed with `err`,
// saying what a confined resolution refused.
Status OpenError(const std::string& path, int err) {
  if (err == EXDEV) {
    return Status::Posix(EACCES, "a symlink leads out of the checkpoint root; refused")
        .WithFile(path);
  }
  if (err == ELOOP) return Status::Posix(ELOOP, "too many levels of symbolic links").WithFile(path);
  return Status::FromErrno(path, err).WithFile(path);
}

// Opening never blocks: O_NONBLOCK makes open(2) of a FIFO without a writer
// return at once (the fstat then refuses it), and O_NOCTTY keeps a terminal
// device from becoming ours. Neither changes reads of a regular file.
constexpr int kReadFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

Result<std::unique_ptr<RandomAccessFile>> FinishOpen(const std::string& path, UniqueFd fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(path, errno).WithFile(path);
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(std::string(KindOf(st.st_mode)) + ", not a regular file")
        .WithFile(path);
  }
  return std::unique_ptr<RandomAccessFile>(new PosixFile(path, std::move(fd), StatOf(st)));
}

Result<std::vector<DirEntry>> ListOpenDir(const std::string& path, UniqueFd fd) {
  DIR* dir = ::fdopendir(fd.get());
  if (dir == nullptr) return Status::FromErrno(path, errno);
  const int dir_fd = fd.release();  // owned by `dir` now
  std::vector<DirEntry> out;
  while (struct dirent* e = ::readdir(dir)) {
    std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    bool is_symlink = e->d_type == DT_LNK;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_symlink =
          ::fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
      is_dir = !is_symlink && S_ISDIR(st.st_mode);
    }
    if (is_symlink) {
      // Counts as what it points to, resolved from this directory (a
      // dangling or escaping one is listed as a file, and refused when
      // opened).
      struct stat st {};
      is_dir = ::fstatat(dir_fd, e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
    }
    out.push_back({std::string(name), is_dir, is_symlink});
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

// The link an O_PATH | O_NOFOLLOW descriptor refers to.
Result<LinkInfo> LinkOf(const std::string& path, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(path, errno);
  if (!S_ISLNK(st.st_mode)) return Status::InvalidArgument(path + ": not a symbolic link");
  LinkInfo out;
  out.stat = StatOf(st);
  out.target.resize(static_cast<size_t>(st.st_size) + 1);
  for (;;) {
    const ssize_t n = ::readlinkat(fd, "", out.target.data(), out.target.size());
    if (n < 0) return Status::FromErrno(path, errno);
    if (static_cast<size_t>(n) < out.target.size()) {
      out.target.resize(static_cast<size_t>(n));
      return out;
    }
    out.target.resize(out.target.size() * 2);  // it grew meanwhile
  }
}

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    // O_RDONLY always: ucfs never opens a source file for writing.
    UniqueFd fd(::open(path.c_str(), kReadFlags | O_NOATIME));
    if (!fd && errno == EPERM) fd.reset(::open(path.c_str(), kReadFlags));  // not our file
    if (!fd) return OpenError(path, errno);
    return FinishOpen(path, std::move(fd));
  }

  Result<FileStat> Stat(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return OpenError(path, errno);
    return StatOf(st);
  }

  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return OpenError(path, errno);
    return ListOpenDir(path, std::move(fd));
  }

  Result<LinkInfo> ReadLink(const std::string& path) override {
    UniqueFd fd(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return OpenError(path, errno);
    return LinkOf(path, fd.get());
  }

  Result<std::string> RealPath(const std::string& path) override { return ucfs::RealPath(path); }

  Result<std::shared_ptr<Env>> Confine(const std::string& dir) override {
    UCFS_ASSIGN_OR_RETURN(std::unique_ptr<Env> confined, NewConfinedPosixEnv(dir));
    return std::shared_ptr<Env>(std::move(confined));
  }

  Result<bool> MakeDir(const std::string& path, uint32_t mode, int64_t mtime_ns) override {
    WriteEnv& writer = *Writer();
    if (Status made = writer.MakeDirAt(AT_FDCWD, path, mode); !made.ok()) {
      if (made.posix_errno() == EEXIST) return false;
      return made.WithFile(path);
    }
    // Exactly `mode`, whatever the umask took from it.
    UCFS_RETURN_IF_ERROR(writer.ChmodAt(AT_FDCWD, path, mode).WithFile(path));
    const timespec times[2] = {TimespecOf(mtime_ns), TimespecOf(mtime_ns)};
    UCFS_RETURN_IF_ERROR(writer.SetTimesAt(AT_FDCWD, path, times, 0).WithFile(path));
    return true;
  }
};

// PosixEnv below a root: every path is resolved by openat2 from the root's
// descriptor with RESOLVE_BENEATH, which fails (EXDEV) on any step — a
// "..", an absolute or a relative symlink — that would leave it.
class ConfinedPosixEnv final : public Env {
 public:
  ConfinedPosixEnv(std::string root, UniqueFd root_fd)
      : root_(std::move(root)), root_fd_(std::move(root_fd)) {}

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    UCFS_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(path, kReadFlags | O_NOATIME));
    return FinishOpen(path, std::move(fd));
  }

  Result<FileStat> Stat(const std::string& path) override {
    UCFS_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(path, O_PATH | O_CLOEXEC));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(path, errno);
    return StatOf(st);
  }

  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    UCFS_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return ListOpenDir(path, std::move(fd));
  }

  // The link itself lies beneath the root (its parents are resolved so);
  // where it points does not matter: nothing is read through it.
  Result<LinkInfo> ReadLink(const std::string& path) override {
    UCFS_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(path, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    return LinkOf(path, fd.get());
  }

 private:
  Result<UniqueFd> OpenBeneath(const std::string& path, int flags) const {
    std::optional<std::string_view> below = RelativeBelow(path, root_);
    if (!below) {
      return Status::Posix(EACCES, "outside the checkpoint root " + root_ + "; refused")
          .WithFile(path);
    }
    const std::string_view rel = below->empty() ? "." : *below;
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags);
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    const std::string rel_path(rel);
    for (;;) {
      UniqueFd fd(static_cast<int>(
          ::syscall(SYS_openat2, root_fd_.get(), rel_path.c_str(), &how, sizeof(how))));
      if (fd) return fd;
      if (errno == EPERM && (flags & O_NOATIME) != 0) {  // O_NOATIME on another's file
        how.flags &= ~static_cast<uint64_t>(O_NOATIME);
        continue;
      }
      if (errno == EAGAIN || errno == EINTR) continue;  // a rename raced the lookup
      return OpenError(path, errno);
    }
  }

  const std::string root_;
  const UniqueFd root_fd_;
};

}  // namespace

Env* Env::Posix() {
  static PosixEnv env;
  return &env;
}

Result<std::unique_ptr<Env>> NewConfinedPosixEnv(const std::string& root) {
  if (root.empty() || root[0] != '/') {
    return Status::InvalidArgument(root + ": the confinement root must be an absolute path");
  }
  UniqueFd fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::FromErrno(root, errno);
  return std::unique_ptr<Env>(new ConfinedPosixEnv(root, std::move(fd)));
}

}  // namespace ucfs
