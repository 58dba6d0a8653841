#include "ucfs/overlay/overlay_fs.h"

#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "ucfs/view/read_only_fs.h"

namespace ucfs {
namespace {

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

Status Errno(const std::string& what) { return Status::FromErrno(what, errno); }

bool IsAtOrBelow(const std::string& path, const std::string& dir) {
  return path == dir ||
         (path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/');
}

// An upper entry by a path the xattr calls accept: its O_PATH fd's
// /proc/self/fd link, which names the entry itself even for a symlink.
struct ProcPath {
  UniqueFd fd;
  std::string path;
};

Result<ProcPath> ProcPathOf(const Overlay::UpperRef& ref) {
  int fd = ::openat(ref.dir.get(), ref.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno(ref.name);
  ProcPath p{UniqueFd(fd), "/proc/self/fd/" + std::to_string(fd)};
  return p;
}

}  // namespace

OverlayFs::OverlayFs(std::unique_ptr<Overlay> overlay, std::shared_ptr<View> view)
    : overlay_(std::move(overlay)), view_(std::move(view)), upper_dir_(overlay_->upper_dir()) {
  nodes_[kRootInode].paths = {""};
  nodes_[kRootInode].lookups = 1;
  by_path_[""] = kRootInode;
}

OverlayFs::~OverlayFs() {
  for (auto& [inode, node] : nodes_) {
    for (int fd : node.fds) ::close(fd);
  }
}

size_t OverlayFs::inode_count() {
  MutexLock lock(mu_);
  return nodes_.size();
}

Result<std::string> OverlayFs::PathOf(InodeId inode) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || it->second.paths.empty()) {
    return Status::Posix(ESTALE, "inode " + std::to_string(inode) + " was removed");
  }
  return it->second.paths.front();
}

Result<std::string> OverlayFs::ChildPath(InodeId parent, std::string_view name) {
  if (name.size() > kMaxNameLength) {
    return Status::Posix(ENAMETOOLONG, std::string(name.substr(0, 32)) + "...: name too long");
  }
  if (!IsSafePathComponent(name)) return Status::Posix(EINVAL, std::string(name) + ": bad name");
  UCFS_ASSIGN_OR_RETURN(std::string dir, PathOf(parent));
  return Join(dir, name);
}

InodeId OverlayFs::InodeFor(const std::string& path, uint64_t count, const struct stat* upper) {
  auto known = by_path_.find(path);
  InodeId inode = 0;
  if (known != by_path_.end()) {
    inode = known->second;
  } else {
    const bool linked = upper != nullptr && !S_ISDIR(upper->st_mode) && upper->st_nlink > 1;
    if (linked) {
      auto it = by_file_.find({upper->st_dev, upper->st_ino});
      if (it != by_file_.end()) {
        // The same file by another name, if that name still is it.
        Node& node = nodes_[it->second];
        auto other = node.paths.empty() ? Result<Overlay::Entry>(Status::Posix(ENOENT, ""))
                                        : overlay_->Lookup(node.paths.front());
        if (other.ok() && other->in_upper && other->st.st_dev == upper->st_dev &&
            other->st.st_ino == upper->st_ino) {
          inode = it->second;
          node.paths.push_back(path);
        }
      }
    }
    if (inode == 0) {
      inode = next_inode_++;
      Node& node = nodes_[inode];
      node.paths = {path};
      if (linked) {
        node.has_file_key = true;
        node.file_key = {upper->st_dev, upper->st_ino};
        by_file_[node.file_key] = inode;
      }
    }
    by_path_[path] = inode;
  }
  nodes_[inode].lookups += count;
  return inode;
}

struct stat OverlayFs::StatOf(const std::string& path, const Overlay::Entry& e, InodeId inode) {
  struct stat st {};
  if (e.in_upper) {
    st = e.st;
  } else {
    Attr a{};
    if (auto got = view_->GetAttr(e.lower); got.ok()) a = *got;
    st = StatOfAttr(a);  // as the read-only mount shows it
  }
  // Read-only entries show so, and the kernel refuses writers (EACCES)
  // before asking.
  if (overlay_->IsReadOnly(path)) st.st_mode &= ~static_cast<mode_t>(0222);
  st.st_ino = inode;
  return st;
}

Result<struct stat> OverlayFs::StatPath(const std::string& path, InodeId inode) {
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  return StatOf(path, e, inode);
}

int OverlayFs::OpenFdOf(InodeId inode) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || it->second.fds.empty()) return -1;
  return it->second.fds.front();
}

