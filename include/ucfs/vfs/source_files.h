// SourceFiles: the source files a view's pieces read, for every reader.
//
// Reads through the mount, copy-up into an upper directory and `ucfs
// export` all take source bytes from here, so all of them keep the same
// promise: a source file that changed since the view was built — replaced
// by a rename, or edited in place, whatever size and mtime it kept — is an
// error naming it (EIO through the mount), never other bytes. Each file is
// opened once, on first use, and its identity (device, inode, size, mtime,
// ctime) is checked against the one the view recorded on every use, since
// a file open for hours can be edited in place at any moment.
//
// Thread safety: every method may be called concurrently. One shared mutex
// guards the table; files are opened outside it.
#ifndef UCFS_VFS_SOURCE_FILES_H_
#define UCFS_VFS_SOURCE_FILES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/source_file.h"
#include "ucfs/base/status.h"
#include "ucfs/base/thread_annotations.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

class SourceFiles {
 public:
  // `source(i)` names source i and the identity its pieces were planned
  // against; `env` opens it.
  SourceFiles(Env& env, std::function<SourceFile(uint32_t)> source);
  // The sources of `view`, opened through the view's Env.
  explicit SourceFiles(const View& view);
  SourceFiles(const SourceFiles&) = delete;
  SourceFiles& operator=(const SourceFiles&) = delete;

  // Source `index`, open and checked. The file stays open (and the pointer
  // valid) as long as this SourceFiles lives. Errors carry EIO.
  Result<const RandomAccessFile*> Get(uint32_t index);

  // Appends the bytes of `pieces` to `out`, each source piece read from a
  // checked file.
  Status Read(const std::vector<ReadPiece>& pieces, std::string* out);
  // CRC-32 of the pieces' bytes, read in bounded chunks (tensors may be GBs).
  Result<uint32_t> Crc32(const std::vector<ReadPiece>& pieces);

 private:
  Status Changed(uint32_t index, const SourceFile& src, const FileIdentity& now);

  Env& env_;
  std::function<SourceFile(uint32_t)> source_;
  struct Entry {
    std::unique_ptr<RandomAccessFile> file;
    FileIdentity expected;
    std::once_flag reported;  // a change is logged once per file
  };
  SharedMutex mu_;  // a leaf: files are opened and checked outside it
  // By source index; a deque, so entries never move as it grows.
  std::deque<Entry> entries_ UCFS_GUARDED_BY(mu_);
};

// The sources of one read, each opened and checked by `files` once
// however many of the read's pieces it serves: an fstat per source and
// read, not per piece (a rank file at N = 1,024 is about 200 pieces of 4
// sources, and on a shared file system each fstat may be a round trip).
// Lives for one read; not thread-safe.
class SourcesOfRead {
 public:
  explicit SourcesOfRead(SourceFiles& files) : files_(files) {}
  Result<const RandomAccessFile*> Get(uint32_t index);

 private:
  SourceFiles& files_;
  // A read at N = 1 of W = 4,096 may touch thousands of sources.
  std::unordered_map<uint32_t, const RandomAccessFile*> checked_;
};

}  // namespace ucfs

#endif  // UCFS_VFS_SOURCE_FILES_H_
