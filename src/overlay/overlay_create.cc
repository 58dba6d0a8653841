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
    UCFS_RETURN_IF_ERROR(writer_.ChownAt(dir, name, caller->uid, gid, AT_SYMLINK_NOFOLLOW));
  }
  if (is_symlink) return Status::OK();
  // The daemon's own umask (and a chown's clearing of set-id bits) may have
  // changed the mode; it is set to what was asked.
  struct stat st {};
  if (!StatAt(dir, name, &st)) return Status::LastErrno(name);
  if ((st.st_mode & 07777) != mode) UCFS_RETURN_IF_ERROR(writer_.ChmodAt(dir, name, mode));
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

Status Overlay::Created(const UpperRef& ref, std::string_view name, bool is_dir) {
  // Where a deleted view entry stood, its whiteout goes; a directory made
  // there must not show the old directory's contents, so it is marked
  // before the whiteout goes.
  if (is_dir && StatAt(ref.dir.get(), WhiteoutName(name))) {
    UCFS_RETURN_IF_ERROR(MarkOpaque(writer_, ref.dir.get(), ref.name));
  }
  RemoveWhiteout(ref.dir.get(), name);
  return Status::OK();
}

Status Overlay::FinishNew(const UpperRef& ref, std::string_view path, mode_t mode,
                          const Caller* caller, mode_t type) {
  const bool is_dir = S_ISDIR(type);
  Status s = FinishCreate(ref.dir.get(), ref.name, mode, caller, is_dir, S_ISLNK(type));
  if (s.ok()) s = Created(ref, SplitLast(path).second, is_dir);
  if (!s.ok()) {
    writer_.UnlinkAt(ref.dir.get(), ref.name, is_dir ? AT_REMOVEDIR : 0);  // best effort
    return s.WithFile(path);
  }
  return Status::OK();
}

Status Overlay::MakeDir(std::string_view path, mode_t mode, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (caller != nullptr) mode &= ~caller->umask;
  UCFS_RETURN_IF_ERROR(writer_.MakeDirAt(ref.dir.get(), ref.name, mode & 07777).WithFile(path));
  return FinishNew(ref, path, mode, caller, S_IFDIR);
}

Status Overlay::MakeNode(std::string_view path, mode_t mode, dev_t rdev, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (caller != nullptr) mode &= ~caller->umask;
  UCFS_RETURN_IF_ERROR(writer_.MakeNodeAt(ref.dir.get(), ref.name, mode, rdev).WithFile(path));
  return FinishNew(ref, path, mode, caller, mode & S_IFMT);
}

Status Overlay::Symlink(std::string_view target, std::string_view path, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  UCFS_RETURN_IF_ERROR(
      writer_.SymlinkAt(std::string(target), ref.dir.get(), ref.name).WithFile(path));
  return FinishNew(ref, path, 0777, caller, S_IFLNK);
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
    return OpenUpper(ref, path, flags);
  }
  if (!(flags & O_CREAT) || found.status().posix_errno() != ENOENT) return found.status();
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path, /*known_missing=*/true));
  if (caller != nullptr) mode &= ~caller->umask;
  auto fd = writer_.OpenAt(ref.dir.get(), ref.name, flags | O_EXCL | O_NOFOLLOW, mode & 07777);
  if (!fd.ok()) return fd.status().WithFile(path);
  UCFS_RETURN_IF_ERROR(FinishNew(ref, path, mode, caller, S_IFREG));
  if (created != nullptr) *created = true;
  return fd;
}

Result<UniqueFd> Overlay::OpenUpper(const UpperRef& ref, std::string_view path, int flags) {
  auto fd = writer_.OpenAt(ref.dir.get(), ref.name,
                           (flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW)) | O_NOFOLLOW, 0);
  if (!fd.ok()) return fd.status().WithFile(path);
  return fd;
}

Status Overlay::Link(std::string_view from, std::string_view to) {
  if (IsReadOnly(from)) return Fail(EROFS, from, "read-only");
  UCFS_ASSIGN_OR_RETURN(Entry src, Lookup(from));
  if (src.is_dir) return Fail(EPERM, from, "hard links to directories are not allowed");
  UCFS_ASSIGN_OR_RETURN(UpperRef target, PrepareNew(to));
  UCFS_ASSIGN_OR_RETURN(UpperRef source, PrepareChange(from));
  UCFS_RETURN_IF_ERROR(
      writer_.LinkAt(source.dir.get(), source.name, target.dir.get(), target.name, 0).WithFile(to));
  // Removing a whiteout cannot fail in a way that matters: a whiteout left
  // beside an upper entry hides nothing it shows.
  return Created(target, SplitLast(to).second, false);
}

}  // namespace ucfs