void OverlayFs::DropPath(const std::string& path) {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return;
  auto node = nodes_.find(it->second);
  if (node != nodes_.end()) {
    auto& paths = node->second.paths;
    paths.erase(std::remove(paths.begin(), paths.end(), path), paths.end());
  }
  by_path_.erase(it);
}

void OverlayFs::Detach(const std::string& path) { DropPath(path); }

void OverlayFs::Move(const std::string& from, const std::string& to) {
  // Whatever was at `to` (and below it) is gone.
  std::vector<std::string> gone;
  for (const auto& [path, inode] : by_path_) {
    if (IsAtOrBelow(path, to)) gone.push_back(path);
  }
  for (const auto& path : gone) DropPath(path);
  std::vector<std::pair<std::string, InodeId>> moved;
  for (const auto& [path, inode] : by_path_) {
    if (IsAtOrBelow(path, from)) moved.emplace_back(path, inode);
  }
  for (const auto& [path, inode] : moved) DropPath(path);
  for (const auto& [path, inode] : moved) {
    std::string now = to + path.substr(from.size());
    nodes_[inode].paths.push_back(now);
    by_path_[std::move(now)] = inode;
  }
}

void OverlayFs::Exchange(const std::string& a, const std::string& b) {
  std::vector<std::pair<std::string, InodeId>> moved;
  for (const auto& [path, inode] : by_path_) {
    if (IsAtOrBelow(path, a) || IsAtOrBelow(path, b)) moved.emplace_back(path, inode);
  }
  for (const auto& [path, inode] : moved) DropPath(path);
  for (const auto& [path, inode] : moved) {
    std::string now = IsAtOrBelow(path, a) ? b + path.substr(a.size()) : a + path.substr(b.size());
    nodes_[inode].paths.push_back(now);
    by_path_[std::move(now)] = inode;
  }
}

Result<struct stat> OverlayFs::Lookup(InodeId parent, std::string_view name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  // Resolved first: a failed lookup must not leave an inode behind.
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  const InodeId inode = InodeFor(path, 1, e.in_upper ? &e.st : nullptr);
  return StatOf(path, e, inode);
}

void OverlayFs::Forget(InodeId inode, uint64_t count) {
  MutexLock lock(mu_);
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || inode == kRootInode) return;
  Node& node = it->second;
  node.lookups = node.lookups > count ? node.lookups - count : 0;
  MaybeErase(inode);
}

void OverlayFs::MaybeErase(InodeId inode) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || inode == kRootInode) return;
  Node& node = it->second;
  // Open files keep it (their fds are Release's to close).
  if (node.lookups > 0 || !node.fds.empty()) return;
  for (const auto& path : node.paths) by_path_.erase(path);
  if (node.has_file_key) {
    auto f = by_file_.find(node.file_key);
    if (f != by_file_.end() && f->second == inode) by_file_.erase(f);
  }
  nodes_.erase(it);
}

Result<struct stat> OverlayFs::GetAttr(InodeId inode, int fd) {
  MutexLock lock(mu_);
  auto path = PathOf(inode);
  if (!path.ok()) {
    if (fd < 0) fd = OpenFdOf(inode);
    if (fd < 0) {
      auto it = nodes_.find(inode);
      if (it != nodes_.end() && it->second.view_inode != 0) {
        Overlay::Entry e;
        e.lower = it->second.view_inode;
        return StatOf("", e, inode);
      }
      return path.status();
    }
  }
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Errno("fstat");
    st.st_ino = inode;
    return st;
  }
  return StatPath(*path, inode);
}

Result<std::vector<std::pair<std::string, struct stat>>> OverlayFs::ReadDir(InodeId dir) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(dir));
  UCFS_ASSIGN_OR_RETURN(auto entries, overlay_->ReadDir(path));
  std::vector<std::pair<std::string, struct stat>> out;
  out.reserve(entries.size());
  for (const auto& [name, entry] : entries) {
    const std::string child = Join(path, name);
    const InodeId inode = InodeFor(child, 0, entry.in_upper ? &entry.st : nullptr);
    out.emplace_back(name, StatOf(child, entry, inode));
  }
  return out;
}

