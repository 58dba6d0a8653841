// New entries of the Overlay: directories, files, nodes, symlinks and hard
// links, made in the upper directory as the caller would have made them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "overlay/upper_dir.h"
#include "ucfs/overlay/overlay.h"

namespace ucfs {

Status Overlay::FinishCreate(int dir, const std::string& name, mode_t mode, const Caller* caller,
                             bool is_dir, bool is_symlink) {
  struct stat parent {};
  if (::fstat(dir, &parent) != 0) return Status::LastErrno(name);
  mode &= 07777;
  // In a setgid directory the new entry has the directory's group (the
  // kernel gave it), and a new directory is setgid too.
  const bool setgid_parent = (parent.st_mode & S_ISGID) != 0;
  if (is_dir && setgid_parent) mode |= S_ISGID;
  if (caller != nullptr && can_chown_) {
    const gid_t gid = setgid_parent ? static_cast<gid_t>(-1) : caller->gid;
    if (::fchownat(dir, name.c_str(), caller->uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::LastErrno(name);
    }
  }
  if (is_symlink) return Status::OK();
  // The daemon's own umask (and a chown's clearing of set-id bits) may have
  // changed the mode; it is set to what was asked.
  struct stat st {};
  if (!StatAt(dir, name, &st)) return Status::LastErrno(name);
  if ((st.st_mode & 07777) != mode && ::fchmodat(dir, name.c_str(), mode, 0) != 0) {
    return Status::LastErrno(name);
  }
  return Status::OK();
}

Result<Overlay::UpperRef> Overlay::PrepareNew(std::string_view path, bool known_missing) {
  auto [parent, name] = SplitLast(path);
  if (IsReadOnly(path)) return Fail(EROFS, path, "read-only");
  UCFS_RETURN_IF_ERROR(CheckName(path, name));
  UCFS_ASSIGN_OR_RETURN(Resolved p, Resolve(parent));
  if (!p.entry.is_dir) return Fail(ENOTDIR, parent, "not a directory");
  if (!known_missing && Lookup(path).ok()) return Fail(EEXIST, path, "exists");
  UpperRef ref;
  if (p.entry.in_upper) {  // opened from where the walk left it, not walked again
    UCFS_ASSIGN_OR_RETURN(ref.dir, OpenDirAt(p.ref.dir.get(), p.ref.name, parent));
  } else {
    UCFS_ASSIGN_OR_RETURN(ref.dir, UpperDir(parent));  // copies the view's directories up
  }
  ref.name = StoredName(name);
  return ref;
}

void Overlay::Created(const UpperRef& ref, std::string_view name, bool is_dir) {
  // Where a deleted view entry stood, its whiteout goes; a directory made
  // there must not show the old directory's contents.
  if (RemoveWhiteout(ref.dir.get(), name) && is_dir) MarkOpaque(ref.dir.get(), ref.name);
}

Status Overlay::MakeDir(std::string_view path, mode_t mode, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (caller != nullptr) mode &= ~caller->umask;
  if (::mkdirat(ref.dir.get(), ref.name.c_str(), mode & 07777) != 0) return Status::LastErrno(path);
  Status s = FinishCreate(ref.dir.get(), ref.name, mode, caller, true, false);
  if (!s.ok()) {
    ::unlinkat(ref.dir.get(), ref.name.c_str(), AT_REMOVEDIR);
    return s;
  }
  Created(ref, SplitLast(path).second, true);
  return Status::OK();
}

Status Overlay::MakeNode(std::string_view path, mode_t mode, dev_t rdev, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (caller != nullptr) mode &= ~caller->umask;
  if (::mknodat(ref.dir.get(), ref.name.c_str(), mode, rdev) != 0) return Status::LastErrno(path);
  Status s = FinishCreate(ref.dir.get(), ref.name, mode, caller, false, false);
  if (!s.ok()) {
    ::unlinkat(ref.dir.get(), ref.name.c_str(), 0);
    return s;
  }
  Created(ref, SplitLast(path).second, false);
  return Status::OK();
}

Status Overlay::Symlink(std::string_view target, std::string_view path, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (::symlinkat(std::string(target).c_str(), ref.dir.get(), ref.name.c_str()) != 0) {
    return Status::LastErrno(path);
  }
  Status s = FinishCreate(ref.dir.get(), ref.name, 0777, caller, false, true);
  if (!s.ok()) {
    ::unlinkat(ref.dir.get(), ref.name.c_str(), 0);
    return s;
  }
  Created(ref, SplitLast(path).second, false);
  return Status::OK();
}

Result<UniqueFd> Overlay::OpenWrite(std::string_view path, int flags, mode_t mode,
                                    const Caller* caller, bool* created) {
  flags &= ~O_NOFOLLOW;
  if (created != nullptr) *created = false;
  auto found = Resolve(path);
  // A name the view may yet add is asked about as a lookup would.
  if (!found.ok() && found.status().posix_errno() == ENOENT &&
      MightAppear(SplitLast(path).second) && Lookup(path).ok()) {
    found = Resolve(path);
  }
  if (found.ok()) {
    if ((flags & O_CREAT) && (flags & O_EXCL)) return Fail(EEXIST, path, "exists");
    if (found->entry.is_dir) return Fail(EISDIR, path, "is a directory");
    UpperRef ref;
    if (found->entry.in_upper && !IsReadOnly(path)) {
      ref = std::move(found->ref);  // where the walk left it
    } else {
      UCFS_ASSIGN_OR_RETURN(ref, PrepareChange(path, !(flags & O_TRUNC)));
    }
    UniqueFd fd(::openat(ref.dir.get(), ref.name.c_str(),
                         (flags & ~(O_CREAT | O_EXCL)) | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return Status::LastErrno(path);
    return fd;
  }
  if (!(flags & O_CREAT) || found.status().posix_errno() != ENOENT) return found.status();
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path, /*known_missing=*/true));
  if (caller != nullptr) mode &= ~caller->umask;
  UniqueFd fd(::openat(ref.dir.get(), ref.name.c_str(), flags | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       mode & 07777));
  if (!fd) return Status::LastErrno(path);
  Status s = FinishCreate(ref.dir.get(), ref.name, mode, caller, false, false);
  if (!s.ok()) {
    ::unlinkat(ref.dir.get(), ref.name.c_str(), 0);
    return s;
  }
  Created(ref, SplitLast(path).second, false);
  if (created != nullptr) *created = true;
  return fd;
}

Status Overlay::Link(std::string_view from, std::string_view to) {
  if (IsReadOnly(from)) return Fail(EROFS, from, "read-only");
  UCFS_ASSIGN_OR_RETURN(Entry src, Lookup(from));
  if (src.is_dir) return Fail(EPERM, from, "hard links to directories are not allowed");
  UCFS_ASSIGN_OR_RETURN(UpperRef target, PrepareNew(to));
  UCFS_ASSIGN_OR_RETURN(UpperRef source, PrepareChange(from));
  if (::linkat(source.dir.get(), source.name.c_str(), target.dir.get(), target.name.c_str(), 0) !=
      0) {
    return Status::LastErrno(to);
  }
  Created(target, SplitLast(to).second, false);
  return Status::OK();
}

}  // namespace ucfs
