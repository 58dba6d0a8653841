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
// Paths are relative to the mount root, '/'-separated, no leading slash;
// "" is the root. Errors carry the errno a file system would answer with
// (Status::posix_errno). Not thread-safe: OverlayFs serialises calls.
#ifndef UCFS_OVERLAY_H_
#define UCFS_OVERLAY_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/status.h"
#include "ucfs/view.h"

namespace ucfs {

class Overlay {
 public:
  struct Entry {
    bool is_dir = false;
    bool in_upper = false;   // an upper file, or an upper directory
    InodeId lower = 0;       // the view's entry, 0 if none shows through
    std::string upper_path;  // where it is (or would be) in the upper directory
  };

  // Creates `upper_dir` if needed, and removes the temporary files of
  // copy-ups a crash interrupted.
  static Result<std::unique_ptr<Overlay>> Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env);

  Result<Entry> Lookup(std::string_view path);
  // The merged listing, sorted by name, whiteouts applied and hidden.
  Result<std::vector<std::pair<std::string, Entry>>> ReadDir(std::string_view path);

  Status MakeDir(std::string_view path, mode_t mode);
  // An fd open for writing (O_WRONLY or O_RDWR in `flags`). A view file is
  // copied up first unless O_TRUNC makes its contents irrelevant; a new
  // file needs O_CREAT. Missing upper parents are created.
  Result<int> OpenWrite(std::string_view path, int flags, mode_t mode);
  Status Unlink(std::string_view path);
  Status RemoveDir(std::string_view path);
  // Files: both ends may be view or upper entries (a view file is copied
  // up first). Directories: only ones that exist in the upper directory
  // alone, onto nothing or an empty such directory; others fail with EXDEV,
  // which mv(1) answers by copying. `no_replace`: RENAME_NOREPLACE.
  Status Rename(std::string_view from, std::string_view to, bool no_replace = false);

  // Makes the directory `path` (and its parents) exist in the upper
  // directory, as the view shows them; a no-op where it does.
  Status EnsureUpperDir(std::string_view path);

  const std::string& upper_dir() const { return upper_; }

 private:
  Overlay(std::string upper, std::shared_ptr<View> lower, Env& env)
      : upper_(std::move(upper)), lower_(std::move(lower)), env_(env) {}
  std::string UpperPath(std::string_view path) const;
  Status AddWhiteout(std::string_view path);
  // Whether the view has an entry at `path` (whiteouts aside), which a
  // removal or rename away must then hide.
  bool ViewHas(std::string_view path);
  Status CopyUp(std::string_view path, const Entry& entry);

  std::string upper_;
  std::shared_ptr<View> lower_;
  Env& env_;
};

// Whiteout bookkeeping names, hidden from listings.
bool IsOverlayInternalName(std::string_view name);

}  // namespace ucfs

#endif  // UCFS_OVERLAY_H_
