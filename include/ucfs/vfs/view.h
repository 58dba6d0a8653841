// View: the file tree a mount shows, as pure data — no FUSE in here.
//
// Every file's bytes are described, not stored: FileContent::Plan maps a
// byte range of the file to pieces that are either bytes ucfs generated
// (zip headers, pickles), ranges of source files (tensor data, served by
// pread or splice), or zeros. The FUSE adapter only turns pieces into
// buffers, and the tests read the same pieces without a kernel.
//
// Directories are either built (the synthesised universal tree), backed
// by a source directory whose entries are listed on first access, or
// grafted: another view's directory, built the first time it is looked
// into (AddGraft, src/design/run-directories.md). Built entries shadow
// source entries of the same name.
//
// Thread safety: all queries may be called concurrently. Lock order: the
// View's mutex, then a grafted view's (to copy one of its sources out),
// then the Env: under it the view lists and stats source directories (an
// Env takes no lock, or a leaf one). It never calls FileContent::size()
// under it, which may build a LazyContent under that cache's own lock, nor
// a graft's builder.
#ifndef UCFS_VFS_VIEW_H_
#define UCFS_VFS_VIEW_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/source_file.h"
#include "ucfs/base/status.h"
#include "ucfs/base/thread_annotations.h"

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
  // About how many bytes of memory the content holds (built bytes, its
  // plan), for caches sized by bytes (ContentCache); 0 for little.
  virtual uint64_t memory() const { return 0; }
  // The source (an index of View::source()) this content is, whole and as
  // it is, when it is one: a reader may then read that file itself
  // (View::WholeSource); nullopt for bytes ucfs assembles.
  virtual std::optional<uint32_t> WholeSource() const { return std::nullopt; }
};

// A small file ucfs made (`latest_universal`).
class InlineContent final : public FileContent {
 public:
  explicit InlineContent(std::string data) : data_(std::move(data)) {}
  uint64_t size() const override { return data_.size(); }
  uint64_t memory() const override { return data_.size(); }
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
  std::optional<uint32_t> WholeSource() const override { return source_; }

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
  bool is_symlink = false;  // a source's symbolic link, shown as one (ReadLink)
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
  // Keeps `env`, the view's Env, alive as long as the view: for a view
  // built over an Env of its own (a tag's shared index, views/tag_views.h)
  // that outlives whatever made it.
  void OwnEnv(std::shared_ptr<Env> env) { owned_env_ = std::move(env); }
  Result<InodeId> AddDirectory(InodeId parent, std::string_view name);
  Result<InodeId> AddFile(InodeId parent, std::string_view name,
                          std::shared_ptr<const FileContent> content,
                          std::vector<Xattr> xattrs = {});
  // A file made from source file `from` alone (`latest_universal` from
  // `latest`): that file's time; its access as AddFile's (the strictest of
  // the sources'). Where `from` cannot be stat'ed, as AddFile.
  Result<InodeId> AddFileMadeFrom(InodeId parent, std::string_view name,
                                  std::shared_ptr<const FileContent> content,
                                  const std::string& from);
  // A directory showing a source directory's entries.
  Result<InodeId> AddSourceDirectory(InodeId parent, std::string_view name, std::string dir);
  // A source file, passed through.
  Result<InodeId> AddSourceFile(InodeId parent, std::string_view name, const std::string& path);

  // What a graft shows: directory `dir` of `view`.
  struct GraftTarget {
    std::shared_ptr<View> view;
    InodeId dir = kRootInode;
  };
  using GraftBuilder = std::function<Result<GraftTarget>()>;
  // A time known only by asking the file system (a stat of each file a
  // view is built from), asked the first time an attribute shows it, once,
  // outside the view's lock: a mount of a root whose other tags each have
  // thousands of rank files stats none of them until their views are
  // looked at.
  class LazyTime {
   public:
    explicit LazyTime(std::function<int64_t()> make) : make_(std::move(make)) {}
    int64_t Get() const {
      std::call_once(once_, [this] {
        value_ = make_();
        make_ = nullptr;  // what it holds (a tag's views, its index) is no longer needed
      });
      return value_;
    }

   private:
    mutable std::function<int64_t()> make_;  // null once called
    mutable std::once_flag once_;
    mutable int64_t value_ = 0;  // set inside once_, read after it
  };
  // A directory showing the contents of the directory `build` makes, built
  // the first time it is looked up into or listed: once, outside this
  // view's lock (a builder may read a checkpoint's rank files). Its own
  // attributes are `mtime_ns` (or `mtime_later`'s, where given) and
  // `access` throughout, so that a stat builds nothing. A builder's error
  // is kept and answered by every lookup into the graft; the rest of the
  // view serves on. A grafted view holds no graft itself. May be called
  // while the view is shared.
  Result<InodeId> AddGraft(InodeId parent, std::string_view name, GraftBuilder build,
                           int64_t mtime_ns, FileAccess access,
                           std::shared_ptr<const LazyTime> mtime_later = nullptr);

