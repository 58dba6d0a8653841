#include "ucfs/overlay/overlay_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "ucfs/vfs/read_only_fs.h"

namespace ucfs {

OverlayFs::OverlayFs(std::unique_ptr<Overlay> overlay, std::shared_ptr<View> view)
    : overlay_(std::move(overlay)),
      view_(std::move(view)),
      upper_dir_(overlay_->upper_dir()),
      writer_(overlay_->writer()) {
  nodes_[kRootInode].paths = {""};
  nodes_[kRootInode].lookups = 1;
  by_path_[""] = kRootInode;
}

OverlayFs::~OverlayFs() = default;  // the fds the kernel never released close with their nodes

std::vector<InodeId> OverlayFs::TakeChangedBehind() {
  MutexLock lock(mu_);
  return std::exchange(changed_behind_, {});
}

Result<bool> OverlayFs::BeforeWrite(int fd, const Caller& caller) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::LastErrno("fstat");
  const mode_t mode = ModeAfterWrite(st.st_mode, st.st_gid, caller);
  if (mode == st.st_mode) return false;
  UCFS_RETURN_IF_ERROR(writer_.ChmodAt(fd, "", mode & 07777));
  return true;
}

Status OverlayFs::AboutFile(InodeId inode, const Status& s) {
  MutexLock lock(mu_);
  auto path = PathOf(inode);
  return s.WithFile(path.ok() ? *path : "inode " + std::to_string(inode));
}

Result<struct stat> OverlayFs::Lookup(InodeId parent, std::string_view name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  // Resolved first: a failed lookup must not leave an inode behind.
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  const InodeId inode = InodeFor(path, 1, e.in_upper ? &e.st : nullptr);
  return StatOf(path, e, inode);
}

uint64_t OverlayFs::walks() {
  MutexLock lock(mu_);
  return overlay_->walks();
}

bool OverlayFs::MightAppear(std::string_view name) {
  MutexLock lock(mu_);
  return overlay_->MightAppear(name);
}

Result<struct stat> OverlayFs::GetAttr(InodeId inode, int fd) {
  MutexLock lock(mu_);
  auto path = PathOf(inode);
  std::shared_ptr<ViewFile> held;  // keeps a view file's copy fd open while used
  if (!path.ok()) {
    if (fd < 0) fd = OpenFdOf(inode, &held);
    if (fd < 0) {
      auto it = nodes_.find(inode);
      if (it != nodes_.end() && it->second.view_inode != 0) {
        Overlay::Entry e;
        e.lower = it->second.view_inode;
        return StatOf("", e, inode);
      }
      if (it != nodes_.end() && it->second.orphan) {
        struct stat st = *it->second.orphan;
        st.st_ino = inode;
        return st;
      }
      return path.status();
    }
  }
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::LastErrno("fstat");
    st.st_ino = inode;
    return st;
  }
  return StatPath(*path, inode);
}

Result<FileSystem::DirEntries> OverlayFs::ReadDir(InodeId dir) {
  MutexLock lock(mu_);
  auto named = PathOf(dir);
  if (!named.ok()) {
    // A removed directory, open elsewhere, is empty.
    auto it = nodes_.find(dir);
    if (it != nodes_.end() && it->second.orphan && S_ISDIR(it->second.orphan->st_mode)) {
      return DirEntries();
    }
    return named.status();
  }
  const std::string& path = *named;
  UCFS_ASSIGN_OR_RETURN(auto entries, overlay_->ReadDir(path, /*reading=*/true));
  DirEntries out;
  out.reserve(entries.size());
  for (const auto& [name, entry] : entries) {
    const std::string child = JoinPath(path, name);
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

Status OverlayFs::CopyUpUnlocked(InodeId inode, bool keep_contents, bool nameless, UniqueFd* opened,
                                 int open_flags) {
  std::optional<Overlay::CopyAside> copy;
  // A view file whose names are all gone, open read-only: copied to a file
  // of no name, which its handles go on with (as a file system's unlinked
  // file stays one file for its fds).
  std::shared_ptr<ViewFile> unnamed;
  {
    MutexLock lock(mu_);
    auto path = PathOf(inode);
    if (path.ok()) {
      UCFS_ASSIGN_OR_RETURN(copy, overlay_->PrepareCopyAside(*path, keep_contents));
    } else if (auto it = nodes_.find(inode);
               nameless && it != nodes_.end() && it->second.fds.empty()) {
      unnamed = it->second.view_file.lock();
      if (!unnamed || unnamed->copy_fd.load() >= 0) return Status::OK();
      UCFS_ASSIGN_OR_RETURN(Overlay::CopyAside made, overlay_->CopyAsideOf(unnamed->view_inode));
      copy.emplace(std::move(made));
    }
    // Otherwise the operation itself answers.
  }
  if (!copy) return Status::OK();
  UCFS_RETURN_IF_ERROR(copy->Run());
  MutexLock lock(mu_);
  if (unnamed) {
    if (unnamed->copy_fd.load() < 0) {
      UCFS_ASSIGN_OR_RETURN(int fd, copy->TakeUnnamed());
      unnamed->copy_fd.store(fd);
    }
    return Status::OK();
  }
  auto path = PathOf(inode);  // where it is now: it may have moved meanwhile
  if (!path.ok()) return Status::OK();
  Status adopted;
  if (opened != nullptr) {
    auto fd = overlay_->AdoptAndOpen(*path, std::move(*copy), open_flags);
    adopted = fd.status();
    if (fd.ok()) *opened = std::move(fd).value();
  } else {
    adopted = overlay_->Adopt(*path, std::move(*copy));
  }
  NoteCopiedUpDirs();
  FollowCopyUp(inode);
  return adopted;
}

void OverlayFs::FollowCopyUp(InodeId inode) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end()) return;
  std::shared_ptr<ViewFile> view_file = it->second.view_file.lock();
  if (!view_file || view_file->copy_fd.load() >= 0) return;
  auto path = PathOf(inode);
  if (!path.ok()) return;
  auto e = overlay_->Lookup(*path);
  if (!e.ok() || !e->in_upper || !S_ISREG(e->st.st_mode)) return;
  auto fd = overlay_->OpenRead(*path, O_RDONLY | O_NONBLOCK);
  if (fd.ok()) view_file->copy_fd.store(fd->release());  // the ViewFile's now
}

