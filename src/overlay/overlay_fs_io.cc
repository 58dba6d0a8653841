// OverlayFs's calls on open upper files: what the adapter does not splice
// itself (overlay_fs.h). They take no lock: the handle's fd is open until
// Release, which the kernel sends only once every call through it is done.
#include <fcntl.h>
#include <sys/stat.h>
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

Result<size_t> OverlayFs::Write(InodeId inode, const Handle& handle, std::string_view data,
                                uint64_t offset) {
  if (handle.fd < 0) return AboutFile(inode, Status::Posix(EBADF, "not open for writing"));
  size_t written = 0;
  Status s = writer_.WriteAll(handle.fd, data, offset, &written);
  if (!s.ok() && written == 0) return AboutFile(inode, s);
  return written;
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
  return writer_.Sync(handle.fd, datasync);
}

Status OverlayFs::Fallocate(const Handle& handle, int mode, off_t offset, off_t length) {
  if (handle.fd < 0) return NoUpperFile();
  if (offset < 0 || length <= 0) return Status::Posix(EINVAL, "fallocate of a negative range");
  return writer_.Allocate(handle.fd, mode, static_cast<uint64_t>(offset),
                          static_cast<uint64_t>(length));
}

std::optional<FileSystem::WholeFile> OverlayFs::WholeFileOf(InodeId, const Handle& handle) {
  struct stat st {};
  if (handle.fd < 0 || ::fstat(handle.fd, &st) != 0) return std::nullopt;
  if (!S_ISREG(st.st_mode) || (st.st_mode & (S_ISUID | S_ISGID)) != 0) return std::nullopt;
  WholeFile whole;
  whole.fd = handle.fd;
  return whole;
}

Status OverlayFs::FsyncDir(InodeId) {
  // Directory changes are made by rename, mkdir and unlink in the upper
  // directory; syncing its file system covers them.
  const UniqueFd fd(::open(upper_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::LastErrno(upper_dir_);
  return writer_.SyncFileSystem(fd.get());
}

}  // namespace ucfs
