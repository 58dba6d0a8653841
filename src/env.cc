#include "ucfs/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace ucfs {

Status RandomAccessFile::ReadExact(uint64_t offset, size_t n, char* buf) const {
  size_t got = 0;
  UCFS_RETURN_IF_ERROR(Read(offset, n, buf, &got));
  if (got != n) {
    return Status::Corruption(path() + ": truncated: wanted " + std::to_string(n) +
                              " bytes at offset " + std::to_string(offset) + ", file has " +
                              std::to_string(Size()) + " bytes");
  }
  return Status::OK();
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

class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixFile() override { ::close(fd_); }

  Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, buf + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        *bytes_read = done;
        return Status::FromErrno(path_ + ": read at offset " + std::to_string(offset + done),
                                 errno);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    *bytes_read = done;
    return Status::OK();
  }
  uint64_t Size() const override { return size_; }
  const std::string& path() const override { return path_; }
  int fd() const override { return fd_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    // O_RDONLY always: ucfs never opens a source file for writing.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::InvalidArgument(path + ": not a regular file");
    }
    return std::unique_ptr<RandomAccessFile>(
        new PosixFile(path, fd, static_cast<uint64_t>(st.st_size)));
  }

  Result<FileIdentity> Stat(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(path, errno);
    FileIdentity id;
    id.size = static_cast<uint64_t>(st.st_size);
    id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    id.inode = st.st_ino;
    id.device = st.st_dev;
    return id;
  }

  bool IsDirectory(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return Status::FromErrno(path, errno);
    std::vector<DirEntry> out;
    while (struct dirent* e = ::readdir(dir)) {
      std::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK)
        is_dir = IsDirectory(JoinPath(path, name));
      out.push_back({std::string(name), is_dir});
    }
    ::closedir(dir);
    std::sort(out.begin(), out.end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
  }
};

}  // namespace

Env* Env::Posix() {
  static PosixEnv env;
  return &env;
}

// ---------------------------------------------------------------------------
// MemEnv

namespace {

class MemFile final : public RandomAccessFile {
 public:
  MemFile(std::string path, std::shared_ptr<const std::string> data)
      : path_(std::move(path)), data_(std::move(data)) {}
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
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<const std::string> data_;
};

std::string StripTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

void MemEnv::WriteFile(const std::string& path, std::string contents) {
  std::lock_guard lock(mu_);
  auto& f = files_[path];
  if (f.inode == 0) f.inode = next_inode_++;
  f.data = std::make_shared<const std::string>(std::move(contents));
  f.version = clock_++;
}

bool MemEnv::RemoveFile(const std::string& path) {
  std::lock_guard lock(mu_);
  return files_.erase(path) > 0;
}

const std::string* MemEnv::Contents(const std::string& path) const {
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return Status::NotFound(path + ": No such file or directory");
  return std::unique_ptr<RandomAccessFile>(new MemFile(path, it->second.data));
}

Result<FileIdentity> MemEnv::Stat(const std::string& path) {
  std::lock_guard lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return Status::NotFound(path + ": No such file or directory");
  return FileIdentity{it->second.data->size(), it->second.version, it->second.inode, 0};
}

bool MemEnv::IsDirectory(const std::string& path) {
  std::lock_guard lock(mu_);
  std::string prefix = StripTrailingSlash(path) + "/";
  auto it = files_.lower_bound(prefix);
  return it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

Result<std::vector<DirEntry>> MemEnv::ListDir(const std::string& path) {
  std::lock_guard lock(mu_);
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