Result<InodeId> OverlayFs::ViewInodeOf(InodeId inode) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  return e.in_upper ? 0 : e.lower;
}

Status OverlayFs::CopyUpUnlocked(InodeId inode, bool keep_contents) {
  std::optional<Overlay::CopyAside> copy;
  {
    MutexLock lock(mu_);
    auto path = PathOf(inode);
    if (!path.ok()) return Status::OK();  // the operation itself answers
    UCFS_ASSIGN_OR_RETURN(copy, overlay_->PrepareCopyAside(*path, keep_contents));
  }
  if (!copy) return Status::OK();
  UCFS_RETURN_IF_ERROR(copy->Run());
  MutexLock lock(mu_);
  auto path = PathOf(inode);  // where it is now: it may have moved meanwhile
  if (!path.ok()) return Status::OK();
  return overlay_->Adopt(*path, std::move(*copy));
}

Result<OverlayFs::Handle> OverlayFs::Open(InodeId inode, int flags) {
  if ((flags & O_ACCMODE) != O_RDONLY && !(flags & O_TRUNC)) {
    UCFS_RETURN_IF_ERROR(CopyUpUnlocked(inode, true));
  }
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  // Buffers come from libfuse, not aligned for O_DIRECT.
  flags &= ~(O_CREAT | O_EXCL | O_DIRECT | O_NOCTTY);
  Handle handle;
  if ((flags & O_ACCMODE) == O_RDONLY && !(flags & O_TRUNC)) {
    UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
    if (e.is_dir) return Status::Posix(EISDIR, path + ": is a directory");
    if (!e.in_upper) {
      handle.view_inode = e.lower;
      nodes_[inode].view_inode = e.lower;
      return handle;
    }
    UCFS_ASSIGN_OR_RETURN(handle.fd, overlay_->OpenRead(path, flags));
  } else {
    if (overlay_->IsReadOnly(path)) return Status::Posix(EROFS, path + ": read-only");
    UCFS_ASSIGN_OR_RETURN(handle.fd, overlay_->OpenWrite(path, flags, 0));
  }
  nodes_[inode].fds.push_back(handle.fd);
  return handle;
}

void OverlayFs::Release(InodeId inode, const Handle& handle) {
  MutexLock lock(mu_);
  auto it = nodes_.find(inode);
  if (it != nodes_.end() && handle.fd >= 0) {
    auto& fds = it->second.fds;
    auto f = std::find(fds.begin(), fds.end(), handle.fd);
    if (f != fds.end()) fds.erase(f);
    MaybeErase(inode);
  }
  if (handle.fd >= 0) ::close(handle.fd);
}

Result<struct stat> OverlayFs::NewEntry(const std::string& path) {
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  // A name reused for a new entry is a new inode.
  DropPath(path);
  const InodeId inode = InodeFor(path, 1, e.in_upper ? &e.st : nullptr);
  return StatOf(path, e, inode);
}

Result<std::pair<struct stat, OverlayFs::Handle>> OverlayFs::Create(InodeId parent,
                                                                    std::string_view name,
                                                                    int flags, mode_t mode,
                                                                    const Caller* caller) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  flags &= ~(O_DIRECT | O_NOCTTY);
  const bool existed = overlay_->Lookup(path).ok();
  Handle handle;
  UCFS_ASSIGN_OR_RETURN(handle.fd,
                        overlay_->OpenWrite(path, flags | O_CREAT, mode & 07777, caller));
  auto st = existed ? StatPath(path, 0) : NewEntry(path);
  if (!st.ok()) {
    ::close(handle.fd);
    return st.status();
  }
  if (existed) {
    st->st_ino = InodeFor(path, 1);
  }
  nodes_[st->st_ino].fds.push_back(handle.fd);
  return std::make_pair(*st, handle);
}

Result<struct stat> OverlayFs::MakeDir(InodeId parent, std::string_view name, mode_t mode,
                                       const Caller* caller) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->MakeDir(path, mode & 07777, caller));
  return NewEntry(path);
}

Result<struct stat> OverlayFs::MakeNode(InodeId parent, std::string_view name, mode_t mode,
                                        dev_t rdev, const Caller* caller) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->MakeNode(path, mode, rdev, caller));
  return NewEntry(path);
}