void OverlayFs::NoteCopiedUpDirs() {
  for (const std::string& dir : overlay_->TakeCopiedUpDirs()) {
    auto it = by_path_.find(dir);
    if (it != by_path_.end()) changed_behind_.push_back(it->second);
  }
}

Result<OverlayFs::Handle> OverlayFs::Open(InodeId inode, int flags, const Caller* caller) {
  // Buffers come from libfuse, not aligned for O_DIRECT.
  flags &= ~(O_CREAT | O_EXCL | O_DIRECT | O_NOCTTY);
  // A view file opened to write is copied up first (unless O_TRUNC makes
  // its contents moot), and opened where the copy lands.
  UniqueFd adopted;
  if ((flags & O_ACCMODE) != O_RDONLY && !(flags & O_TRUNC)) {
    UCFS_RETURN_IF_ERROR(CopyUpUnlocked(inode, true, false, &adopted, flags));
  }
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
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
      handle.view_file = node.view_file.lock();
      if (!handle.view_file || handle.view_file->view_inode != e.lower) {
        handle.view_file = std::make_shared<ViewFile>(e.lower);
        node.view_file = handle.view_file;
      }
      return handle;
    }
    UCFS_ASSIGN_OR_RETURN(UniqueFd fd, overlay_->OpenRead(path, flags));
    handle.fd = fd.get();
    nodes_[inode].fds.push_back(std::move(fd));
    return handle;
  }
  if (overlay_->IsReadOnly(path)) return Status::Posix(EROFS, path + ": read-only");
  UniqueFd fd = std::move(adopted);
  if (!fd) {
    auto opened = overlay_->OpenWrite(path, flags, 0);
    NoteCopiedUpDirs();
    UCFS_ASSIGN_OR_RETURN(fd, std::move(opened));
    FollowCopyUp(inode);
  }
  // The truncation FUSE_CAP_ATOMIC_O_TRUNC leaves to us, with what it
  // clears.
  if ((flags & O_TRUNC) && caller != nullptr) {
    UCFS_ASSIGN_OR_RETURN(bool cleared, BeforeWrite(fd.get(), *caller));
    if (cleared) changed_behind_.push_back(inode);
  }
  handle.fd = fd.get();
  nodes_[inode].fds.push_back(std::move(fd));
  return handle;
}

void OverlayFs::Release(InodeId inode, const Handle& handle) {
  MutexLock lock(mu_);
  auto it = nodes_.find(inode);
  if (it != nodes_.end() && handle.fd >= 0) {
    auto& fds = it->second.fds;
    auto f = std::find_if(fds.begin(), fds.end(),
                          [&](const UniqueFd& fd) { return fd.get() == handle.fd; });
    if (f != fds.end()) fds.erase(f);  // closes it
    MaybeErase(inode);
  }
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
  Handle handle;
  bool created = false;
  auto opened = overlay_->OpenWrite(path, flags | O_CREAT, mode & 07777, caller, &created);
  NoteCopiedUpDirs();
  UCFS_ASSIGN_OR_RETURN(UniqueFd fd, std::move(opened));
  if (!created && (flags & O_TRUNC) && caller != nullptr) {
    // The reply carries the mode it leaves.
    UCFS_RETURN_IF_ERROR(BeforeWrite(fd.get(), *caller).status());
  }
  // The file is the fd's, in the upper directory either way: no walk to it.
  Overlay::Entry e;
  e.in_upper = true;
  if (::fstat(fd.get(), &e.st) != 0) return Status::LastErrno(path);
  if (created) DropPath(path);  // a name reused for a new entry is a new inode
  const struct stat st = StatOf(path, e, InodeFor(path, 1, &e.st));
  if (!created) FollowCopyUp(st.st_ino);
  handle.fd = fd.get();
  nodes_[st.st_ino].fds.push_back(std::move(fd));
  return std::make_pair(st, handle);
}

