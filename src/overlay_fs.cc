#include "ucfs/overlay_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace ucfs {
namespace {

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

Status Errno(const std::string& what) { return Status::FromErrno(what, errno); }

}  // namespace

OverlayFs::OverlayFs(std::unique_ptr<Overlay> overlay, std::shared_ptr<View> view)
    : overlay_(std::move(overlay)), view_(std::move(view)), uid_(::getuid()), gid_(::getgid()) {
  nodes_[kRootInode] = Node{"", false, 1};
  by_path_[""] = kRootInode;
}

OverlayFs::~OverlayFs() = default;

size_t OverlayFs::inode_count() {
  std::lock_guard lock(mu_);
  return nodes_.size();
}

Result<std::string> OverlayFs::PathOf(InodeId inode) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || it->second.detached) {
    return Status::Posix(ESTALE, "inode " + std::to_string(inode) + " was removed");
  }
  return it->second.path;
}

Result<std::string> OverlayFs::ChildPath(InodeId parent, std::string_view name) {
  if (!IsSafePathComponent(name)) return Status::Posix(EINVAL, std::string(name) + ": bad name");
  UCFS_ASSIGN_OR_RETURN(std::string dir, PathOf(parent));
  return Join(dir, name);
}

InodeId OverlayFs::InodeFor(const std::string& path, uint64_t count) {
  auto [it, inserted] = by_path_.try_emplace(path, 0);
  if (inserted) {
    it->second = next_inode_++;
    nodes_[it->second] = Node{path, false, 0};
  }
  nodes_[it->second].lookups += count;
  return it->second;
}

Result<struct stat> OverlayFs::StatPath(const std::string& path, InodeId inode) {
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  struct stat st {};
  if (e.in_upper) {
    if (::lstat(e.upper_path.c_str(), &st) != 0) return Errno(e.upper_path);
  } else {
    UCFS_ASSIGN_OR_RETURN(Attr a, view_->GetAttr(e.lower));
    // Writable to its owner: a write copies the file up.
    st.st_mode = (a.is_dir ? S_IFDIR : S_IFREG) | a.mode | 0200;
    st.st_nlink = a.is_dir ? 2 : 1;
    st.st_size = static_cast<off_t>(a.size);
    st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
    st.st_uid = uid_;
    st.st_gid = gid_;
    st.st_mtim.tv_sec = a.mtime_ns / 1000000000;
    st.st_mtim.tv_nsec = a.mtime_ns % 1000000000;
    st.st_atim = st.st_mtim;
    st.st_ctim = st.st_mtim;
  }
  st.st_ino = inode;
  st.st_blksize = 128 << 10;
  return st;
}

void OverlayFs::Detach(const std::string& path) {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return;
  Node& node = nodes_[it->second];
  node.detached = true;
  node.path.clear();
  by_path_.erase(it);
}

void OverlayFs::Move(const std::string& from, const std::string& to) {
  Detach(to);
  const std::string below = from + "/";
  std::vector<std::pair<std::string, InodeId>> moved;
  for (const auto& [path, inode] : by_path_) {
    if (path == from || path.starts_with(below)) moved.emplace_back(path, inode);
  }
  for (const auto& [path, inode] : moved) {
    by_path_.erase(path);
    std::string now = to + path.substr(from.size());
    nodes_[inode].path = now;
    by_path_[std::move(now)] = inode;
  }
}

Result<struct stat> OverlayFs::Lookup(InodeId parent, std::string_view name) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  // Stat first: a failed lookup must not leave an inode behind.
  const auto known = by_path_.find(path);
  UCFS_ASSIGN_OR_RETURN(struct stat st,
                        StatPath(path, known == by_path_.end() ? 0 : known->second));
  st.st_ino = InodeFor(path, 1);
  return st;
}

void OverlayFs::Forget(InodeId inode, uint64_t count) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || inode == kRootInode) return;
  Node& node = it->second;
  node.lookups = node.lookups > count ? node.lookups - count : 0;
  if (node.lookups > 0) return;
  if (!node.detached) by_path_.erase(node.path);
  nodes_.erase(it);
}

Result<struct stat> OverlayFs::GetAttr(InodeId inode, int fd) {
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Errno("fstat");
    st.st_ino = inode;
    return st;
  }
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  return StatPath(path, inode);
}

Result<std::vector<std::pair<std::string, struct stat>>> OverlayFs::ReadDir(InodeId dir) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(dir));
  UCFS_ASSIGN_OR_RETURN(auto entries, overlay_->ReadDir(path));
  std::vector<std::pair<std::string, struct stat>> out;
  out.reserve(entries.size());
  for (const auto& [name, entry] : entries) {
    const std::string child = Join(path, name);
    // An entry that vanished between the listing and its stat is skipped.
    auto st = StatPath(child, InodeFor(child, 0));
    if (st.ok()) out.emplace_back(name, *st);
  }
  return out;
}