  // What a source directory shows besides its own entries, told from its
  // listing when it is first listed: a run's roots gain their views there
  // (src/design/run-directories.md). These entries shadow source entries
  // of the same name.
  struct SourceDirExtras {
    struct Graft {
      std::string name;
      GraftBuilder build;
      int64_t mtime_ns = 0;
      FileAccess access;
      std::shared_ptr<const LazyTime> mtime_later;  // where set, the time instead of mtime_ns
    };
    struct File {
      std::string name;
      std::shared_ptr<const FileContent> content;
      int64_t mtime_ns = 0;
      FileAccess access;
      // The sources the content's pieces name, when they are not this
      // view's (a checkpoint's, for weights built from it): registered
      // once per table, and the pieces renumbered into this view's.
      std::shared_ptr<const std::vector<SourceFile>> sources;
    };
    // A file of the listing shown under another name too, passed through
    // with its own attributes (a new rank's copy of a per-rank file).
    struct Copy {
      std::string name;
      std::string of;  // a file of the same listing
    };
    std::vector<Graft> grafts;
    std::vector<File> files;
    std::vector<Copy> copies;
    // Entries of the listing not shown (a rank beyond the new world size).
    std::vector<std::string> hidden;
  };
  // Runs without the view's lock, perhaps concurrently for two directories
  // (or twice for one: the first answer counts).
  using SourceDirDecorator =
      std::function<SourceDirExtras(const std::string& dir, const std::vector<DirEntry>& entries)>;
  // Before the view is shared.
  void DecorateSourceDirectories(SourceDirDecorator decorator);

  // --- growing a shared view (thread-safe) -----------------------------------
  // What a writable mount adds for the checkpoints saved into its upper
  // directory (upper_root_views.h). The directory at `path` ('/'-separated,
  // "" the root), made of built directories where the view has none;
  // InvalidArgument where a file or a graft's contents stand in the way.
  Result<InodeId> MakeDirectories(std::string_view path);
  // `extras`' grafts and files put into directory `dir`, each replacing an
  // entry of the same name (which keeps serving whoever holds its inode).
  // Copies and hidden entries are for listings only.
  Status PutExtras(InodeId dir, SourceDirExtras extras);

  // --- queries (thread-safe) -------------------------------------------------
  Result<InodeId> Lookup(InodeId parent, std::string_view name);
  Result<Attr> GetAttr(InodeId inode);
  // Entries of a directory, sorted by name (no "." or "..").
  Result<std::vector<std::pair<std::string, Attr>>> ReadDir(InodeId dir);
  Status Plan(InodeId file, uint64_t offset, uint64_t length, std::vector<ReadPiece>* out);
  // The source `file` is, whole, as an index of source(), when its bytes
  // are exactly one source file's, at the size the view recorded for it (a
  // file passed through: a model-states file, `latest`, a per-rank file
  // and its copies); nullopt for a file the view assembles. Whoever reads
  // that file instead (FUSE passthrough: the kernel, past the daemon)
  // checks its identity first, as every read does (SourceFiles::Get).
  Result<std::optional<uint32_t>> WholeSource(InodeId file);
  // What a symbolic link holds; InvalidArgument for anything else. A link
  // in a source directory is shown as a link, never followed: the kernel
  // resolves it for whoever looks, with their permissions.
  Result<std::string> ReadLink(InodeId inode);
  Result<std::vector<Xattr>> Xattrs(InodeId inode);
  SourceFile source(uint32_t index) const;
  // The owner and mode of a built file: the strictest of the sources added
  // with AddSource (directories add search where there is read).
  FileAccess BuiltAccess() const;
  Env& env() const { return env_; }

 private:
  struct Graft;
  struct Node {
    std::string name;
    InodeId parent = 0;
    bool is_dir = false;
    std::vector<std::pair<std::string, InodeId>> children;  // sorted by name
    std::string source_dir;  // a directory backed by a source directory
    bool listed = true;      // source_dir's entries have been added
    std::shared_ptr<const FileContent> content;
    int64_t mtime_ns = 0;
    std::shared_ptr<const LazyTime> mtime_later;  // where set, the time instead
    std::vector<Xattr> xattrs;
    // A source entry's own owner and mode; none for a built entry.
    std::optional<FileAccess> access;
    std::shared_ptr<Graft> graft;  // a graft's directory
    // A file whose content names the sources of a table added at
    // source_base (SourceDirExtras::File::sources).
    std::optional<uint32_t> source_base;
    std::optional<std::string> link;  // a symbolic link, holding this
  };
  struct Graft {
    GraftBuilder build;
    size_t index = 0;       // in grafts_: its inodes are Encode()d with it
    InodeId host_node = 0;  // its directory in this view
    std::once_flag built;   // `status`, `target` are set inside it, read after it
    Status status;
    GraftTarget target;
  };
  // Where an inode of this view lives: a graft's view (with its own inode
  // there), or this view (graft null).
  struct Place {
    std::shared_ptr<Graft> graft;
    InodeId local = 0;
  };
  // What AttrOf needs of a node, copied out under the lock.
  struct NodeAttrs {
    InodeId inode = 0;
    bool is_dir = false;
    std::optional<uint64_t> link_size;  // a symbolic link's: its target's length
    std::shared_ptr<const FileContent> content;
    int64_t mtime_ns = 0;
    std::shared_ptr<const LazyTime> mtime_later;
    FileAccess access;
  };

