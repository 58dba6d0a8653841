#include "ucfs/base/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ucfs/base/unique_fd.h"

namespace ucfs {

Status RandomAccessFile::ReadExact(uint64_t offset, size_t n, char* buf) const {
  size_t got = 0;
  UCFS_RETURN_IF_ERROR(Read(offset, n, buf, &got));
  if (got != n) {
    return Status::Corruption("truncated: wanted " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + ", file has " + std::to_string(Size()) +
                              " bytes")
        .WithFile(path());
  }
  return Status::OK();
}

Result<FileStat> RandomAccessFile::Stat() const {
  FileStat st;
  st.identity.size = Size();
  st.access = FileAccess{0444, 0, 0};
  return st;
}

Result<std::string> RandomAccessFile::ReadString(uint64_t offset, size_t n) const {
  std::string out(n, '\0');
  UCFS_RETURN_IF_ERROR(ReadExact(offset, n, out.data()));
  return out;
}

Result<std::string> Env::ReadSmallFile(const std::string& path, size_t max_bytes) {
  UCFS_ASSIGN_OR_RETURN(auto file, Open(path));
  if (file->Size() > max_bytes) {
    return Status::InvalidArgument(path + ": " + std::to_string(file->Size()) +
                                   " bytes, more than the " + std::to_string(max_bytes) +
                                   " expected of this file");
  }
  return file->ReadString(0, file->Size());
}

Result<LinkInfo> Env::ReadLink(const std::string& path) {
  return Status::InvalidArgument(path + ": not a symbolic link");
}

bool Env::IsDirectory(const std::string& path) {
  auto st = Stat(path);
  return st.ok() && st->is_dir;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

std::string_view BaseName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// ---------------------------------------------------------------------------
// PosixEnv

namespace {

int64_t Nanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

FileStat StatOf(const struct stat& st) {
  FileStat out;
  out.identity.size = static_cast<uint64_t>(st.st_size);
  out.identity.mtime_ns = Nanos(st.st_mtim);
  out.identity.ctime_ns = Nanos(st.st_ctim);
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
  PosixFile(std::string path, UniqueFd fd, uint64_t size)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size) {}

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
  uint64_t Size() const override { return size_; }
  Result<FileStat> Stat() const override {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) return Status::FromErrno(path_, errno);
    return StatOf(st);
  }
  const std::string& path() const override { return path_; }
  int fd() const override { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t size_;
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
  return std::unique_ptr<RandomAccessFile>(
      new PosixFile(path, std::move(fd), static_cast<uint64_t>(st.st_size)));
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
    std::string_view rel(path);
    if (rel == root_) {
      rel = ".";
    } else if (rel.size() > root_.size() && rel.starts_with(root_) &&
               (root_ == "/" || rel[root_.size()] == '/')) {
      rel.remove_prefix(root_ == "/" ? 1 : root_.size() + 1);
    } else {
      return Status::Posix(EACCES, "outside the checkpoint root " + root_ + "; refused")
          .WithFile(path);
    }
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

namespace {

class RoutedEnv final : public Env {
 public:
  RoutedEnv(std::shared_ptr<Env> base, std::string dir, std::shared_ptr<Env> below)
      : base_(std::move(base)), dir_(std::move(dir)), below_(std::move(below)) {}
  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    return For(path).Open(path);
  }
  Result<FileStat> Stat(const std::string& path) override { return For(path).Stat(path); }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    return For(path).ListDir(path);
  }
  Result<LinkInfo> ReadLink(const std::string& path) override { return For(path).ReadLink(path); }
  std::string Where(const std::string& path) override { return For(path).Where(path); }

 private:
  Env& For(const std::string& path) const {
    const bool below = path == dir_ || (path.starts_with(dir_) && path.size() > dir_.size() &&
                                        (dir_ == "/" || path[dir_.size()] == '/'));
    return below ? *below_ : *base_;
  }
  const std::shared_ptr<Env> base_;
  const std::string dir_;
  const std::shared_ptr<Env> below_;
};

}  // namespace

std::unique_ptr<Env> NewRoutedEnv(std::shared_ptr<Env> base, std::string dir,
                                  std::shared_ptr<Env> below) {
  return std::make_unique<RoutedEnv>(std::move(base), std::move(dir), std::move(below));
}

Result<std::string> ResolveCheckpointRoot(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return Status::FromErrno(path, errno);
  std::string dir(resolved);
  std::free(resolved);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(path, errno);
  if (!S_ISDIR(st.st_mode)) return dir;  // reported by the checkpoint's Open
  // A tag directory (no `latest` of its own) whose parent is the root.
  if (::lstat(JoinPath(dir, "latest").c_str(), &st) == 0 || dir == "/") return dir;
  std::string parent = dir.substr(0, dir.rfind('/'));
  if (parent.empty()) parent = "/";
  if (::lstat(JoinPath(parent, "latest").c_str(), &st) == 0) return parent;
  return dir;
}

// ---------------------------------------------------------------------------
// MemEnv

namespace {

class MemFile final : public RandomAccessFile {
 public:
  MemFile(std::string path, std::shared_ptr<const std::string> data, const MemEnv* env,
          FileStat at_open)
      : path_(std::move(path)), data_(std::move(data)), env_(env), at_open_(at_open) {}
  Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const override {
    if (offset >= data_->size()) {
      *bytes_read = 0;
      return Status::OK();
    }
    size_t avail = std::min<uint64_t>(n, data_->size() - offset);
    std::copy_n(data_->data() + offset, avail, buf);
    *bytes_read = avail;
    return Status::OK();
  }
  uint64_t Size() const override { return data_->size(); }
  // Like an fstat: the file as it is now if it is still at its path (an
  // in-place edit shows), else as it was (a replaced or removed file's
  // open descriptor keeps the old inode).
  Result<FileStat> Stat() const override {
    return env_->StatIfSame(path_, at_open_.identity.inode).value_or(at_open_);
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<const std::string> data_;
  const MemEnv* env_;
  FileStat at_open_;
};

std::string StripTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

void MemEnv::WriteFile(const std::string& path, std::string contents) {
  MutexLock lock(mu_);
  auto& f = files_[path];
  if (f.inode == 0) f.inode = next_inode_++;
  f.data = std::make_shared<const std::string>(std::move(contents));
  f.version = clock_++;
  f.ctime = f.version;
}

void MemEnv::TouchCtime(const std::string& path) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) it->second.ctime = clock_++;
}

void MemEnv::SetAccess(const std::string& path, FileAccess access) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) it->second.access = access;
}

