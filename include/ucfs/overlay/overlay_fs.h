// OverlayFs: the writable mount as inode operations, without FUSE: the
// FileSystem of mounts with --upper (ReadOnlyFs is the read-only one's).
//
// The FUSE adapter speaks inode numbers; the Overlay speaks paths. This
// layer keeps the table between them, the way the kernel expects it:
// a number per path that stays put while the kernel holds it (lookup
// counts, forget), follows its file through renames, and is never reused.
// Every operation answers like a file system would — a `struct stat` or
// a Status carrying the errno — so tests drive it exactly as the kernel
// would and compare with a model, and the adapter stays a translation.
//
// Files of the upper directory are served by their own fds (a Handle's fd,
// owned in its node: opened here, read and written by the caller, given
// back by Release; their fsync, fallocate and the checks before a write
// made here); files of the view by the view's pieces, as in the read-only
// mount (ViewFile). New entries are made as the Caller asks (owner,
// umask), POSIX style.
//
// Thread safety: every method may be called concurrently; one mutex
// serialises them (metadata operations are rare next to reads and writes,
// which never take it). A copy-up's bytes are written with it released
// (CopyUpUnlocked): only the link that installs them holds it. Lock
// order: OverlayFs::mu_, then View's.
#ifndef UCFS_OVERLAY_OVERLAY_FS_H_
#define UCFS_OVERLAY_OVERLAY_FS_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/base/thread_annotations.h"
#include "ucfs/overlay/overlay.h"
#include "ucfs/vfs/file_system.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

class OverlayFs final : public FileSystem {
 public:
  OverlayFs(std::unique_ptr<Overlay> overlay, std::shared_ptr<View> view);
  ~OverlayFs() override;

  bool read_only() const override { return false; }
  View& view() override { return *view_; }

  // Every entry returned by Lookup, Create, MakeDir, MakeNode, Symlink and
  // Link counts one lookup, which Forget gives back.
  Result<struct stat> Lookup(InodeId parent, std::string_view name) override;
  // Overlay::MightAppear: the views of a tag saved through the mount.
  bool MightAppear(std::string_view name) override;
  // Paths walked from the upper root so far (Overlay::walks), for tests.
  uint64_t walks();
  void Forget(InodeId inode, uint64_t count) override;
  // `fd` >= 0: an open file's fd. An inode whose names are all gone still
  // answers while the kernel holds it (fstat, fchmod, futimens of an
  // unlinked file, of a removed directory): through a file of it that is
  // open, else as it was when it lost its last name (a directory or a
  // special file: kept here, as a file system keeps such an inode).
  Result<struct stat> GetAttr(InodeId inode, int fd = -1) override;
  // Entries sorted by name, with their inode numbers: a reading of the
  // directory (its atime moves as the upper file system moves it). A
  // removed directory the kernel still holds is empty.
  Result<DirEntries> ReadDir(InodeId dir) override;
  // Directory changes are made by rename/mkdir/unlink in the upper
  // directory: syncing its file system covers them.
  Status FsyncDir(InodeId dir) override;
  // The upper directory's file system's.
  struct statvfs StatFs() override {
    return StatFsOf(upper_dir_);
  }

