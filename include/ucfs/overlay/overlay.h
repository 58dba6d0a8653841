// Overlay: the writable layer of the reshard view.
//
// Everything written through the mount lands in an upper directory on a
// real file system; what was not written falls through to the read-only
// View. Upper entries shadow view entries of the same name. A view entry
// that is deleted is recorded as a whiteout, a file ".wh.<name>" in the
// upper directory; a directory made where a deleted one stood is marked
// opaque (".wh..opq" inside it) so the old contents stay hidden. After
// unmount the upper directory alone is a plain directory tree (the
// whiteouts are the only extra files). The source checkpoint is never
// written: the View has no write path at all.
//
// Names beginning with ".wh." are the whiteouts' namespace, so an entry
// whose own name begins with ".wh." (one the view shows, or one made
// through the mount) is stored escaped, as ".wh..wh.e.<name>", and its
// whiteout is ".wh..wh.w.<name>" (as is the whiteout of ".opq"); every
// other ".wh..wh.*" name is ucfs's own (copy-up temporaries). Real names
// never collide with the bookkeeping.
//
// Every operation on the upper directory is made relative to directory
// fds, walked down one component at a time from the upper root
// (openat/mkdirat/renameat2/...): paths inside the mount may be as long as
// the kernel allows, whatever the upper directory's own path. Every change
// is made through a WriteEnv (Options::writer), so that tests can fail any
// of them; one that fails leaves the mount showing what it showed before.
//
// Paths are relative to the mount root, '/'-separated, no leading slash;
// "" is the root. Errors carry the errno a file system would answer with
// (Status::posix_errno). Not thread-safe: OverlayFs serialises calls.
#ifndef UCFS_OVERLAY_OVERLAY_H_
#define UCFS_OVERLAY_OVERLAY_H_

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/base/unique_fd.h"
#include "ucfs/base/write_env.h"
#include "ucfs/vfs/file_system.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

// The longest name a directory entry may have (NAME_MAX).
inline constexpr size_t kMaxNameLength = 255;

class Overlay {
 public:
  struct Entry {
    bool is_dir = false;
    bool in_upper = false;     // an upper entry (of any type), or an upper directory
    InodeId lower = 0;         // the view's entry, 0 if none shows through
    bool covers_view = false;  // the view has an entry at this path (shown or hidden by this one)
    std::string upper_path;    // where it is (or would be) in the upper directory; for
                               // messages and tests: operations use fds
    struct stat st {};         // in_upper: the upper entry's lstat
  };

  // Who makes a new entry, and who writes or truncates a file (the
  // mount's FileSystem interface says what each decides).
  using Credentials = FileSystem::Credentials;
  using Caller = FileSystem::Caller;

  // An entry of the upper directory, to act on relative to its directory:
  // `dir` is an O_PATH fd of the directory holding it, `name` its stored
  // name there ("." for the root, whose `dir` is the root itself).
  struct UpperRef {
    UniqueFd dir;
    std::string name;
  };

  struct Options {
    // Names of root entries that are read-only in every way (the
    // consolidated weights' "<tag>_fp32"): nothing in or below them can be
    // made, changed, removed, renamed or linked (EROFS), and their modes
    // show no write bits.
    std::vector<std::string> read_only;
    // What a view may add to the upper directories (the views of a
    // checkpoint saved through the mount: upper_root_views.h). Both set, or
    // neither.
    //
    // Whether a name missed in an upper directory is one the view could add
    // there: only such a miss asks `on_upper_dir`, and none is final.
    std::function<bool(std::string_view name)> might_show;
    // Asked when an upper directory is listed, or a name `might_show` is
    // looked up in one and missed: the view may add to its directory at
    // `path` what it makes of the upper directory `upper_dir`; true when it
    // did, and the overlay then looks again. Runs under the OverlayFs lock,
    // so it must not call into the Overlay.
    std::function<bool(const std::string& path, const std::string& upper_dir)> on_upper_dir;
    // What the upper directory is changed through; null: the Env's
    // (Env::Writer(), the real file system).
    WriteEnv* writer = nullptr;
  };

