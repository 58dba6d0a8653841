// FileSystem: a mount's inode operations, as the kernel asks for them,
// without FUSE.
//
// The FUSE adapter has one operation table, and each of its handlers is a
// call through this interface and a reply. Two file systems implement it:
// ReadOnlyFs (a mount without --upper: every change answers EROFS) and
// OverlayFs (a writable mount). It lives in vfs/, the lowest layer both
// can include: ReadOnlyFs is vfs's own, and overlay/ sits above vfs/.
//
// Every answer is what a file system gives — a `struct stat`, bytes, or a
// Status carrying the errno (Status::posix_errno) — so tests drive either
// implementation as the kernel would. Inode numbers are the file system's
// own; kRootInode is the root. Entries returned by Lookup, Create,
// MakeDir, MakeNode, Symlink and Link count one lookup each, which Forget
// gives back (a file system whose numbers never go may ignore both).
//
// Reads and writes of bytes stay with the adapter, so that they need no
// copy through the daemon: an open file is a Handle, whose real file the
// adapter splices from (Handle::ReadFd) and into (StartWrite's fd), or
// whose view file's pieces it splices from the sources (ViewFileOf).
//
// Thread safety: every method may be called concurrently.
#ifndef UCFS_VFS_FILE_SYSTEM_H_
#define UCFS_VFS_FILE_SYSTEM_H_

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

class FileSystem {
 public:
  // What a caller's writes and truncations may keep of a file's set-id
  // bits depends on beyond its uid and gid (ModeAfterWrite, overlay.h).
  struct Credentials {
    std::vector<gid_t> groups;  // supplementary
    bool fsetid = false;        // CAP_FSETID
  };

  // Who makes a new entry: it is made theirs when the daemon may chown
  // (runs as root; otherwise new entries stay the daemon's), with `umask`
  // taken from the mode asked for exactly once. Who writes or truncates a
  // file: what it keeps of its set-id bits is theirs to decide.
  struct Caller {
    uid_t uid = 0;
    gid_t gid = 0;
    mode_t umask = 0;
    // Asked only when a set-id bit is at stake (FUSE sends neither, so the
    // adapter reads them from /proc). Null: no supplementary groups, and
    // CAP_FSETID for uid 0 only.
    std::function<Credentials()> credentials;
  };

  // What a setattr asks for; times may be UTIME_NOW in tv_nsec.
  struct SetAttrRequest {
    std::optional<mode_t> mode;
    std::optional<uid_t> uid;
    std::optional<gid_t> gid;
    std::optional<uint64_t> size;
    std::optional<timespec> atime;
    std::optional<timespec> mtime;
  };

  // What the read-only handles of a view file read: the view's pieces
  // until the file is copied up, and from then on the copy, through
  // `copy_fd` (as overlayfs reopens such a file on its upper layer), even
  // once the copy has lost its names. Shared by the handles of one inode;
  // the copy's fd closes with the last of them.
  struct ViewFile {
    explicit ViewFile(InodeId view) : view_inode(view) {}
    ViewFile(const ViewFile&) = delete;
    ViewFile& operator=(const ViewFile&) = delete;
    ~ViewFile();
    const InodeId view_inode;
    std::atomic<int> copy_fd{-1};  // set once, under the file system's lock
  };

  // An open file: an fd of a real file, or the view inode whose pieces
  // serve reads (`view_file`). The fd is the file system's, open until
  // Release gives the handle back (or the file system goes). A read the
  // kernel sends without an open (read_only()) comes with an empty Handle.
  struct Handle {
    int fd = -1;
    InodeId view_inode = 0;
    std::shared_ptr<ViewFile> view_file;
    // A view file whose pages the kernel may keep from an earlier open (it
    // is the view file it was then).
    bool keep_cache = false;
    // The fd reads and fstat of this handle go to: its own, or its view
    // file's copy once there is one; -1 while the view serves it.
    int ReadFd() const { return fd >= 0 ? fd : view_file ? view_file->copy_fd.load() : -1; }
  };

