// MemEnv: files held in memory, for hermetic tests.
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "ucfs/base/env.h"

namespace ucfs {

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

// An Env below one directory of another (MemEnv::Confine): paths
// elsewhere are refused as a confined PosixEnv refuses them.
class ConfinedEnv final : public Env {
 public:
  ConfinedEnv(Env& inner, std::string dir) : inner_(inner), dir_(std::move(dir)) {}
  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    UCFS_RETURN_IF_ERROR(Check(path));
    return inner_.Open(path);
  }
  Result<FileStat> Stat(const std::string& path) override {
    UCFS_RETURN_IF_ERROR(Check(path));
    return inner_.Stat(path);
  }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    UCFS_RETURN_IF_ERROR(Check(path));
    return inner_.ListDir(path);
  }
  Result<LinkInfo> ReadLink(const std::string& path) override {
    UCFS_RETURN_IF_ERROR(Check(path));
    return inner_.ReadLink(path);
  }

 private:
  Status Check(const std::string& path) const {
    if (IsAtOrBelow(path, dir_)) return Status::OK();
    return Status::Posix(EACCES, "outside the checkpoint root " + dir_ + "; refused")
        .WithFile(path);
  }
  Env& inner_;
  const std::string dir_;
};

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

bool MemEnv::IsDirLocked(const std::string& path) const {
  const std::string dir = StripTrailingSlash(path);
  if (dir == "/" || dirs_.contains(dir)) return true;
  const std::string prefix = dir == "/" ? dir : dir + "/";
  auto file = files_.lower_bound(prefix);
  if (file != files_.end() && file->first.starts_with(prefix)) return true;
  auto made = dirs_.lower_bound(prefix);
  return made != dirs_.end() && made->first.starts_with(prefix);
}

Result<std::unique_ptr<RandomAccessFile>> MemEnv::Open(const std::string& path) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) {
    if (IsDirLocked(path))
      return Status::InvalidArgument(path + ": a directory, not a regular file");
    return Status::NotFound(path + ": No such file or directory");
  }
  return std::unique_ptr<RandomAccessFile>(
      new MemFile(path, it->second.data, this, StatOf(it->second)));
}

Result<FileStat> MemEnv::Stat(const std::string& path) {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) return StatOf(it->second);
  if (auto made = dirs_.find(StripTrailingSlash(path)); made != dirs_.end()) return made->second;
  // Directories exist as prefixes of file paths.
  if (!IsDirLocked(path)) return Status::NotFound(path + ": No such file or directory");
  FileStat st;
  st.is_dir = true;
  st.access = FileAccess{0755, 0, 0};
  return st;
}

Result<std::vector<DirEntry>> MemEnv::ListDir(const std::string& path) {
  MutexLock lock(mu_);
  if (!IsDirLocked(path)) return Status::NotFound(path + ": No such directory");
  const std::string dir = StripTrailingSlash(path);
  const std::string prefix = dir == "/" ? dir : dir + "/";
  std::map<std::string, bool> names;
  auto add = [&](const std::string& below, bool is_dir) {
    std::string rest = below.substr(prefix.size());
    auto slash = rest.find('/');
    if (slash == std::string::npos) {
      names.emplace(rest, is_dir);
    } else {
      names[rest.substr(0, slash)] = true;
    }
  };
  for (auto it = files_.lower_bound(prefix); it != files_.end() && it->first.starts_with(prefix);
       ++it) {
    add(it->first, false);
  }
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && it->first.starts_with(prefix);
       ++it) {
    add(it->first, true);
  }
  std::vector<DirEntry> out;
  for (auto& [name, is_dir] : names) out.push_back({name, is_dir});
  return out;
}

Result<std::string> MemEnv::RealPath(const std::string& path) {
  std::string normal = std::filesystem::path(path).lexically_normal().string();
  normal = StripTrailingSlash(std::move(normal));
  UCFS_RETURN_IF_ERROR(Stat(normal).status());
  return normal;
}

Result<std::shared_ptr<Env>> MemEnv::Confine(const std::string& dir) {
  return std::shared_ptr<Env>(std::make_shared<ConfinedEnv>(*this, dir));
}

Result<bool> MemEnv::MakeDir(const std::string& path, uint32_t mode, int64_t mtime_ns) {
  MutexLock lock(mu_);
  const std::string dir = StripTrailingSlash(path);
  if (files_.contains(dir)) return Status::Posix(EEXIST, dir + ": a file is there");
  if (IsDirLocked(dir)) return false;
  if (!IsDirLocked(std::string(SplitLast(dir).first))) {
    return Status::Posix(ENOENT, dir + ": no parent directory");
  }
  FileStat st;
  st.is_dir = true;
  st.access = FileAccess{mode & 07777, 0, 0};
  st.identity.mtime_ns = mtime_ns;
  st.identity.inode = next_inode_++;
  dirs_.emplace(dir, st);
  return true;
}

}  // namespace ucfs
