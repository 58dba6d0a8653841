// Env: the seam between ucfs and the operating system's files.
//
// Everything in the core library reads source files through an Env, never
// through open()/pread() directly. PosixEnv is the real one; MemEnv holds
// files in memory so tests can truncate, corrupt or delete rank files
// without touching disk (LevelDB's Env idea).
#ifndef UCFS_BASE_ENV_H_
#define UCFS_BASE_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/path.h"  // the Env takes paths: JoinPath, RelativeBelow
#include "ucfs/base/status.h"
#include "ucfs/base/thread_annotations.h"

namespace ucfs {

class WriteEnv;  // write_env.h

// What identifies one version of a source file. A file replaced by a
// rename has another device or inode; one edited in place has another
// ctime, which — unlike size and mtime, which `touch -r` or a careful
// writer can restore — no user can set back. Anything derived from a file
// whose identity changed is stale.
struct FileIdentity {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  bool operator==(const FileIdentity&) const = default;
};

// Whether the file seen as `now` is still the one recorded as `recorded`:
// every field equal, the device only where one was recorded (a shared
// index records none, as each node of a parallel file system sees its own
// st_dev: checkpoint/tag_snapshot.h).
inline bool StillSameFile(const FileIdentity& recorded, FileIdentity now) {
  if (recorded.device == 0) now.device = 0;
  return now == recorded;
}

// Who may read a file: what the mount shows as its owner and mode, so that
// the kernel's `default_permissions` check holds what the source holds.
struct FileAccess {
  uint32_t mode = 0;  // permission bits (07777)
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool operator==(const FileAccess&) const = default;
};

// What a stat of a source file or directory tells.
struct FileStat {
  FileIdentity identity;
  FileAccess access;
  bool is_dir = false;
};

struct DirEntry {
  std::string name;
  bool is_dir = false;      // a directory, or a symlink to one
  bool is_symlink = false;  // a symbolic link (is_dir: what it points to)
};

// A symbolic link: what it holds, and its own stat (lstat's).
struct LinkInfo {
  std::string target;
  FileStat stat;
};

// A file opened for positional reads. Thread-safe: Read has no cursor.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into buf; *bytes_read < n only at end of
  // file. A short read is not an error here; callers that need exactly n
  // bytes use ReadExact.
  virtual Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const = 0;
  virtual uint64_t Size() const = 0;
  // What the open file is now (an fstat): compared with the identity a view
  // was built from before its bytes are used. By default, a file that never
  // changes: its size and nothing else.
  virtual Result<FileStat> Stat() const;
  // What the file was when it was opened: the fstat Open made where it made
  // one (PosixEnv's, for its size and kind), so that whoever reads a file
  // right after opening it need not ask the file system again: on a shared
  // file system each fstat is a round trip. Stat() where none was made.
  virtual Result<FileStat> OpenedStat() const { return Stat(); }
  // The path as given to Env::Open, for error messages.
  virtual const std::string& path() const = 0;
  // A file descriptor for splice/copy_file_range, or -1 (in-memory files).
  virtual int fd() const { return -1; }

  // Reads exactly n bytes or fails with Corruption ("truncated") naming the
  // path and the offset.
  Status ReadExact(uint64_t offset, size_t n, char* buf) const;
  Result<std::string> ReadString(uint64_t offset, size_t n) const;
};