Result<struct stat> OverlayFs::Symlink(std::string_view target, InodeId parent,
                                       std::string_view name, const Caller* caller) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->Symlink(target, path, caller));
  return NewEntry(path);
}

Result<std::string> OverlayFs::ReadLink(InodeId inode) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  return overlay_->ReadLink(path);
}

Result<struct stat> OverlayFs::Link(InodeId inode, InodeId new_parent, std::string_view new_name) {
  UCFS_RETURN_IF_ERROR(CopyUpUnlocked(inode, true));
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string from, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(std::string to, ChildPath(new_parent, new_name));
  UCFS_RETURN_IF_ERROR(overlay_->Link(from, to));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(to));
  DropPath(to);
  Node& node = nodes_[inode];
  node.paths.push_back(to);
  node.lookups += 1;
  by_path_[to] = inode;
  if (e.in_upper) {
    node.has_file_key = true;
    node.file_key = {e.st.st_dev, e.st.st_ino};
    by_file_[node.file_key] = inode;
  }
  return StatOf(to, e, inode);
}

Status OverlayFs::Unlink(InodeId parent, std::string_view name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->Unlink(path));
  Detach(path);
  return Status::OK();
}

Status OverlayFs::RemoveDir(InodeId parent, std::string_view name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  UCFS_RETURN_IF_ERROR(overlay_->RemoveDir(path));
  Detach(path);
  return Status::OK();
}

Status OverlayFs::Rename(InodeId parent, std::string_view name, InodeId new_parent,
                         std::string_view new_name, unsigned flags) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string from, ChildPath(parent, name));
  UCFS_ASSIGN_OR_RETURN(std::string to, ChildPath(new_parent, new_name));
  UCFS_RETURN_IF_ERROR(overlay_->Rename(from, to, flags));
  if (from == to) return Status::OK();
  if (flags & RENAME_EXCHANGE) {
    Exchange(from, to);
  } else {
    Move(from, to);
  }
  return Status::OK();
}

Result<struct stat> OverlayFs::SetAttr(InodeId inode, const SetAttrRequest& request, int fd) {
  UCFS_RETURN_IF_ERROR(CopyUpUnlocked(inode, !(request.size && *request.size == 0)));
  MutexLock lock(mu_);
  auto path = PathOf(inode);
  // A file whose names are gone is changed through an fd of it.
  if (!path.ok() && fd < 0) fd = OpenFdOf(inode);
  if (!path.ok() && fd < 0) return path.status();
  Overlay::UpperRef ref;
  if (path.ok()) {
    const bool to_empty = request.size && *request.size == 0;
    UCFS_ASSIGN_OR_RETURN(ref, overlay_->PrepareChange(*path, !to_empty));
  }
  const std::string what = path.ok() ? *path : "inode " + std::to_string(inode);
  const char* name = ref.name.c_str();
  if (request.size) {
    const off_t size = static_cast<off_t>(*request.size);
    if (fd >= 0) {
      if (::ftruncate(fd, size) != 0) return Errno(what);
    } else {
      UniqueFd w(::openat(ref.dir.get(), name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!w || ::ftruncate(w.get(), size) != 0) return Errno(what);
    }
  }
  const bool nothing = !request.size && !request.uid && !request.gid && !request.mode &&
                       !request.atime && !request.mtime;
  // chown(f, -1, -1) arrives as a setattr of nothing: as on a local file
  // system, it still changes the ctime.
  if (request.uid || request.gid || nothing) {
    const uid_t uid = request.uid.value_or(static_cast<uid_t>(-1));
    const gid_t gid = request.gid.value_or(static_cast<gid_t>(-1));
    const int rc = fd >= 0 ? ::fchown(fd, uid, gid)
                           : ::fchownat(ref.dir.get(), name, uid, gid, AT_SYMLINK_NOFOLLOW);
    if (rc != 0) return Errno(what);
  }
  // After a chown, which may have cleared the set-id bits a chmod of the
  // same call sets.
  if (request.mode) {
    const mode_t mode = *request.mode & 07777;
    const int rc = fd >= 0 ? ::fchmod(fd, mode) : ::fchmodat(ref.dir.get(), name, mode, 0);
    if (rc != 0) return Errno(what);
  }
  if (request.atime || request.mtime) {
    timespec times[2];
    times[0] = request.atime.value_or(timespec{0, UTIME_OMIT});
    times[1] = request.mtime.value_or(timespec{0, UTIME_OMIT});
    const int rc = fd >= 0 ? ::futimens(fd, times)
                           : ::utimensat(ref.dir.get(), name, times, AT_SYMLINK_NOFOLLOW);
    if (rc != 0) return Errno(what);
  }
  if (!path.ok()) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Errno(what);
    st.st_ino = inode;
    return st;
  }
  return StatPath(*path, inode);
}

