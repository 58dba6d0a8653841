// FaultInjectingWriteEnv: every call checked against the faults a test
// armed, then passed on to the wrapped WriteEnv, or failed without it.
#include "ucfs/base/fault_injecting_write_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace ucfs {
namespace {

std::string_view NameOf(FaultInjectingWriteEnv::Op op) {
  using Op = FaultInjectingWriteEnv::Op;
  switch (op) {
    case Op::kOpen:
      return "open";
    case Op::kMakeDir:
      return "mkdir";
    case Op::kMakeNode:
      return "mknod";
    case Op::kSymlink:
      return "symlink";
    case Op::kLink:
      return "link";
    case Op::kRename:
      return "rename";
    case Op::kUnlink:
      return "unlink";
    case Op::kWrite:
      return "write";
    case Op::kCopy:
      return "copy";
    case Op::kSync:
      return "fsync";
    case Op::kTruncate:
      return "truncate";
    case Op::kAllocate:
      return "fallocate";
    case Op::kChmod:
      return "chmod";
    case Op::kChown:
      return "chown";
    case Op::kSetTimes:
      return "utimensat";
    case Op::kSetXattr:
      return "setxattr";
    case Op::kRemoveXattr:
      return "removexattr";
  }
  return "call";
}

// What `fd` is open on, as /proc/self/fd tells it ("" if it cannot).
std::string FdPath(int fd) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::string path(4096, '\0');
  const ssize_t n = ::readlink(link.c_str(), path.data(), path.size());
  path.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return path;
}

// The path of `name` in `dir` (or of `dir` itself where `name` is empty).
std::string PathAt(int dir, const std::string& name) {
  if (dir == AT_FDCWD || name.starts_with('/')) return name;
  const std::string dir_path = FdPath(dir);
  return name.empty() ? dir_path : dir_path + "/" + name;
}

}  // namespace

void FaultInjectingWriteEnv::Inject(Fault fault) {
  MutexLock lock(mu_);
  faults_.push_back({std::move(fault), 0});
}

void FaultInjectingWriteEnv::ShortWrites(size_t max_bytes) {
  MutexLock lock(mu_);
  max_write_ = max_bytes;
}

void FaultInjectingWriteEnv::FillUpAfter(uint64_t free_bytes, int err) {
  MutexLock lock(mu_);
  free_bytes_ = written_ + free_bytes;
  full_err_ = err;
}

void FaultInjectingWriteEnv::Heal() {
  MutexLock lock(mu_);
  faults_.clear();
  max_write_ = 0;
  free_bytes_.reset();
}

uint64_t FaultInjectingWriteEnv::calls(Op op) const {
  MutexLock lock(mu_);
  auto it = calls_.find(op);
  return it == calls_.end() ? 0 : it->second;
}

uint64_t FaultInjectingWriteEnv::failed() const {
  MutexLock lock(mu_);
  return failed_;
}

uint64_t FaultInjectingWriteEnv::bytes_written() const {
  MutexLock lock(mu_);
  return written_;
}

Status FaultInjectingWriteEnv::Check(Op op, const std::string& path, const std::string& other) {
  MutexLock lock(mu_);
  ++calls_[op];
  for (Armed& armed : faults_) {
    const Fault& f = armed.fault;
    if (f.op && *f.op != op) continue;
    if (!f.path_contains.empty() && path.find(f.path_contains) == std::string::npos &&
        other.find(f.path_contains) == std::string::npos) {
      continue;
    }
    const uint64_t seen = armed.matched++;
    if (seen < f.after || seen - f.after >= f.times) continue;
    ++failed_;
    return Failed(std::string(NameOf(op)) + " " + Printable(path), f.err);
  }
  return Status::OK();
}

Result<size_t> FaultInjectingWriteEnv::Reserve(Op op, int fd, size_t n) {
  const std::string path = FdPath(fd);
  UCFS_RETURN_IF_ERROR(Check(op, path));
  MutexLock lock(mu_);
  if (max_write_ != 0) n = std::min(n, max_write_);
  if (free_bytes_ && n > 0) {
    const uint64_t left = *free_bytes_ > written_ ? *free_bytes_ - written_ : 0;
    if (left == 0) {
      ++failed_;
      return Failed(std::string(NameOf(op)) + " " + Printable(path), full_err_);
    }
    n = static_cast<size_t>(std::min<uint64_t>(n, left));
  }
  written_ += n;
  return n;
}

void FaultInjectingWriteEnv::Unreserve(size_t reserved, size_t moved) {
  MutexLock lock(mu_);
  written_ -= reserved - std::min(reserved, moved);
}

Result<UniqueFd> FaultInjectingWriteEnv::OpenAt(int dir, const std::string& name, int flags,
                                                mode_t mode) {
  UCFS_RETURN_IF_ERROR(Check(Op::kOpen, PathAt(dir, name)));
  return base_->OpenAt(dir, name, flags, mode);
}

