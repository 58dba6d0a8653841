// Env: the seam between ucfs and the operating system's files.
//
// Everything in the core library reads source files through an Env, never
// through open()/pread() directly. PosixEnv is the real one; MemEnv holds
// files in memory so tests can truncate, corrupt or delete rank files
// without touching disk (LevelDB's Env idea).
#ifndef UCFS_ENV_H_
#define UCFS_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/status.h"

namespace ucfs {

// What identifies one version of a source file: a changed size, mtime or
// inode means the file was rewritten and anything derived from it is stale.
struct FileIdentity {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  bool operator==(const FileIdentity&) const = default;
};

struct DirEntry {
  std::string name;
  bool is_dir = false;
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
  virtual Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) = 0;
  virtual Result<FileIdentity> Stat(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  // Entries of a directory, sorted by name, without "." and "..".
  virtual Result<std::vector<DirEntry>> ListDir(const std::string& path) = 0;

  // A whole small file (`latest`, `ds_config.json`); fails past max_bytes.
  Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes = 1 << 20);

  // The process-wide real filesystem.
  static Env* Posix();
};

// Files held in memory, keyed by absolute-looking paths ("/ckpt/latest").
// Directories exist implicitly as prefixes of file paths.
class MemEnv : public Env {
 public:
  void WriteFile(const std::string& path, std::string contents);
  bool RemoveFile(const std::string& path);
  // The stored contents, or nullptr.
  const std::string* Contents(const std::string& path) const;
  // Copies every regular file below real directory `dir` into this MemEnv
  // under `prefix`.
  Status CopyTreeFrom(const std::string& dir, const std::string& prefix);

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  Result<FileIdentity> Stat(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override;

 private:
  struct File {
    std::shared_ptr<const std::string> data;
    uint64_t inode;
    int64_t version;
  };
  mutable std::mutex mu_;
  std::map<std::string, File> files_;
  uint64_t next_inode_ = 1;
  int64_t clock_ = 1;
};

// "dir/name" without doubling slashes.
std::string JoinPath(std::string_view dir, std::string_view name);
// The last path component ("a/b/c.pt" -> "c.pt").
std::string_view BaseName(std::string_view path);

}  // namespace ucfs

#endif  // UCFS_ENV_H_