Result<struct stat> OverlayFs::MakeDir(InodeId parent, std::string_view name, mode_t mode,
                                       const Caller* caller) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  Status made = overlay_->MakeDir(path, mode & 07777, caller);
  NoteCopiedUpDirs();
  UCFS_RETURN_IF_ERROR(made);
  return NewEntry(path);
}

Result<struct stat> OverlayFs::MakeNode(InodeId parent, std::string_view name, mode_t mode,
                                        dev_t rdev, const Caller* caller) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  Status made = overlay_->MakeNode(path, mode, rdev, caller);
  NoteCopiedUpDirs();
  UCFS_RETURN_IF_ERROR(made);
  return NewEntry(path);
}

Result<struct stat> OverlayFs::Symlink(std::string_view target, InodeId parent,
                                       std::string_view name, const Caller* caller) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  Status made = overlay_->Symlink(target, path, caller);
  NoteCopiedUpDirs();
  UCFS_RETURN_IF_ERROR(made);
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
  Status linked = overlay_->Link(from, to);
  NoteCopiedUpDirs();
  UCFS_RETURN_IF_ERROR(linked);
  FollowCopyUp(inode);
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
  const auto last = LastAttrs(path);
  Status removed = overlay_->Unlink(path);
  NoteCopiedUpDirs();
  UCFS_RETURN_IF_ERROR(removed);
  Detach(path);
  Orphan(last);
  return Status::OK();
}

Status OverlayFs::RemoveDir(InodeId parent, std::string_view name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, ChildPath(parent, name));
  const auto last = LastAttrs(path);
  Status removed = overlay_->RemoveDir(path);
  NoteCopiedUpDirs();
  UCFS_RETURN_IF_ERROR(removed);
  Detach(path);
  Orphan(last);
  return Status::OK();
}

Status OverlayFs::Rename(InodeId parent, std::string_view name, InodeId new_parent,
                         std::string_view new_name, unsigned flags) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string from, ChildPath(parent, name));
  UCFS_ASSIGN_OR_RETURN(std::string to, ChildPath(new_parent, new_name));
  const bool exchange = (flags & RENAME_EXCHANGE) != 0;
  // What is replaced (or, for an exchange, moved too): the inodes there.
  const auto last = exchange || from == to ? std::nullopt : LastAttrs(to);
  const auto at_from = by_path_.find(from);
  const auto at_to = by_path_.find(to);
  const InodeId moved = at_from == by_path_.end() ? 0 : at_from->second;
  const InodeId other = exchange && at_to != by_path_.end() ? at_to->second : 0;
  Status renamed = overlay_->Rename(from, to, flags);
  NoteCopiedUpDirs();
  UCFS_RETURN_IF_ERROR(renamed);
  if (from == to) return Status::OK();
  if (exchange) {
    Exchange(from, to);
  } else {
    Move(from, to);
    Orphan(last);
  }
  // A view file renamed was copied up first.
  if (moved != 0) FollowCopyUp(moved);
  if (other != 0) FollowCopyUp(other);
  return Status::OK();
}

