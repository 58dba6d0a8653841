// OverlayFs's calls on open upper files: what the adapter does not splice
// itself (overlay_fs.h). They take no lock: the handle's fd is open until
// Release, which the kernel sends only once every call through it is done.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "ucfs/overlay/overlay_fs.h"

namespace ucfs {
namespace {

Status NoUpperFile() { return Status::Posix(EBADF, "not an open upper file"); }

}  // namespace

Result<FileSystem::WriteTarget> OverlayFs::StartWrite(const Handle& handle, const Caller& caller) {
  if (handle.fd < 0) return NoUpperFile();
  // The set-id bits the write clears: FUSE leaves a direct write's, and
  // some of a buffered one's (S_ISGID for a writer outside the file's
  // group), to the file system.
  UCFS_ASSIGN_OR_RETURN(bool cleared, BeforeWrite(handle.fd, caller));
  return WriteTarget{handle.fd, cleared};
}

Status OverlayFs::Flush(const Handle& handle) {
  if (handle.fd < 0) return Status::OK();
  // Closed by hand: what close(2) answers is the point (a close that fails
  // has closed the fd all the same).
  const int dup = ::dup(handle.fd);
  if (dup < 0) return Status::LastErrno("dup");
  if (::close(dup) != 0) return Status::LastErrno("close");
  return Status::OK();
}

Status OverlayFs::Fsync(const Handle& handle, bool datasync) {
  if (handle.fd < 0) return Status::OK();
  if ((datasync ? ::fdatasync(handle.fd) : ::fsync(handle.fd)) != 0) {
    return Status::LastErrno(datasync ? "fdatasync" : "fsync");
  }
  return Status::OK();
}

Status OverlayFs::Fallocate(const Handle& handle, int mode, off_t offset, off_t length) {
  if (handle.fd < 0) return NoUpperFile();
  if (::fallocate(handle.fd, mode, offset, length) != 0) return Status::LastErrno("fallocate");
  return Status::OK();
}

Status OverlayFs::FsyncDir(InodeId) {
  const UniqueFd fd(::open(upper_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::LastErrno(upper_dir_);
  if (::syncfs(fd.get()) != 0) return Status::LastErrno("syncfs");
  return Status::OK();
}

}  // namespace ucfs