  // Where a write through a handle goes: the fd to write the bytes to,
  // after the checks a write makes first.
  struct WriteTarget {
    int fd = -1;
    // Set-id bits the write cleared (ModeAfterWrite) behind the kernel's
    // back: it is to be told.
    bool mode_changed = false;
  };

  // A directory's entries sorted by name, with their attributes.
  using DirEntries = std::vector<std::pair<std::string, struct stat>>;

  FileSystem() = default;
  FileSystem(const FileSystem&) = delete;
  FileSystem& operator=(const FileSystem&) = delete;
  virtual ~FileSystem() = default;

  // Whether the tree is fixed while mounted: every change answers EROFS.
  // The adapter then mounts it "ro" and lets the kernel keep everything —
  // pages and listings across opens, negative entries for the full
  // timeout — and skip OPEN where it can (reads then come with an empty
  // Handle), and lists a directory once, at opendir. A writable one's
  // listing is read at the first readdir and again at each rewind
  // (reading a directory moves its atime, opening it does not).
  virtual bool read_only() const = 0;
  // The view whose files Handles without a real file read.
  virtual View& view() = 0;

  // --- names and attributes -----------------------------------------------
  virtual Result<struct stat> Lookup(InodeId parent, std::string_view name) = 0;
  // Whether a miss of `name` may stop being one with no call through this
  // file system: the kernel must not cache it.
  virtual bool MightAppear(std::string_view name) = 0;
  virtual void Forget(InodeId inode, uint64_t count) = 0;
  // `fd` >= 0: an open file's (Handle::ReadFd), which answers for an inode
  // whose names are gone.
  virtual Result<struct stat> GetAttr(InodeId inode, int fd = -1) = 0;
  // `fd` >= 0: the Handle::fd of an open file. A truncation or chown by
  // `caller` clears the set-id bits it clears; null: the daemon's.
  virtual Result<struct stat> SetAttr(InodeId inode, const SetAttrRequest& request, int fd = -1,
                                      const Caller* caller = nullptr) = 0;
  virtual Result<DirEntries> ReadDir(InodeId dir) = 0;
  virtual Status FsyncDir(InodeId dir) = 0;
  // What a symbolic link holds (EINVAL for anything else).
  virtual Result<std::string> ReadLink(InodeId inode) = 0;
  // The space of the file system the mount's files live on.
  virtual struct statvfs StatFs() = 0;

  // --- open files ---------------------------------------------------------
  // `flags` as open(2) gets them (no O_CREAT: that is Create). An O_TRUNC
  // open by `caller` clears the set-id bits a truncation clears.
  virtual Result<Handle> Open(InodeId inode, int flags, const Caller* caller = nullptr) = 0;
  // `caller` null: made as the daemon, `mode` as given.
  virtual Result<std::pair<struct stat, Handle>> Create(InodeId parent, std::string_view name,
                                                        int flags, mode_t mode,
                                                        const Caller* caller = nullptr) = 0;
  // The view file a read of `inode` through `handle` reads when
  // handle.ReadFd() < 0.
  virtual InodeId ViewFileOf(InodeId inode, const Handle& handle) = 0;
  // Before a write by `caller` through `handle`: the checks, and the fd the
  // bytes go to (EBADF for a handle with no real file).
  virtual Result<WriteTarget> StartWrite(const Handle& handle, const Caller& caller) = 0;
  // After StartWrite: a write of `data` at `offset` through `handle` of
  // `inode`, all of it (short writes gone on from where they stopped), for
  // bytes the kernel handed over in memory. Bytes written before an error
  // are answered, as write(2) answers them (the next write meets the
  // error). The adapter splices bytes in a pipe into StartWrite's fd itself.
  virtual Result<size_t> Write(InodeId inode, const Handle& handle, std::string_view data,
                               uint64_t offset) = 0;
  // close(2) of an opener's fd: what closing the handle's file would report,
  // the handle kept.
  virtual Status Flush(const Handle& handle) = 0;
  virtual Status Fsync(const Handle& handle, bool datasync) = 0;
  // fallocate(2) of the handle's file; `mode` as fallocate(2) takes it.
  virtual Status Fallocate(const Handle& handle, int mode, off_t offset, off_t length) = 0;
  // Closes the handle's fd; the inode no longer answers through it.
  virtual void Release(InodeId inode, const Handle& handle) = 0;