  Node* Find(InodeId inode) UCFS_REQUIRES_SHARED(mu_);
  // --- grafts (view_graft.cc)
  // Inodes of graft k's view are shown as (k + 1) << kGraftShift | local.
  static constexpr int kGraftShift = 40;
  Result<Place> Locate(InodeId inode) UCFS_EXCLUDES(mu_);
  // Runs the graft's builder once; its answer after.
  static Status Build(Graft& graft);
  InodeId Encode(const Graft& graft, InodeId local) const;
  // Graft `graft`'s source `local` as a source of this view, registered on
  // first use.
  Result<uint32_t> GraftSource(const Graft& graft, uint32_t local) UCFS_EXCLUDES(mu_);
  Status PlanGrafted(const Place& place, uint64_t offset, uint64_t length,
                     std::vector<ReadPiece>* out) UCFS_EXCLUDES(mu_);
  bool HasGrafts() const UCFS_EXCLUDES(mu_);
  Result<InodeId> AddNodeLocked(InodeId parent, std::string_view name, Node node)
      UCFS_REQUIRES(mu_);
  // A source directory's entries, each stat'ed, and its extras: taken
  // without the lock, as listing is the slow part.
  struct SourceListing {
    Status status;
    // A symbolic link's FileStat is its own, with its target in `links`.
    std::vector<std::pair<std::string, FileStat>> entries;
    std::map<std::string, std::string> links;
    SourceDirExtras extras;
  };
  SourceListing ListSource(const std::string& dir) UCFS_EXCLUDES(mu_);
  // Adds the extras, then the entries no built entry shadows.
  Status AddListingLocked(InodeId dir, SourceListing listing) UCFS_REQUIRES(mu_);
  Status AddGraftLocked(InodeId parent, std::string_view name, GraftBuilder build, int64_t mtime_ns,
                        FileAccess access, std::shared_ptr<const LazyTime> mtime_later)
      UCFS_REQUIRES(mu_);
  Status AddExtraFileLocked(InodeId dir, SourceDirExtras::File file) UCFS_REQUIRES(mu_);
  // Drops `name` from `dir`'s children (its node stays: inodes are never reused).
  void UnlinkChildLocked(InodeId dir, std::string_view name) UCFS_REQUIRES(mu_);
  Status EnsureListed(InodeId dir) UCFS_EXCLUDES(mu_);
  FileAccess BuiltAccessLocked() const UCFS_REQUIRES_SHARED(mu_);
  NodeAttrs AttrsLocked(InodeId inode, const Node& n) const UCFS_REQUIRES_SHARED(mu_);
  // Called without the lock: a content's size may be a lazy build.
  static Attr AttrOf(const NodeAttrs& n);

  // Fixed at construction (owned_env_, where set, before the view is
  // shared: it is env_).
  Env& env_;
  std::shared_ptr<Env> owned_env_;
  const int64_t mtime_ns_;
  SourceDirDecorator decorator_;  // set before the view is shared
  // Guards the tree, which grows as source directories are listed.
  mutable SharedMutex mu_;
  // Inode i is nodes_[i - 1]; a deque keeps references stable as it grows.
  std::deque<Node> nodes_ UCFS_GUARDED_BY(mu_);
  std::deque<SourceFile> sources_ UCFS_GUARDED_BY(mu_);
  std::vector<FileAccess> source_access_ UCFS_GUARDED_BY(mu_);  // of sources_ with a path
  std::vector<std::shared_ptr<Graft>> grafts_ UCFS_GUARDED_BY(mu_);
  // graft_sources_[k][i]: this view's index of graft k's source i, or
  // kUnmapped.
  std::vector<std::vector<uint32_t>> graft_sources_ UCFS_GUARDED_BY(mu_);
  // Source tables of extras files, by table, with where each begins in
  // sources_ (the shared_ptr keeps the key alive).
  std::map<std::shared_ptr<const std::vector<SourceFile>>, uint32_t> source_tables_
      UCFS_GUARDED_BY(mu_);
};

// A name that can be one path component: not empty, ".", "..", and without
// '/' or NUL.
bool IsSafePathComponent(std::string_view name);

}  // namespace ucfs

#endif  // UCFS_VFS_VIEW_H_
