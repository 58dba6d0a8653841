// OverlayFs's extended attributes: the view's ("user.ucfs.*", read-only)
// for view entries, the upper entry's own otherwise (overlay_fs.h).
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>

#include "ucfs/overlay/overlay_fs.h"

namespace ucfs {
namespace {

// An upper entry by a path the xattr calls accept: its O_PATH fd's
// /proc/self/fd link, which names the entry itself even for a symlink.
struct ProcPath {
  UniqueFd fd;
  std::string path;
};

Result<ProcPath> ProcPathOf(const Overlay::UpperRef& ref) {
  int fd = ::openat(ref.dir.get(), ref.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::LastErrno(ref.name);
  ProcPath p{UniqueFd(fd), "/proc/self/fd/" + std::to_string(fd)};
  return p;
}

}  // namespace

Result<std::string> OverlayFs::GetXattr(InodeId inode, const std::string& name) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  if (!e.in_upper) {
    // The kernel asks for security.capability before every write(2):
    // answered without a listing of the view's.
    if (!name.starts_with(kXattrPrefix)) return Status::Posix(ENODATA, name);
    UCFS_ASSIGN_OR_RETURN(auto xattrs, view_->Xattrs(e.lower));
    return XattrValue(xattrs, name);
  }
  UCFS_ASSIGN_OR_RETURN(Overlay::UpperRef ref, overlay_->LocateUpper(path));
  UCFS_ASSIGN_OR_RETURN(ProcPath p, ProcPathOf(ref));
  for (;;) {
    ssize_t n = ::getxattr(p.path.c_str(), name.c_str(), nullptr, 0);
    if (n < 0) return Status::LastErrno(name);
    std::string value(static_cast<size_t>(n), '\0');
    n = ::getxattr(p.path.c_str(), name.c_str(), value.data(), value.size());
    if (n >= 0) {
      value.resize(static_cast<size_t>(n));
      return value;
    }
    if (errno != ERANGE) return Status::LastErrno(name);
  }
}

Result<std::string> OverlayFs::ListXattr(InodeId inode) {
  MutexLock lock(mu_);
  UCFS_ASSIGN_OR_RETURN(std::string path, PathOf(inode));
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  if (!e.in_upper) {
    UCFS_ASSIGN_OR_RETURN(auto xattrs, view_->Xattrs(e.lower));
    return XattrNames(xattrs);
  }
  UCFS_ASSIGN_OR_RETURN(Overlay::UpperRef ref, overlay_->LocateUpper(path));
  UCFS_ASSIGN_OR_RETURN(ProcPath p, ProcPathOf(ref));
  std::string names;
  for (;;) {
    ssize_t n = ::listxattr(p.path.c_str(), nullptr, 0);
    if (n < 0) return Status::LastErrno(path);
    names.assign(static_cast<size_t>(n), '\0');
    n = ::listxattr(p.path.c_str(), names.data(), names.size());
    if (n >= 0) {
      names.resize(static_cast<size_t>(n));
      return names;
    }
    if (errno != ERANGE) return Status::LastErrno(path);
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
  auto prepared = overlay_->PrepareChange(path);
  NoteCopiedUpDirs();
  UCFS_ASSIGN_OR_RETURN(Overlay::UpperRef ref, std::move(prepared));
  FollowCopyUp(inode);
  UCFS_ASSIGN_OR_RETURN(ProcPath p, ProcPathOf(ref));
  return writer_.SetXattr(p.fd.get(), name, value, flags).WithFile(path);
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
  return writer_.RemoveXattr(p.fd.get(), name).WithFile(path);
}

}  // namespace ucfs