  // Creates `upper_dir` if needed (0755 whatever the umask: a shared
  // mount's root must be open to its users), and removes the temporary
  // files of copy-ups a crash interrupted.
  static Result<std::unique_ptr<Overlay>> Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env,
                                               Options options);
  // With the default Options (a default argument cannot be: Options is
  // not complete until the class is).
  static Result<std::unique_ptr<Overlay>> Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env);

  // A directory of the view that an upper directory of the same name merges
  // with (`lower` set) shows through it unless that one is opaque: a
  // directory made or moved where a view directory was removed holds
  // nothing of the view, so it is no merge (and renames like any other).
  Result<Entry> Lookup(std::string_view path);
  // Whether `name`, missing now, may yet appear without being made through
  // the overlay (Options::might_show): a miss of it must not be remembered.
  bool MightAppear(std::string_view name) const;
  // How many times a path was walked from the upper root (Resolve,
  // UpperDir): what tests count per operation.
  uint64_t walks() const { return walks_; }
  // The merged listing, sorted by name, whiteouts applied and hidden.
  // `reading`: a listing the mount's user asked for, which moves the upper
  // directory's atime as reading any directory does; the overlay's own
  // (is it empty? what is there to clear?) leave it.
  Result<std::vector<std::pair<std::string, Entry>>> ReadDir(std::string_view path,
                                                             bool reading = false);

  // `caller` null: the entry is the daemon's, mode as given.
  Status MakeDir(std::string_view path, mode_t mode, const Caller* caller = nullptr);
  // An fd open for writing (O_WRONLY or O_RDWR in `flags`). A view file is
  // copied up first unless O_TRUNC makes its contents irrelevant; a new
  // file needs O_CREAT (*created says whether it was made). Missing upper
  // parents are created.
  Result<UniqueFd> OpenWrite(std::string_view path, int flags, mode_t mode,
                             const Caller* caller = nullptr, bool* created = nullptr);
  // An fd of an upper file open for reading.
  Result<UniqueFd> OpenRead(std::string_view path, int flags);
  // mknod(2): a regular file, FIFO, socket or device node (`mode` has the type).
  Status MakeNode(std::string_view path, mode_t mode, dev_t rdev, const Caller* caller = nullptr);
  Status Symlink(std::string_view target, std::string_view path, const Caller* caller = nullptr);
  Result<std::string> ReadLink(std::string_view path);
  // A view file is copied up first, then linked.
  Status Link(std::string_view from, std::string_view to);
  Status Unlink(std::string_view path);
  Status RemoveDir(std::string_view path);
  // Non-directories: both ends may be view or upper entries (a view file
  // is copied up first). Directories: only ones that hold no view entries
  // (made through the mount), onto nothing or an empty directory; others
  // fail with EXDEV, which mv(1) answers by copying. `flags`:
  // RENAME_NOREPLACE, RENAME_EXCHANGE.
  Status Rename(std::string_view from, std::string_view to, unsigned flags = 0);

  // Makes `path` an upper entry, copying it up if it is the view's, so it
  // can be changed (chmod, chown, utimes, truncate, xattrs); EROFS for the
  // read-only entries. `keep_contents` false: a view file is made empty
  // instead of copied.
  Result<UpperRef> PrepareChange(std::string_view path, bool keep_contents = true);
  // The upper entry at `path` (ENOENT if it has none).
  Result<UpperRef> LocateUpper(std::string_view path);

  // The slow half of a copy-up, done apart: a view file's bytes, owner,
  // mode and times written to a file of its own. It reads only the View
  // and writes only that fresh file, so it needs none of the Overlay's
  // state and runs while other operations go on (OverlayFs runs it with
  // its table unlocked: a copy of gigabytes must not stop every lookup on
  // the mount). Adopt then gives it its name, a link (or rename); a copy
  // never adopted is removed when it goes.
  //
  // The file is made when the CopyAside is (under the Overlay's caller's
  // lock), nameless (O_TMPFILE) where the upper file system allows: no
  // directory but the one it is adopted into sees it, and that one's times
  // are kept (as overlayfs keeps a copy-up's parent's). A source's link,
  // or a file system without O_TMPFILE, gets a temporary name in the upper
  // root instead, whose times are put back at adoption if nothing else
  // changed them meanwhile.
  class CopyAside {
   public:
    CopyAside(CopyAside&&) noexcept = default;
    CopyAside& operator=(CopyAside&&) noexcept = default;
    ~CopyAside();
    // Writes the copy. Thread-safe with any Overlay call.
    Status Run();
    InodeId lower() const { return lower_; }
    // The written copy as a file of no name, open for reading and writing:
    // the file of handles whose view file lost its every name before it
    // was copied (OverlayFs). The caller closes it.
    Result<int> TakeUnnamed();

   private:
    friend class Overlay;
    CopyAside() = default;
    Status Copy();
    Status RunForLink(const Attr& attr);
    UniqueFd root_;               // the upper root (a dup: independent of the Overlay)
    std::string path_;            // the view file's path, for messages
    UniqueFd file_;               // the copy (a regular file's), nameless or at temp_
    std::string temp_;            // its temporary name in the root, if it has one
    struct stat root_before_ {};  // the root's stat before temp_ was made,
    struct stat root_after_ {};   // and after
    std::shared_ptr<View> view_;
    Env* env_ = nullptr;
    WriteEnv* writer_ = nullptr;
    InodeId lower_ = 0;
    bool keep_contents_ = true;
    bool can_chown_ = false;
    bool written_ = false;
  };
  // A copy-up of `path` to be run apart, if `path` is a view file a change
  // would copy up; nothing if it needs none (an upper entry, a directory,
  // a read-only entry: the change itself then answers).
  Result<std::optional<CopyAside>> PrepareCopyAside(std::string_view path,
                                                    bool keep_contents = true);
  // A copy of the view file `lower` whatever its name (TakeUnnamed).
  Result<CopyAside> CopyAsideOf(InodeId lower);
  // Makes `copy` (Run) the upper file of `path` if `path` still shows the
  // view file it copied; else drops it (renamed, removed or copied up
  // meanwhile: the change then goes on as if it had not been made).
  Status Adopt(std::string_view path, CopyAside copy);
  // Adopt, and the adopted file opened for writing with `flags` (as
  // OpenWrite opens an upper file) from where Adopt put it, without
  // walking to it again; no fd where the copy was dropped.
  Result<UniqueFd> AdoptAndOpen(std::string_view path, CopyAside copy, int flags);

  // Makes the directory `path` (and its parents) exist in the upper
  // directory, as the view shows them; a no-op where it does.
  Status EnsureUpperDir(std::string_view path);

  // Whether `path` is in or at a read-only root entry.
  bool IsReadOnly(std::string_view path) const;

  // The directories of the view copied into the upper directory since the
  // last call (to make room for a change below them), by path: they are
  // merged directories now, whose link count shows otherwise (OverlayFs).
  std::vector<std::string> TakeCopiedUpDirs() { return std::exchange(copied_up_dirs_, {}); }

  const std::string& upper_dir() const { return upper_; }
  // What every change of the upper directory goes through.
  WriteEnv& writer() const { return writer_; }

 private:
  struct Resolved {
    Entry entry;
    UpperRef ref;  // ref.dir valid iff the parent is an upper directory
  };

  Overlay(std::string upper, UniqueFd root, std::shared_ptr<View> lower, Env& env, Options options)
      : upper_(std::move(upper)),
        root_(std::move(root)),
        lower_(std::move(lower)),
        env_(env),
        writer_(options.writer != nullptr ? *options.writer : *env.Writer()),
        options_(std::move(options)),
        can_chown_(::geteuid() == 0) {}

  Result<Resolved> Resolve(std::string_view path);
  // An O_PATH fd of the upper directory `path`, made (as the view shows it)
  // where missing.
  Result<UniqueFd> UpperDir(std::string_view path);
  // Makes `name` in `dir` a copy of the view's directory `a` (mode, owner,
  // times), or nothing.
  Status CopyUpDir(int dir, const std::string& name, const Attr& a);
  Status AddWhiteout(int dir, std::string_view name);
  // Removes the whiteout of `name` in `dir`; true if there was one.
  bool RemoveWhiteout(int dir, std::string_view name);
  // The whiteout of `name` in `dir`, made before the change that takes the
  // name's upper entry away (an upper entry shows over its whiteout): a
  // failed change then leaves the entry as it was, not the view's back in
  // its place. True if it made one, which UndoWhiteout removes.
  Result<bool> WhiteOutAhead(int dir, std::string_view name, std::string_view path);
  void UndoWhiteout(int dir, std::string_view name, bool made);
  // The upper directory the walk `r` of `path` ended in, or (where it ended
  // in the view) made as the view shows it.
  Result<UniqueFd> ParentOf(Resolved& r, std::string_view path);
  // Adopt: where the copy was installed, or a ref with no `dir` where it
  // was dropped.
  Result<UpperRef> AdoptAt(std::string_view path, CopyAside copy);
  // The upper file at `ref` (the entry at `path`) opened for writing.
  Result<UniqueFd> OpenUpper(const UpperRef& ref, std::string_view path, int flags);
  // `path`'s view file copied up as `name` in `dir`.
  Status CopyUp(int dir, std::string_view name, std::string_view path, InodeId lower,
                bool keep_contents);
  // Makes the copy's file (CopyAside) of the view file `lower` at `path`.
  Result<CopyAside> NewCopyAside(InodeId lower, std::string_view path, bool keep_contents);
  // Gives a written copy its name `name` in `dir`, whose times it keeps.
  Status Install(int dir, std::string_view name, CopyAside copy);
  // After `name` was made in `dir` by the daemon: owner and mode as they
  // would be had `caller` made it with `mode` (umask applied by the caller).
  Status FinishCreate(int dir, const std::string& name, mode_t mode, const Caller* caller,
                      bool is_dir, bool is_symlink);
  // FinishCreate and Created for the new entry `ref` at `path` of file type
  // `type` (S_IFDIR, S_IFLNK, S_IFREG...): on a failure it goes again.
  Status FinishNew(const UpperRef& ref, std::string_view path, mode_t mode, const Caller* caller,
                   mode_t type);
  // The parent of a new entry `path`: it must not exist; EROFS, EEXIST,
  // ENAMETOOLONG or ENOENT/ENOTDIR for a missing parent. `known_missing`:
  // the caller looked `path` up and missed it (it is not looked up again).
  Result<UpperRef> PrepareNew(std::string_view path, bool known_missing = false);
  // A new entry was made at `ref`: its whiteout (if any) goes, and a
  // directory made where a deleted one stood becomes opaque first (or the
  // directory goes again: it must not show the old one's contents).
  Status Created(const UpperRef& ref, std::string_view name, bool is_dir);
  // Whether the view has an entry at `path`, shown or not.
  bool ViewHas(std::string_view path);
  // Removes ucfs's own entries (whiteouts, markers) from the empty upper
  // directory `name` in `dir`, then the directory itself: a failure leaves
  // it as it was (its markers made again).
  Status RemoveUpperDir(int dir, const std::string& name, std::string_view path);
  // Removes ucfs's own entries from the upper directory `dir_fd`: their
  // names in *removed; a failure puts them back (RestoreInternal).
  Status ClearInternal(int dir_fd, std::vector<std::string>* removed);
  void RestoreInternal(int dir_fd, const std::vector<std::string>& names);

  std::string upper_;
  UniqueFd root_;
  std::shared_ptr<View> lower_;
  Env& env_;
  WriteEnv& writer_;
  Options options_;
  const bool can_chown_;
  uint64_t copy_ups_ = 0;
  uint64_t walks_ = 0;
  std::vector<std::string> copied_up_dirs_;
};

// Whiteout bookkeeping names as stored in an upper directory, hidden from
// listings.
bool IsOverlayInternalName(std::string_view name);

// The mode a write or truncation by `caller` leaves a file of `mode` and
// group `gid`, as the kernel's setattr_should_drop_suidgid decides it:
// without CAP_FSETID, a regular file loses S_ISUID, and S_ISGID where its
// group may execute it or the caller is not of its group. FUSE leaves a
// direct write's, an O_TRUNC open's and part of the rest to the file
// system (ucfs(1), THE WRITABLE MOUNT).
mode_t ModeAfterWrite(mode_t mode, gid_t gid, const Overlay::Caller& caller);

// The mode (type and permissions) and owner the mount shows for a view entry.
mode_t ViewEntryMode(const Attr& a);
uid_t ViewEntryUid(const Attr& a);
gid_t ViewEntryGid(const Attr& a);

}  // namespace ucfs

#endif  // UCFS_OVERLAY_OVERLAY_H_