  // An O_TRUNC open by `caller` clears the set-id bits their truncation
  // clears (ModeAfterWrite).
  Result<Handle> Open(InodeId inode, int flags, const Caller* caller = nullptr) override;
  Result<std::pair<struct stat, Handle>> Create(InodeId parent, std::string_view name, int flags,
                                                mode_t mode,
                                                const Caller* caller = nullptr) override;
  // The handle's: its view file's, until it is copied up (then ReadFd).
  InodeId ViewFileOf(InodeId, const Handle& handle) override { return handle.view_inode; }
  // The handle's upper file, after BeforeWrite. Takes no lock, as writes
  // take none.
  Result<WriteTarget> StartWrite(const Handle& handle, const Caller& caller) override;
  // Takes no lock, as writes take none, but to name the file of an error.
  Result<size_t> Write(InodeId inode, const Handle& handle, std::string_view data,
                       uint64_t offset) override;
  // Reports what closing the upper file would (as NFS and passthrough_ll
  // do), without giving it up; nothing for a view file.
  Status Flush(const Handle& handle) override;
  Status Fsync(const Handle& handle, bool datasync) override;
  Status Fallocate(const Handle& handle, int mode, off_t offset, off_t length) override;
  void Release(InodeId inode, const Handle& handle) override;
  // An open upper file that is a regular file and not set-id: its own fd.
  // Never a view file (its read-only handles read the copy once it is
  // copied up, which a backing file fixed at open could not), nor a set-id
  // file (its writes are the daemon's to see: BeforeWrite). Takes no lock.
  std::optional<WholeFile> WholeFileOf(InodeId inode, const Handle& handle) override;
  Result<struct stat> MakeDir(InodeId parent, std::string_view name, mode_t mode,
                              const Caller* caller = nullptr) override;
  Result<struct stat> MakeNode(InodeId parent, std::string_view name, mode_t mode, dev_t rdev,
                               const Caller* caller = nullptr) override;
  Result<struct stat> Symlink(std::string_view target, InodeId parent, std::string_view name,
                              const Caller* caller = nullptr) override;
  Result<std::string> ReadLink(InodeId inode) override;
  Result<struct stat> Link(InodeId inode, InodeId new_parent, std::string_view new_name) override;
  Status Unlink(InodeId parent, std::string_view name) override;
  Status RemoveDir(InodeId parent, std::string_view name) override;
  Status Rename(InodeId parent, std::string_view name, InodeId new_parent,
                std::string_view new_name, unsigned flags) override;
  // A view file is copied up first (truncation to 0 skips the copy). A
  // truncation by `caller` clears the set-id bits it clears
  // (ModeAfterWrite).
  Result<struct stat> SetAttr(InodeId inode, const SetAttrRequest& request, int fd = -1,
                              const Caller* caller = nullptr) override;
  // Before a write by `caller` through `fd` (an open upper file): the
  // set-id bits such a write clears, cleared (ModeAfterWrite); true if
  // there were any (behind the kernel's back: it is to be told). Takes no
  // lock, as writes take none.
  Result<bool> BeforeWrite(int fd, const Caller& caller);

  // The names of `inode` the table knows.
  std::vector<std::pair<InodeId, std::string>> NamesOf(InodeId inode) override;

  // Such as a view directory copied up to make room for a change below it:
  // a merged directory from then on, with another link count.
  std::vector<InodeId> TakeChangedBehind() override;

  // Extended attributes: the view's ("user.ucfs.*", read-only) for view
  // entries, the upper entry's own otherwise. Setting one on a view entry
  // copies it up first.
  Result<std::string> GetXattr(InodeId inode, const std::string& name) override;
  Result<std::string> ListXattr(InodeId inode) override;
  Status SetXattr(InodeId inode, const std::string& name, std::string_view value,
                  int flags) override;
  Status RemoveXattr(InodeId inode, const std::string& name) override;

  // The view inode serving `inode`, or 0 if it is an upper entry.
  Result<InodeId> ViewInodeOf(InodeId inode);

  const std::string& upper_dir() const { return upper_dir_; }
  // Inodes in the table (for tests: forgotten ones must go).
  size_t inode_count();

 private:
  struct Node {
    std::vector<std::string> paths;  // its names ("" for the root); none once all are gone
    uint64_t lookups = 0;
    std::vector<UniqueFd> fds;          // open upper files of it, which outlive its names
    InodeId view_inode = 0;             // the view file it last opened as
    std::weak_ptr<ViewFile> view_file;  // its view file's, while a handle holds it
    bool has_file_key = false;          // in by_file_ under file_key
    std::pair<dev_t, ino_t> file_key{};
    // Its attributes once its last name went, where no open file of it
    // answers for it (a removed directory, FIFO, socket, symlink).
    std::optional<struct stat> orphan;
  };