Result<std::string> OverlayFs::GetXattr(InodeId inode, const std::string& name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  if (!e.in_upper) {
    // The kernel asks for security.capability before every write(2):
    // answered without a listing of the view's.
    if (!name.starts_with(kXattrPrefix)) return Status::Posix(ENODATA, name);
    UCFS_ASSIGN_OR_RETURN(auto xattrs, view_->Xattrs(e.lower));
    for (const Xattr& x : xattrs) {
      if (x.name == name) return x.value;
    }
    return Status::Posix(ENODATA, name);
  }
  UCFS_ASSIGN_OR_RETURN(Overlay::UpperRef ref, overlay_->LocateUpper(path));
  UCFS_ASSIGN_OR_RETURN(ProcPath p, ProcPathOf(ref));
  for (;;) {
    ssize_t n = ::getxattr(p.path.c_str(), name.c_str(), nullptr, 0);
    if (n < 0) return Errno(name);
    std::string value(static_cast<size_t>(n), '\0');
    n = ::getxattr(p.path.c_str(), name.c_str(), value.data(), value.size());
    if (n >= 0) {
      value.resize(static_cast<size_t>(n));
      return value;
    }
    if (errno != ERANGE) return Errno(name);
  }
}

Result<std::string> OverlayFs::ListXattr(InodeId inode) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  std::string names;
  if (!e.in_upper) {
    UCFS_ASSIGN_OR_RETURN(auto xattrs, view_->Xattrs(e.lower));
    for (const Xattr& x : xattrs) {
      names += x.name;
      names.push_back('\0');
    }
    return names;
  }
  UCFS_ASSIGN_OR_RETURN(Overlay::UpperRef ref, overlay_->LocateUpper(path));
  UCFS_ASSIGN_OR_RETURN(ProcPath p, ProcPathOf(ref));
  for (;;) {
    ssize_t n = ::listxattr(p.path.c_str(), nullptr, 0);
    if (n < 0) return Errno(path);
    names.assign(static_cast<size_t>(n), '\0');
    n = ::listxattr(p.path.c_str(), names.data(), names.size());
    if (n >= 0) {
      names.resize(static_cast<size_t>(n));
      return names;
    }
    if (errno != ERANGE) return Errno(path);
  }
}

Status OverlayFs::SetXattr(InodeId inode, const std::string& name, std::string_view value,
                           int flags) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  if (!e.in_upper && name.starts_with(kXattrPrefix)) {
    return Status::Posix(EPERM, name + ": the view's attributes are read-only");
  }
  UCFS_ASSIGN_OR_RETURN(Overlay::UpperRef ref, overlay_->PrepareChange(path));
  UCFS_ASSIGN_OR_RETURN(ProcPath p, ProcPathOf(ref));
  if (::setxattr(p.path.c_str(), name.c_str(), value.data(), value.size(), flags) != 0) {
    return Errno(name);
  }
  return Status::OK();
}

Status OverlayFs::RemoveXattr(InodeId inode, const std::string& name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  if (!e.in_upper) {
    if (name.starts_with(kXattrPrefix)) {
      return Status::Posix(EPERM, name + ": the view's attributes are read-only");
    }
    if (overlay_->IsReadOnly(path)) return Status::Posix(EROFS, path + ": read-only");
    return Status::Posix(ENODATA, name);
  }
  UCFS_ASSIGN_OR_RETURN(Overlay::UpperRef ref, overlay_->PrepareChange(path));
  UCFS_ASSIGN_OR_RETURN(ProcPath p, ProcPathOf(ref));
  if (::removexattr(p.path.c_str(), name.c_str()) != 0) return Errno(name);
  return Status::OK();
}

}  // namespace ucfs