Status FaultInjectingWriteEnv::MakeDirAt(int dir, const std::string& name, mode_t mode) {
  UCFS_RETURN_IF_ERROR(Check(Op::kMakeDir, PathAt(dir, name)));
  return base_->MakeDirAt(dir, name, mode);
}

Status FaultInjectingWriteEnv::MakeNodeAt(int dir, const std::string& name, mode_t mode,
                                          dev_t rdev) {
  UCFS_RETURN_IF_ERROR(Check(Op::kMakeNode, PathAt(dir, name)));
  return base_->MakeNodeAt(dir, name, mode, rdev);
}

Status FaultInjectingWriteEnv::SymlinkAt(const std::string& target, int dir,
                                         const std::string& name) {
  UCFS_RETURN_IF_ERROR(Check(Op::kSymlink, PathAt(dir, name)));
  return base_->SymlinkAt(target, dir, name);
}

Status FaultInjectingWriteEnv::LinkAt(int from_dir, const std::string& from, int to_dir,
                                      const std::string& to, int flags) {
  UCFS_RETURN_IF_ERROR(Check(Op::kLink, PathAt(to_dir, to), PathAt(from_dir, from)));
  return base_->LinkAt(from_dir, from, to_dir, to, flags);
}

Status FaultInjectingWriteEnv::RenameAt(int from_dir, const std::string& from, int to_dir,
                                        const std::string& to, unsigned flags) {
  UCFS_RETURN_IF_ERROR(Check(Op::kRename, PathAt(to_dir, to), PathAt(from_dir, from)));
  return base_->RenameAt(from_dir, from, to_dir, to, flags);
}

Status FaultInjectingWriteEnv::UnlinkAt(int dir, const std::string& name, int flags) {
  UCFS_RETURN_IF_ERROR(Check(Op::kUnlink, PathAt(dir, name)));
  return base_->UnlinkAt(dir, name, flags);
}

Result<size_t> FaultInjectingWriteEnv::Write(int fd, std::string_view data, uint64_t offset) {
  UCFS_ASSIGN_OR_RETURN(const size_t n, Reserve(Op::kWrite, fd, data.size()));
  auto written = base_->Write(fd, data.substr(0, n), offset);
  Unreserve(n, written.ok() ? *written : 0);
  return written;
}

Result<size_t> FaultInjectingWriteEnv::CopyRange(int in, uint64_t in_offset, int out,
                                                 uint64_t out_offset, size_t n) {
  UCFS_ASSIGN_OR_RETURN(const size_t allowed, Reserve(Op::kCopy, out, n));
  auto copied = base_->CopyRange(in, in_offset, out, out_offset, allowed);
  Unreserve(allowed, copied.ok() ? *copied : 0);
  return copied;
}

Status FaultInjectingWriteEnv::SyncFileSystem(int fd) {
  UCFS_RETURN_IF_ERROR(Check(Op::kSync, FdPath(fd)));
  return base_->SyncFileSystem(fd);
}

Status FaultInjectingWriteEnv::Sync(int fd, bool data_only) {
  UCFS_RETURN_IF_ERROR(Check(Op::kSync, FdPath(fd)));
  return base_->Sync(fd, data_only);
}

Status FaultInjectingWriteEnv::Truncate(int fd, uint64_t size) {
  UCFS_RETURN_IF_ERROR(Check(Op::kTruncate, FdPath(fd)));
  return base_->Truncate(fd, size);
}

Status FaultInjectingWriteEnv::Allocate(int fd, int mode, uint64_t offset, uint64_t length) {
  UCFS_RETURN_IF_ERROR(Check(Op::kAllocate, FdPath(fd)));
  return base_->Allocate(fd, mode, offset, length);
}

Status FaultInjectingWriteEnv::ChmodAt(int dir, const std::string& name, mode_t mode) {
  UCFS_RETURN_IF_ERROR(Check(Op::kChmod, PathAt(dir, name)));
  return base_->ChmodAt(dir, name, mode);
}

Status FaultInjectingWriteEnv::ChownAt(int dir, const std::string& name, uid_t uid, gid_t gid,
                                       int flags) {
  UCFS_RETURN_IF_ERROR(Check(Op::kChown, PathAt(dir, name)));
  return base_->ChownAt(dir, name, uid, gid, flags);
}

Status FaultInjectingWriteEnv::SetTimesAt(int dir, const std::string& name, const timespec times[2],
                                          int flags) {
  UCFS_RETURN_IF_ERROR(Check(Op::kSetTimes, PathAt(dir, name)));
  return base_->SetTimesAt(dir, name, times, flags);
}

Status FaultInjectingWriteEnv::SetXattr(int fd, const std::string& name, std::string_view value,
                                        int flags) {
  UCFS_RETURN_IF_ERROR(Check(Op::kSetXattr, FdPath(fd)));
  return base_->SetXattr(fd, name, value, flags);
}

Status FaultInjectingWriteEnv::RemoveXattr(int fd, const std::string& name) {
  UCFS_RETURN_IF_ERROR(Check(Op::kRemoveXattr, FdPath(fd)));
  return base_->RemoveXattr(fd, name);
}

}  // namespace ucfs