Result<struct stat> OverlayFs::SetAttr(InodeId inode, const SetAttrRequest& request, int fd,
                                       const Caller* caller) {
  const bool to_empty = request.size && *request.size == 0;
  UCFS_RETURN_IF_ERROR(CopyUpUnlocked(inode, !to_empty, /*nameless=*/true));
  MutexLock lock(mu_);
  auto path = PathOf(inode);
  std::shared_ptr<ViewFile> held;  // keeps a view file's copy fd open while used
  // A file whose names are gone is changed through an fd of it; a
  // directory or special file, as it was kept.
  if (!path.ok() && fd < 0) fd = OpenFdOf(inode, &held);
  if (!path.ok() && fd < 0) {
    auto it = nodes_.find(inode);
    if (it != nodes_.end() && it->second.orphan) return SetOrphanAttr(inode, it->second, request);
    return path.status();
  }
  Overlay::UpperRef ref;
  if (path.ok()) {
    auto prepared = overlay_->PrepareChange(*path, !to_empty);
    NoteCopiedUpDirs();
    UCFS_ASSIGN_OR_RETURN(ref, std::move(prepared));
    FollowCopyUp(inode);
  }
  const std::string what = path.ok() ? *path : "inode " + std::to_string(inode);
  // The entry changed: the open file `fd`, or `ref.name` in `ref.dir`.
  const int at = fd >= 0 ? fd : ref.dir.get();
  const std::string name = fd >= 0 ? "" : ref.name;
  auto stat_now = [&](struct stat* st) {
    return fd >= 0 ? ::fstat(fd, st)
                   : ::fstatat(ref.dir.get(), name.c_str(), st, AT_SYMLINK_NOFOLLOW);
  };
  auto chmod_to = [&](mode_t mode) { return writer_.ChmodAt(at, name, mode & 07777); };
  if (request.size) {
    UniqueFd opened;
    int w = fd;
    if (w < 0) {
      auto file = writer_.OpenAt(ref.dir.get(), name, O_WRONLY | O_NOFOLLOW, 0);
      if (!file.ok()) return file.status().WithFile(what);
      opened = std::move(file).value();
      w = opened.get();
    }
    UCFS_RETURN_IF_ERROR(writer_.Truncate(w, *request.size).WithFile(what));
  }
  const bool nothing = !request.size && !request.uid && !request.gid && !request.mode &&
                       !request.atime && !request.mtime;
  // The group the set-id bits go by, and whether a chown is to clear them.
  struct stat before {};
  bool owners_changed = false;
  // chown(f, -1, -1) arrives as a setattr of nothing: as on a local file
  // system, it still changes the ctime.
  if (request.uid || request.gid || nothing) {
    if (stat_now(&before) != 0) return Status::LastErrno(what);
    const uid_t uid = request.uid.value_or(static_cast<uid_t>(-1));
    const gid_t gid = request.gid.value_or(static_cast<gid_t>(-1));
    UCFS_RETURN_IF_ERROR(writer_.ChownAt(at, name, uid, gid, AT_SYMLINK_NOFOLLOW).WithFile(what));
    // An empty setattr is also what a write's clearing of S_ISGID (the
    // caller outside the file's group, the group not executing it) comes
    // as when the kernel leaves that to us: for the owner, chown(f, -1,
    // -1) clears it too, so it is cleared now; for anyone else, at the
    // write (BeforeWrite), as a chown by them should fail instead.
    owners_changed = !nothing || (caller != nullptr && caller->uid == before.st_uid);
  }
  // After a chown, which may have cleared the set-id bits a chmod of the
  // same call sets.
  if (request.mode) UCFS_RETURN_IF_ERROR(chmod_to(*request.mode).WithFile(what));
  // A truncation or chown clears what a write by the same caller would
  // (for a chown, by the group the file had). The kernel sends what it
  // clears itself as a mode in the same request, S_ISGID without group
  // execute left in it; the daemon's own chown, as root, keeps that too.
  if (caller != nullptr && (request.size || owners_changed)) {
    struct stat now {};
    if (stat_now(&now) != 0) return Status::LastErrno(what);
    const gid_t gid = owners_changed ? before.st_gid : now.st_gid;
    const mode_t mode = ModeAfterWrite(now.st_mode, gid, *caller);
    if (mode != now.st_mode) UCFS_RETURN_IF_ERROR(chmod_to(mode).WithFile(what));
  }
  if (request.atime || request.mtime) {
    timespec times[2];
    times[0] = request.atime.value_or(timespec{0, UTIME_OMIT});
    times[1] = request.mtime.value_or(timespec{0, UTIME_OMIT});
    UCFS_RETURN_IF_ERROR(writer_.SetTimesAt(at, name, times, AT_SYMLINK_NOFOLLOW).WithFile(what));
  }
  if (!path.ok()) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::LastErrno(what);
    st.st_ino = inode;
    return st;
  }
  return StatPath(*path, inode);
}

Result<struct stat> OverlayFs::SetOrphanAttr(InodeId inode, Node& node,
                                             const SetAttrRequest& request) {
  struct stat& st = *node.orphan;
  if (request.size) {
    return Status::Posix(S_ISDIR(st.st_mode) ? EISDIR : EINVAL,
                         "inode " + std::to_string(inode) + ": not a file to truncate");
  }
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  auto time_of = [&](const timespec& t) { return t.tv_nsec == UTIME_NOW ? now : t; };
  if (request.uid) st.st_uid = *request.uid;
  if (request.gid) st.st_gid = *request.gid;
  if (request.mode) st.st_mode = (st.st_mode & S_IFMT) | (*request.mode & 07777);
  if (request.atime && request.atime->tv_nsec != UTIME_OMIT) st.st_atim = time_of(*request.atime);
  if (request.mtime && request.mtime->tv_nsec != UTIME_OMIT) st.st_mtim = time_of(*request.mtime);
  st.st_ctim = now;
  struct stat out = st;
  out.st_ino = inode;
  return out;
}

}  // namespace ucfs