Result<InodeId> OverlayFs::ViewInodeOf(InodeId inode) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  return e.in_upper ? 0 : e.lower;
}

Result<OverlayFs::Handle> OverlayFs::Open(InodeId inode, int flags) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  // Buffers come from libfuse, not aligned for O_DIRECT.
  flags &= ~(O_CREAT | O_EXCL | O_DIRECT | O_NOCTTY);
  Handle handle;
  if ((flags & O_ACCMODE) == O_RDONLY && !(flags & O_TRUNC)) {
    UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
    if (e.is_dir) return Status::Posix(EISDIR, path + ": is a directory");
    if (!e.in_upper) {
      handle.view_inode = e.lower;
      return handle;
    }
    handle.fd = ::open(e.upper_path.c_str(), flags | O_CLOEXEC);
    if (handle.fd < 0) return Errno(e.upper_path);
    return handle;
  }
  UCFS_ASSIGN_OR_RETURN(handle.fd, overlay_->OpenWrite(path, flags, 0));
  return handle;
}

Result<std::pair<struct stat, OverlayFs::Handle>> OverlayFs::Create(InodeId parent,
                                                                    std::string_view name,
                                                                    int flags, mode_t mode) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  flags &= ~(O_DIRECT | O_NOCTTY);
  Handle handle;
  UCFS_ASSIGN_OR_RETURN(handle.fd, overlay_->OpenWrite(path, flags | O_CREAT, mode & 07777));
  struct stat st {};
  if (::fstat(handle.fd, &st) != 0) {
    Status s = Errno(path);
    ::close(handle.fd);
    return s;
  }
  st.st_ino = InodeFor(path, 1);
  return std::make_pair(st, handle);
}

Result<struct stat> OverlayFs::MakeDir(InodeId parent, std::string_view name, mode_t mode) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->MakeDir(path, mode & 07777));
  UCFS_ASSIGN_OR_RETURN(struct stat st, StatPath(path, 0));
  st.st_ino = InodeFor(path, 1);
  return st;
}

Status OverlayFs::Unlink(InodeId parent, std::string_view name) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->Unlink(path));
  Detach(path);
  return Status::OK();
}

Status OverlayFs::RemoveDir(InodeId parent, std::string_view name) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->RemoveDir(path));
  Detach(path);
  return Status::OK();
}

Status OverlayFs::Rename(InodeId parent, std::string_view name, InodeId new_parent,
                         std::string_view new_name, bool no_replace) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string from, ChildPath(parent, name));
  UCFS_ASSIGN_OR_RETURN(std::string to, ChildPath(new_parent, new_name));
  UCFS_RETURN_IF_ERROR(overlay_->Rename(from, to, no_replace));
  if (from != to) Move(from, to);
  return Status::OK();
}

Result<struct stat> OverlayFs::SetAttr(InodeId inode, const SetAttrRequest& request, int fd) {
  std::lock_guard lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  if (!e.in_upper) {
    if (e.is_dir) {
      UCFS_RETURN_IF_ERROR(overlay_->EnsureUpperDir(path));
    } else {
      // Copied up, or only made empty when that is what is asked.
      const bool to_empty = request.size && *request.size == 0;
      UCFS_ASSIGN_OR_RETURN(int copy,
                            overlay_->OpenWrite(path, O_WRONLY | (to_empty ? O_TRUNC : 0), 0));
      ::close(copy);
    }
  }
  const std::string at = e.upper_path;
  if (request.size) {
    const off_t size = static_cast<off_t>(*request.size);
    if ((fd >= 0 ? ::ftruncate(fd, size) : ::truncate(at.c_str(), size)) != 0) return Errno(at);
  }
  if (request.mode) {
    const mode_t mode = *request.mode & 07777;
    if ((fd >= 0 ? ::fchmod(fd, mode) : ::chmod(at.c_str(), mode)) != 0) return Errno(at);
  }
  if (request.uid || request.gid) {
    const uid_t uid = request.uid.value_or(static_cast<uid_t>(-1));
    const gid_t gid = request.gid.value_or(static_cast<gid_t>(-1));
    if ((fd >= 0 ? ::fchown(fd, uid, gid) : ::lchown(at.c_str(), uid, gid)) != 0) {
      return Errno(at);
    }
  }
  if (request.atime || request.mtime) {
    timespec times[2];
    times[0] = request.atime.value_or(timespec{0, UTIME_OMIT});
    times[1] = request.mtime.value_or(timespec{0, UTIME_OMIT});
    const int rc = fd >= 0 ? ::futimens(fd, times)
                           : ::utimensat(AT_FDCWD, at.c_str(), times, AT_SYMLINK_NOFOLLOW);
    if (rc != 0) return Errno(at);
  }
  return StatPath(path, inode);
}

}  // namespace ucfs
