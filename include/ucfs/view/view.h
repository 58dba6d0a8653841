// View: the file tree a mount shows, as pure data — no FUSE in here.
//
// Every file's bytes are described, not stored: FileContent::Plan maps a
// byte range of the file to pieces that are either bytes ucfs generated
// (zip headers, pickles), ranges of source files (tensor data, served by
// pread or splice), or zeros. The FUSE adapter only turns pieces into
// buffers, and the tests read the same pieces without a kernel.
//
// Directories are either built (the synthesised universal tree) or backed
// by a source directory whose entries are listed on first access; built
// entries shadow source entries of the same name.
//
// Thread safety: all queries may be called concurrently. Lock order: the
// View's mutex is a leaf, but for its Env: under it the view lists and
// stats source directories (an Env takes no lock, or a leaf one). It never
// calls FileContent::size() under it, which may build a LazyContent under
// that cache's own lock.
#ifndef UCFS_VIEW_VIEW_H_
#define UCFS_VIEW_VIEW_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/base/thread_annotations.h"
#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs {

struct ReadPiece {
  enum class Kind : uint8_t { kBytes, kSource, kZeros };
  Kind kind = Kind::kBytes;
  std::string_view bytes;  // kBytes: lives as long as the FileContent (or `owner`)
  uint32_t source = 0;     // kSource: index into View::source()
  uint64_t offset = 0;     // kSource: offset in the source file
  uint64_t length = 0;
  // Keeps `bytes` alive when the content that made them may be dropped
  // meanwhile (LazyContent's cache); null otherwise.
  std::shared_ptr<const void> owner;
};

class FileContent {
 public:
  virtual ~FileContent() = default;
  virtual uint64_t size() const = 0;
  // Appends pieces covering [offset, offset + length) clipped to size(), in
  // order and without gaps.
  virtual Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const = 0;
};

// A small file ucfs made (`latest_universal`).
class InlineContent final : public FileContent {
 public:
  explicit InlineContent(std::string data) : data_(std::move(data)) {}
  uint64_t size() const override { return data_.size(); }
  Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const override;

 private:
  std::string data_;
};

// A whole source file, passed through.
class SourceContent final : public FileContent {
 public:
  SourceContent(uint32_t source, uint64_t size) : source_(source), size_(size) {}
  uint64_t size() const override { return size_; }
  Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const override;

 private:
  uint32_t source_;
  uint64_t size_;
};

using InodeId = uint64_t;
inline constexpr InodeId kRootInode = 1;  // FUSE_ROOT_ID

// What a stat shows. Owner and mode are the source's for entries backed by
// a source file or directory; an entry ucfs builds takes the strictest of
// the checkpoint's files it is built from (BuiltAccess), so that the
// kernel's default_permissions check never lets anyone read through the
// mount what they could not read in the checkpoint.
struct Attr {
  InodeId inode = 0;
  bool is_dir = false;
  uint64_t size = 0;
  uint32_t mode = 0;  // permission bits only
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_ns = 0;
};

// The owner and mode of a file built from files with owners and modes
// `sources`: only what every one of them allows. Permission bits are
// intersected (and set-id bits dropped); an owner (or group) shared by all
// keeps its bits, while sources of different owners leave the file to root
// with no owner bits (or to group 0 with no group bits). `fallback` if
// `sources` is empty.
FileAccess StrictestAccess(const std::vector<FileAccess>& sources, FileAccess fallback);

// Every extended attribute a view shows is named "user.ucfs.<what>".
inline constexpr std::string_view kXattrPrefix = "user.ucfs.";

struct Xattr {
  std::string name;  // "user.ucfs.shape"
  std::string value;
};

class View {
 public:
  // `env` lists and stats source directories; `mtime_ns` is the time shown
  // for built entries.
  View(Env& env, int64_t mtime_ns);