  // What an open file is when it is one real file, whole, which the kernel
  // may then read (and write) itself, past the daemon (FUSE passthrough):
  // the handle's own file (`fd`: an upper file), or a source file of the
  // view (`source`, an index of view().source(), which the adapter opens
  // and checks through SourceFiles at each open, so that a source changed
  // since the view was built is refused there, as any read of it is).
  struct WholeFile {
    int fd = -1;
    std::optional<uint32_t> source;
    bool operator==(const WholeFile&) const = default;
  };
  // nullopt for a file whose reads must reach the daemon: one the view
  // assembles, or whose handle must see a copy-up (a writable mount's view
  // files), or whose writes the daemon must see (a set-id file: a write
  // clears its bits, StartWrite). The same for every handle of an inode
  // while it is that file: the kernel takes every open of an inode through
  // the same backing file, or none.
  virtual std::optional<WholeFile> WholeFileOf(InodeId inode, const Handle& handle) = 0;

  // --- entries ------------------------------------------------------------
  virtual Result<struct stat> MakeDir(InodeId parent, std::string_view name, mode_t mode,
                                      const Caller* caller = nullptr) = 0;
  // `mode` carries the file type (S_IFREG, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK).
  virtual Result<struct stat> MakeNode(InodeId parent, std::string_view name, mode_t mode,
                                       dev_t rdev, const Caller* caller = nullptr) = 0;
  virtual Result<struct stat> Symlink(std::string_view target, InodeId parent,
                                      std::string_view name, const Caller* caller = nullptr) = 0;
  // The new name is the same inode.
  virtual Result<struct stat> Link(InodeId inode, InodeId new_parent,
                                   std::string_view new_name) = 0;
  virtual Status Unlink(InodeId parent, std::string_view name) = 0;
  virtual Status RemoveDir(InodeId parent, std::string_view name) = 0;
  // `flags`: RENAME_NOREPLACE, RENAME_EXCHANGE.
  virtual Status Rename(InodeId parent, std::string_view name, InodeId new_parent,
                        std::string_view new_name, unsigned flags) = 0;

  // --- extended attributes ------------------------------------------------
  // ENODATA for a name the entry does not have. ListXattr: the names, each
  // ending in a NUL.
  virtual Result<std::string> GetXattr(InodeId inode, const std::string& name) = 0;
  virtual Result<std::string> ListXattr(InodeId inode) = 0;
  virtual Status SetXattr(InodeId inode, const std::string& name, std::string_view value,
                          int flags) = 0;
  virtual Status RemoveXattr(InodeId inode, const std::string& name) = 0;

  // --- what the kernel is to be told ----------------------------------------
  // Inodes whose attributes changed without an operation on them, since the
  // last call: the kernel, which caches attributes, is to drop them.
  virtual std::vector<InodeId> TakeChangedBehind() = 0;
  // The names of `inode` the file system knows: (parent inode, name).
  virtual std::vector<std::pair<InodeId, std::string>> NamesOf(InodeId inode) = 0;
};

// statvfs(2) of `path`, or, where that fails (or `path` is empty), a file
// system of 4 KiB blocks and 255-byte names with no space reported.
struct statvfs StatFsOf(const std::string& path);

// A view entry's extended attributes as getxattr(2) and listxattr(2) give
// them: the value of `name` (ENODATA if it has none), and the names, each
// ending in a NUL.
Result<std::string> XattrValue(const std::vector<Xattr>& xattrs, const std::string& name);
std::string XattrNames(const std::vector<Xattr>& xattrs);

}  // namespace ucfs

#endif  // UCFS_VFS_FILE_SYSTEM_H_
