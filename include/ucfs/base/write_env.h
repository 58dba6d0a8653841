// WriteEnv: the seam between ucfs and the operating system's writes.
//
// Everything the core library writes — the writable mount's upper
// directory (overlay/), export's output (tools/export.h), the directories
// Env::MakeDir makes — goes through a WriteEnv, never through write(2),
// renameat2(2) or fsync(2) directly, so that a test can put a full disk,
// an I/O error or a short write under any of it (FaultInjectingWriteEnv,
// as LevelDB's Env and RocksDB's FaultInjectionTestFS do).
//
// Why not more methods of Env: an Env reads a checkpoint by path, and most
// Envs are no file system one writes to (MemEnv, the confined and routed
// ones, the layered upper directories). The writer works on descriptors:
// the overlay walks its upper directory one component at a time and makes
// every change relative to the directory fd it walked to (openat,
// renameat2, unlinkat ... with O_NOFOLLOW), so a path of any length is
// safe from symlinks swapped in on the way; an Env's paths cannot say
// that. So the seam is its own interface, and the Env hands it out
// (Env::Writer(): the real one unless an Env says otherwise), so that who
// holds an Env holds the one seam that writes where it reads; Overlay and
// Export take another through their options (tests).
//
// Every call is the system call it names, EINTR retried, and answers with
// a Status carrying the errno (Status::posix_errno) and saying what failed
// ("write of 4096 bytes at offset 8192: No space left on device"); the
// caller puts the file it was writing in front (Status::WithFile). `dir`
// is a directory fd, or AT_FDCWD for a path.
#ifndef UCFS_BASE_WRITE_ENV_H_
#define UCFS_BASE_WRITE_ENV_H_

#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ucfs/base/status.h"
#include "ucfs/base/unique_fd.h"

namespace ucfs {

class WriteEnv {
 public:
  virtual ~WriteEnv() = default;

  // The real file system (thread-safe, stateless).
  static WriteEnv* Posix();

  // openat(2), O_CLOEXEC added: a file to write, made or opened (O_CREAT,
  // O_TMPFILE, O_TRUNC, O_WRONLY, O_RDWR in `flags`).
  virtual Result<UniqueFd> OpenAt(int dir, const std::string& name, int flags, mode_t mode) = 0;
  virtual Status MakeDirAt(int dir, const std::string& name, mode_t mode) = 0;
  virtual Status MakeNodeAt(int dir, const std::string& name, mode_t mode, dev_t rdev) = 0;
  virtual Status SymlinkAt(const std::string& target, int dir, const std::string& name) = 0;
  // linkat(2); AT_SYMLINK_FOLLOW in `flags` names what a /proc/self/fd
  // link points to (a nameless O_TMPFILE file given its name).
  virtual Status LinkAt(int from_dir, const std::string& from, int to_dir, const std::string& to,
                        int flags) = 0;
  // renameat2(2): `flags` 0, RENAME_NOREPLACE or RENAME_EXCHANGE.
  virtual Status RenameAt(int from_dir, const std::string& from, int to_dir, const std::string& to,
                          unsigned flags) = 0;
  // unlinkat(2): AT_REMOVEDIR in `flags` for a directory.
  virtual Status UnlinkAt(int dir, const std::string& name, int flags) = 0;

  // pwrite(2): how many bytes of `data` went to `fd` at `offset`, which
  // may be fewer than all of them (a short write; WriteAll loops), never
  // none unless `data` is empty.
  virtual Result<size_t> Write(int fd, std::string_view data, uint64_t offset) = 0;
  // copy_file_range(2) of up to `n` bytes, in the kernel: how many were
  // copied (maybe fewer; 0 at the end of `in`). EXDEV, EINVAL, ENOSYS or
  // EOPNOTSUPP where the kernel cannot copy between these two files.
  virtual Result<size_t> CopyRange(int in, uint64_t in_offset, int out, uint64_t out_offset,
                                   size_t n) = 0;
  // fsync(2), or fdatasync(2) if `data_only`.
  virtual Status Sync(int fd, bool data_only) = 0;
  // syncfs(2): everything written to the file system `fd` is on (the
  // directory changes an fsync of a directory asks for).
  virtual Status SyncFileSystem(int fd) = 0;
  virtual Status Truncate(int fd, uint64_t size) = 0;
  // fallocate(2).
  virtual Status Allocate(int fd, int mode, uint64_t offset, uint64_t length) = 0;

  // The mode, owner and times of `name` in `dir`, or of the open file
  // `dir` itself where `name` is empty. `flags`: AT_SYMLINK_NOFOLLOW (a
  // mode always follows, as fchmodat(2) does). A time's tv_nsec may be
  // UTIME_NOW or UTIME_OMIT.
  virtual Status ChmodAt(int dir, const std::string& name, mode_t mode) = 0;
  virtual Status ChownAt(int dir, const std::string& name, uid_t uid, gid_t gid, int flags) = 0;
  virtual Status SetTimesAt(int dir, const std::string& name, const timespec times[2],
                            int flags) = 0;
  // An extended attribute of the entry `fd` is open on: an O_PATH fd
  // (through its /proc/self/fd link, which names a symlink itself, not
  // what it points to) or an open file.
  virtual Status SetXattr(int fd, const std::string& name, std::string_view value, int flags) = 0;
  virtual Status RemoveXattr(int fd, const std::string& name) = 0;

  // All of `data` at `offset`, over as many Writes as it takes: fails with
  // the first error, the bytes before it written (*written says how many).
  Status WriteAll(int fd, std::string_view data, uint64_t offset, size_t* written = nullptr);

 protected:
  // How a call that failed with `err` is reported: "<op>: <strerror>".
  static Status Failed(std::string_view op, int err);
};

}  // namespace ucfs

#endif  // UCFS_BASE_WRITE_ENV_H_