FileStat MemEnv::StatOf(const File& f) {
  FileStat st;
  st.identity = FileIdentity{f.data->size(), f.version, f.ctime, f.inode, 0};
  st.access = f.access;
  return st;
}

std::optional<FileStat> MemEnv::StatIfSame(const std::string& path, uint64_t inode) const {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end() || it->second.inode != inode) return std::nullopt;
  return StatOf(it->second);
}

bool MemEnv::RemoveFile(const std::string& path) {
  MutexLock lock(mu_);
  return files_.erase(path) > 0;
}

const std::string* MemEnv::Contents(const std::string& path) const {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? nullptr : it->second.data.get();
}

Status MemEnv::CopyTreeFrom(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto rel = std::filesystem::relative(it->path(), dir).string();
    WriteFile(JoinPath(prefix, rel), std::move(data));
  }
  if (ec) return Status::IOError(dir + ": " + ec.message());
  return Status::OK();
}

Result<std::unique_ptr<RandomAccessFile>> MemEnv::Open(const std::string& path) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) {
    std::string prefix = StripTrailingSlash(path) + "/";
    auto below = files_.lower_bound(prefix);
    if (below != files_.end() && below->first.compare(0, prefix.size(), prefix) == 0) {
      return Status::InvalidArgument(path + ": a directory, not a regular file");
    }
    return Status::NotFound(path + ": No such file or directory");
  }
  return std::unique_ptr<RandomAccessFile>(
      new MemFile(path, it->second.data, this, StatOf(it->second)));
}

Result<FileStat> MemEnv::Stat(const std::string& path) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) return StatOf(it->second);
  // Directories exist as prefixes of file paths.
  std::string prefix = StripTrailingSlash(path) + "/";
  auto below = files_.lower_bound(prefix);
  if (below == files_.end() || below->first.compare(0, prefix.size(), prefix) != 0) {
    return Status::NotFound(path + ": No such file or directory");
  }
  FileStat st;
  st.is_dir = true;
  st.access = FileAccess{0755, 0, 0};
  return st;
}

Result<std::vector<DirEntry>> MemEnv::ListDir(const std::string& path) {
  MutexLock lock(mu_);
  std::string prefix = StripTrailingSlash(path) + "/";
  std::map<std::string, bool> names;
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    std::string rest = it->first.substr(prefix.size());
    auto slash = rest.find('/');
    if (slash == std::string::npos) {
      names.emplace(rest, false);
    } else {
      names[rest.substr(0, slash)] = true;
    }
  }
  if (names.empty()) return Status::NotFound(path + ": No such directory");
  std::vector<DirEntry> out;
  for (auto& [name, is_dir] : names) out.push_back({name, is_dir});
  return out;
}

}  // namespace ucfs