  // Copies the view file at `inode` up with the table unlocked (the bytes
  // written aside, then renamed in under the lock), so that a copy-up of
  // gigabytes holds no other operation up; a no-op for anything else.
  // `nameless`: a view file whose names are all gone is copied for its
  // open handles (ViewFile), to a file of no name.
  // `opened`: a copy adopted is opened for writing with `open_flags` where
  // it landed, not walked to again (*opened stays empty otherwise).
  Status CopyUpUnlocked(InodeId inode, bool keep_contents, bool nameless = false,
                        UniqueFd* opened = nullptr, int open_flags = 0) UCFS_EXCLUDES(mu_);
  Result<std::string> PathOf(InodeId inode) UCFS_REQUIRES(mu_);
  // `s` (a failed call on an open file of `inode`) about the file's path.
  Status AboutFile(InodeId inode, const Status& s) UCFS_EXCLUDES(mu_);
  Result<std::string> ChildPath(InodeId parent, std::string_view name) UCFS_REQUIRES(mu_);
  // The inode of `path`, made if new; `count` lookups added. An upper
  // file with several links is one inode whatever name it is reached by.
  InodeId InodeFor(const std::string& path, uint64_t count, const struct stat* upper = nullptr)
      UCFS_REQUIRES(mu_);
  Result<struct stat> StatPath(const std::string& path, InodeId inode) UCFS_REQUIRES(mu_);
  struct stat StatOf(const std::string& path, const Overlay::Entry& e, InodeId inode)
      UCFS_REQUIRES(mu_);
  // An fd of a file of `inode` that is open, or -1: an upper file's, or
  // its view file's copy (ViewFile::copy_fd, kept open by *held).
  int OpenFdOf(InodeId inode, std::shared_ptr<ViewFile>* held) UCFS_REQUIRES(mu_);
  // Drops `inode` from the table once neither the kernel (lookups) nor an
  // open file holds it.
  void MaybeErase(InodeId inode) UCFS_REQUIRES(mu_);
  // The entry at `path` is gone: its inode no longer has that name.
  void Detach(const std::string& path) UCFS_REQUIRES(mu_);
  void DropPath(const std::string& path) UCFS_REQUIRES(mu_);
  // `from` (and, for a directory, everything below it) is now at `to`.
  void Move(const std::string& from, const std::string& to) UCFS_REQUIRES(mu_);
  // The entries at `a` and `b` (and below them) swapped names.
  void Exchange(const std::string& a, const std::string& b) UCFS_REQUIRES(mu_);
  // Makes `path`'s entry a new one: the reply of a create.
  Result<struct stat> NewEntry(const std::string& path) UCFS_REQUIRES(mu_);
  // After a change that may have copied `inode` up: its view file's open
  // handles read the copy from now on (ViewFile::copy_fd).
  void FollowCopyUp(InodeId inode) UCFS_REQUIRES(mu_);
  // After any change: the view directories it copied up are merged ones
  // now (changed_behind_).
  void NoteCopiedUpDirs() UCFS_REQUIRES(mu_);
  // Before `path` loses its entry: the inode there and its attributes as
  // they will be once the entry is gone, if it is a directory or special
  // file (whose fds are the kernel's alone); Orphan keeps them for an inode
  // left with no name.
  std::optional<std::pair<InodeId, struct stat>> LastAttrs(const std::string& path)
      UCFS_REQUIRES(mu_);
  void Orphan(const std::optional<std::pair<InodeId, struct stat>>& last) UCFS_REQUIRES(mu_);
  // A setattr of an inode with no name and no open file: its kept
  // attributes changed.
  Result<struct stat> SetOrphanAttr(InodeId inode, Node& node, const SetAttrRequest& request)
      UCFS_REQUIRES(mu_);

  // The Overlay is not thread-safe: every call into it holds mu_.
  const std::unique_ptr<Overlay> overlay_ UCFS_PT_GUARDED_BY(mu_);
  const std::shared_ptr<View> view_;
  const std::string upper_dir_;
  WriteEnv& writer_;  // the Overlay's (Overlay::writer), thread-safe
  Mutex mu_;
  InodeId next_inode_ UCFS_GUARDED_BY(mu_) = kRootInode + 1;
  std::unordered_map<InodeId, Node> nodes_ UCFS_GUARDED_BY(mu_);
  std::unordered_map<std::string, InodeId> by_path_ UCFS_GUARDED_BY(mu_);
  // Upper files with several links: (device, inode) -> their inode here.
  std::map<std::pair<dev_t, ino_t>, InodeId> by_file_ UCFS_GUARDED_BY(mu_);
  std::vector<InodeId> changed_behind_ UCFS_GUARDED_BY(mu_);
};

}  // namespace ucfs

#endif  // UCFS_OVERLAY_OVERLAY_FS_H_
