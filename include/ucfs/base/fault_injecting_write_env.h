// FaultInjectingWriteEnv: a WriteEnv that fails where a test tells it to.
//
// It wraps another WriteEnv (the real one by default) and passes every call
// on, except those it is told to fail: a kind of call (every fsync), the
// k-th call of a kind or of any kind, every call on paths containing some
// text (the upper directory's "t/", an export's ".ucfs-export"
// temporaries), each with the errno asked for (ENOSPC, EIO, EDQUOT...). It
// can also make writes short (a write moves at most so many bytes, which
// callers must loop over) and be a disk that fills up (writes and copies
// past so many bytes in total write what fits, then fail with ENOSPC), as
// RocksDB's FaultInjectionTestFS and LevelDB's fault-injecting Env do for
// theirs. A failed call changes nothing: it is not passed on.
//
// The path a call is matched by is its directory's path joined with the
// name (read back from /proc/self/fd), or for a call on an open file that
// file's path ("... (deleted)" for a nameless one). Thread-safe.
#ifndef UCFS_BASE_FAULT_INJECTING_WRITE_ENV_H_
#define UCFS_BASE_FAULT_INJECTING_WRITE_ENV_H_

#include <cerrno>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/thread_annotations.h"
#include "ucfs/base/write_env.h"

namespace ucfs {

class FaultInjectingWriteEnv final : public WriteEnv {
 public:
  // The kinds of call, one a method of WriteEnv.
  enum class Op {
    kOpen,
    kMakeDir,
    kMakeNode,
    kSymlink,
    kLink,
    kRename,
    kUnlink,
    kWrite,
    kCopy,
    kSync,
    kTruncate,
    kAllocate,
    kChmod,
    kChown,
    kSetTimes,
    kSetXattr,
    kRemoveXattr,
  };
  static constexpr uint64_t kEvery = std::numeric_limits<uint64_t>::max();

  // Which calls fail: those of kind `op` (any kind if unset) on a path
  // containing `path_contains` (any if empty), but for the first `after`
  // of them (the k-th fails: after = k - 1); then `times` of them fail
  // (every one by default) with `err`.
  struct Fault {
    std::optional<Op> op;
    std::string path_contains;
    uint64_t after = 0;
    uint64_t times = kEvery;
    int err = EIO;
  };

  explicit FaultInjectingWriteEnv(WriteEnv* base = WriteEnv::Posix()) : base_(base) {}

  void Inject(Fault fault);
  // Each write and copy moves at most `max_bytes` (> 0) of what it is given.
  void ShortWrites(size_t max_bytes);
  // The disk has `free_bytes` left: the write or copy that reaches them
  // moves what fits, and every one after it fails with `err`.
  void FillUpAfter(uint64_t free_bytes, int err = ENOSPC);
  // No faults, no limits from now on: the disk is mended (the counts stay).
  void Heal();

  // Calls of kind `op` seen, failed or not.
  uint64_t calls(Op op) const;
  // Calls failed on purpose so far.
  uint64_t failed() const;
  // Bytes written and copied through this env.
  uint64_t bytes_written() const;

  Result<UniqueFd> OpenAt(int dir, const std::string& name, int flags, mode_t mode) override;
  Status MakeDirAt(int dir, const std::string& name, mode_t mode) override;
  Status MakeNodeAt(int dir, const std::string& name, mode_t mode, dev_t rdev) override;
  Status SymlinkAt(const std::string& target, int dir, const std::string& name) override;
  Status LinkAt(int from_dir, const std::string& from, int to_dir, const std::string& to,
                int flags) override;
  Status RenameAt(int from_dir, const std::string& from, int to_dir, const std::string& to,
                  unsigned flags) override;
  Status UnlinkAt(int dir, const std::string& name, int flags) override;
  Result<size_t> Write(int fd, std::string_view data, uint64_t offset) override;
  Result<size_t> CopyRange(int in, uint64_t in_offset, int out, uint64_t out_offset,
                           size_t n) override;
  Status Sync(int fd, bool data_only) override;
  Status SyncFileSystem(int fd) override;
  Status Truncate(int fd, uint64_t size) override;
  Status Allocate(int fd, int mode, uint64_t offset, uint64_t length) override;
  Status ChmodAt(int dir, const std::string& name, mode_t mode) override;
  Status ChownAt(int dir, const std::string& name, uid_t uid, gid_t gid, int flags) override;
  Status SetTimesAt(int dir, const std::string& name, const timespec times[2], int flags) override;
  Status SetXattr(int fd, const std::string& name, std::string_view value, int flags) override;
  Status RemoveXattr(int fd, const std::string& name) override;

 private:
  struct Armed {
    Fault fault;
    uint64_t matched = 0;  // calls it matched so far
  };
  // Counts a call of `op` on `path` (or on both paths of a link or
  // rename); the error it is to fail with, if it is one to fail.
  Status Check(Op op, const std::string& path, const std::string& other = "");
  // Checks a write or copy of `n` bytes and reserves what of them it may
  // move (ShortWrites, FillUpAfter): more than none, or an error.
  Result<size_t> Reserve(Op op, int fd, size_t n);
  // Gives back what a write or copy reserved and did not move.
  void Unreserve(size_t reserved, size_t moved);

  WriteEnv* const base_;
  mutable Mutex mu_;  // a leaf
  std::vector<Armed> faults_ UCFS_GUARDED_BY(mu_);
  std::map<Op, uint64_t> calls_ UCFS_GUARDED_BY(mu_);
  uint64_t failed_ UCFS_GUARDED_BY(mu_) = 0;
  size_t max_write_ UCFS_GUARDED_BY(mu_) = 0;  // 0: no limit
  std::optional<uint64_t> free_bytes_ UCFS_GUARDED_BY(mu_);
  int full_err_ UCFS_GUARDED_BY(mu_) = ENOSPC;
  uint64_t written_ UCFS_GUARDED_BY(mu_) = 0;
};

}  // namespace ucfs

#endif  // UCFS_BASE_FAULT_INJECTING_WRITE_ENV_H_