  // --- building (before the view is shared) ---------------------------------
  // Registers a source file; returns its index for ReadPiece::source. Its
  // owner and mode count for the entries the view builds (BuiltAccess).
  uint32_t AddSource(SourceFile source);
  // Makes the root show the entries of `dir` besides the built ones.
  void BackRootBy(std::string dir);
  Result<InodeId> AddDirectory(InodeId parent, std::string_view name);
  Result<InodeId> AddFile(InodeId parent, std::string_view name,
                          std::shared_ptr<const FileContent> content,
                          std::vector<Xattr> xattrs = {});
  // A directory showing a source directory's entries.
  Result<InodeId> AddSourceDirectory(InodeId parent, std::string_view name, std::string dir);
  // A source file, passed through.
  Result<InodeId> AddSourceFile(InodeId parent, std::string_view name, const std::string& path);

  // --- queries (thread-safe) -------------------------------------------------
  Result<InodeId> Lookup(InodeId parent, std::string_view name);
  Result<Attr> GetAttr(InodeId inode);
  // Entries of a directory, sorted by name (no "." or "..").
  Result<std::vector<std::pair<std::string, Attr>>> ReadDir(InodeId dir);
  Status Plan(InodeId file, uint64_t offset, uint64_t length, std::vector<ReadPiece>* out);
  Result<std::vector<Xattr>> Xattrs(InodeId inode);
  SourceFile source(uint32_t index) const;
  // The owner and mode of a built file: the strictest of the sources added
  // with AddSource (directories add search where there is read).
  FileAccess BuiltAccess() const;
  Env& env() const { return env_; }

 private:
  struct Node {
    std::string name;
    InodeId parent = 0;
    bool is_dir = false;
    std::vector<std::pair<std::string, InodeId>> children;  // sorted by name
    std::string source_dir;  // a directory backed by a source directory
    bool listed = true;      // source_dir's entries have been added
    std::shared_ptr<const FileContent> content;
    int64_t mtime_ns = 0;
    std::vector<Xattr> xattrs;
    // A source entry's own owner and mode; none for a built entry.
    std::optional<FileAccess> access;
  };
  // What AttrOf needs of a node, copied out under the lock.
  struct NodeAttrs {
    InodeId inode = 0;
    bool is_dir = false;
    std::shared_ptr<const FileContent> content;
    int64_t mtime_ns = 0;
    FileAccess access;
  };

  Node* Find(InodeId inode) UCFS_REQUIRES_SHARED(mu_);
  Result<InodeId> AddNodeLocked(InodeId parent, std::string_view name, Node node)
      UCFS_REQUIRES(mu_);
  // Adds a source directory's entries that no built entry shadows.
  Status ListSourceLocked(InodeId dir) UCFS_REQUIRES(mu_);
  Status EnsureListed(InodeId dir) UCFS_EXCLUDES(mu_);
  FileAccess BuiltAccessLocked() const UCFS_REQUIRES_SHARED(mu_);
  NodeAttrs AttrsLocked(InodeId inode, const Node& n) const UCFS_REQUIRES_SHARED(mu_);
  // Called without the lock: a content's size may be a lazy build.
  static Attr AttrOf(const NodeAttrs& n);

  // Fixed at construction.
  Env& env_;
  const int64_t mtime_ns_;
  // Guards the tree, which grows as source directories are listed.
  mutable SharedMutex mu_;
  // Inode i is nodes_[i - 1]; a deque keeps references stable as it grows.
  std::deque<Node> nodes_ UCFS_GUARDED_BY(mu_);
  std::deque<SourceFile> sources_ UCFS_GUARDED_BY(mu_);
  std::vector<FileAccess> source_access_ UCFS_GUARDED_BY(mu_);  // of sources_ with a path
};

// A name that can be one path component: not empty, ".", "..", and without
// '/' or NUL.
bool IsSafePathComponent(std::string_view name);

}  // namespace ucfs

#endif  // UCFS_VIEW_VIEW_H_
