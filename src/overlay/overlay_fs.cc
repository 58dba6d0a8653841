#include "ucfs/overlay/overlay_fs.h"

#include <fcntl.h>
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

Result<struct stat> OverlayFs::Lookup(InodeId parent, std::string_view name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  // Resolved first: a failed lookup must not leave an inode behind.
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  const InodeId inode = InodeFor(path, 1, e.in_upper ? &e.st : nullptr);
  return StatOf(path, e, inode);
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
      if (auto a = view_->GetAttr(e.lower); a.ok() && a->is_symlink) {
        return Status::Posix(ELOOP, path + ": a symbolic link");
      }
      handle.view_inode = e.lower;
      // A view file's pages may stay cached while it is the same view
      // file; a saved checkpoint's views are made anew when it is saved
      // again (upper_root_views.h), and then the old pages must go.
      Node& node = nodes_[inode];
      handle.keep_cache = node.view_inode == e.lower;
      node.view_inode = e.lower;
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

}  // namespace ucfs