class Env {
 public:
  virtual ~Env() = default;
  // Opens a regular file for reading. Anything else (a FIFO, a device, a
  // socket, a directory) fails at once, without blocking in open(2).
  virtual Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) = 0;
  virtual Result<FileStat> Stat(const std::string& path) = 0;
  bool IsDirectory(const std::string& path);
  // Entries of a directory, sorted by name, without "." and "..".
  virtual Result<std::vector<DirEntry>> ListDir(const std::string& path) = 0;
  // The symbolic link at `path` itself (not what it points to), which the
  // views show as a link: InvalidArgument where `path` is none.
  virtual Result<LinkInfo> ReadLink(const std::string& path);

  // Where `path` lies on disk, for messages: `path` itself, except in an
  // Env that shows other directories' files under it (a layered Env: the
  // layer that holds it).
  virtual std::string Where(const std::string& path) { return path; }

  // What a mount is planned with (mount/mount_plan.h), asked of the
  // process's Env (Env::Posix(), or a MemEnv in tests); by default
  // NotSupported.
  //
  // `path` absolute, without symlinks (realpath(3)).
  virtual Result<std::string> RealPath(const std::string& path);
  // An Env that serves `dir` (resolved) and what lies below it, nothing else.
  virtual Result<std::shared_ptr<Env>> Confine(const std::string& dir);
  // Makes directory `path` with exactly `mode` and modification time
  // `mtime_ns`: true, or false where a directory was there already (left
  // as it was).
  virtual Result<bool> MakeDir(const std::string& path, uint32_t mode, int64_t mtime_ns);

  // What writes where this Env reads (write_env.h says why it is an
  // interface of its own): by default the real file system's, since
  // every Env's writing (MakeDir; the overlay over a mount's upper
  // directory, export's output) is to real directories.
  virtual WriteEnv* Writer();

  // A whole small file (`latest`, `ds_config.json`); fails past max_bytes.
  Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes = 1 << 20);

  // The process-wide real filesystem, unconfined: for paths the user named
  // (the upper directory, export targets), never for a checkpoint's files.
  static Env* Posix();
};

// The real filesystem below `root` only: every path must lie below `root`
// (an absolute path without symlinks, as realpath(3) gives), and is
// resolved with openat2(RESOLVE_BENEATH) from a descriptor of it, so a
// symlink inside the checkpoint may point within it but never out of it
// ("a symlink leads out of the checkpoint root" — a shard linked to
// /etc/shadow is refused, not served). Thread-safe.
Result<std::unique_ptr<Env>> NewConfinedPosixEnv(const std::string& root);

// `base`, but for paths at or below `dir` (absolute, resolved), which go to
// `below`: a writable mount's view reads the checkpoints saved into its
// upper directory through an Env confined to it, and the source through
// one confined to the source. Thread-safe as both are.
std::unique_ptr<Env> NewRoutedEnv(std::shared_ptr<Env> base, std::string dir,
                                  std::shared_ptr<Env> below);

// Files held in memory, keyed by absolute-looking paths ("/ckpt/latest").
// Directories exist implicitly as prefixes of file paths, and explicitly
// where made (MakeDir). It has no symbolic links: RealPath is the path
// made normal, where something is there.
class MemEnv : public Env {
 public:
  void WriteFile(const std::string& path, std::string contents);
  bool RemoveFile(const std::string& path);
  // The stored contents, or nullptr.
  const std::string* Contents(const std::string& path) const;
  // Copies every regular file below real directory `dir` into this MemEnv
  // under `prefix`.
  Status CopyTreeFrom(const std::string& dir, const std::string& prefix);

  // Makes the next Stat of `path` (and of a file open on it) report another
  // ctime, as an in-place edit that kept size and mtime would.
  void TouchCtime(const std::string& path);
  // Sets what Stat reports as `path`'s owner and mode (default 0644, 0:0).
  void SetAccess(const std::string& path, FileAccess access);

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  Result<FileStat> Stat(const std::string& path) override;
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override;
  Result<std::string> RealPath(const std::string& path) override;
  // A view of this MemEnv, which must outlive it.
  Result<std::shared_ptr<Env>> Confine(const std::string& dir) override;
  Result<bool> MakeDir(const std::string& path, uint32_t mode, int64_t mtime_ns) override;

  // The stat of the file with `inode` if it is still at `path` (what an
  // open file's Stat reports), else nothing.
  std::optional<FileStat> StatIfSame(const std::string& path, uint64_t inode) const;

 private:
  struct File {
    std::shared_ptr<const std::string> data;
    uint64_t inode = 0;
    int64_t version = 0;  // mtime
    int64_t ctime = 0;
    FileAccess access{0644, 0, 0};
  };
  static FileStat StatOf(const File& f);
  // Whether `path` is a directory, made or implied by a file below it.
  bool IsDirLocked(const std::string& path) const UCFS_REQUIRES(mu_);
  mutable Mutex mu_;  // a leaf
  std::map<std::string, File> files_ UCFS_GUARDED_BY(mu_);
  std::map<std::string, FileStat> dirs_ UCFS_GUARDED_BY(mu_);  // made by MakeDir
  uint64_t next_inode_ UCFS_GUARDED_BY(mu_) = 1;
  int64_t clock_ UCFS_GUARDED_BY(mu_) = 1;
};

}  // namespace ucfs

#endif  // UCFS_BASE_ENV_H_
