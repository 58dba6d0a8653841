// What takes a name away: unlink, rmdir and rename, with the whiteouts and
// opaque markers that keep the view's entry of that name hidden.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "overlay/upper_dir.h"
#include "ucfs/overlay/overlay.h"

namespace ucfs {

Status Overlay::AddWhiteout(int dir, std::string_view name) {
  return MakeMarker(writer_, dir, WhiteoutName(name));
}

bool Overlay::RemoveWhiteout(int dir, std::string_view name) {
  return writer_.UnlinkAt(dir, WhiteoutName(name), 0).ok();
}

Result<bool> Overlay::WhiteOutAhead(int dir, std::string_view name, std::string_view path) {
  if (StatAt(dir, WhiteoutName(name))) return false;
  UCFS_RETURN_IF_ERROR(AddWhiteout(dir, name).WithFile(path));
  return true;
}

void Overlay::UndoWhiteout(int dir, std::string_view name, bool made) {
  if (made) RemoveWhiteout(dir, name);
}

Status Overlay::ClearInternal(int dir_fd, std::vector<std::string>* removed) {
  UCFS_ASSIGN_OR_RETURN(auto names, ListUpper(dir_fd, "upper"));
  for (const auto& d : names) {
    if (!IsOverlayInternalName(d.stored)) continue;
    if (Status s = writer_.UnlinkAt(dir_fd, d.stored, 0); !s.ok()) {
      RestoreInternal(dir_fd, *removed);
      return s;
    }
    removed->push_back(d.stored);
  }
  return Status::OK();
}

void Overlay::RestoreInternal(int dir_fd, const std::vector<std::string>& names) {
  // Whiteouts and markers are empty files: made again, they are as they were.
  for (const std::string& name : names) MakeMarker(writer_, dir_fd, name);
}

Status Overlay::RemoveUpperDir(int dir, const std::string& name, std::string_view path) {
  // Only ucfs's own entries can be left in it.
  UCFS_ASSIGN_OR_RETURN(UniqueFd self, OpenDirAt(dir, name, path));
  std::vector<std::string> removed;
  UCFS_RETURN_IF_ERROR(ClearInternal(self.get(), &removed).WithFile(path));
  if (Status s = writer_.UnlinkAt(dir, name, AT_REMOVEDIR); !s.ok()) {
    RestoreInternal(self.get(), removed);
    return s.WithFile(path);
  }
  return Status::OK();
}

// The upper entry goes, and the view's entry of that name (if any) must not
// show through: its whiteout is made first (WhiteOutAhead).
Status Overlay::Unlink(std::string_view path) {
  if (IsReadOnly(path)) return Fail(EROFS, path, "read-only");
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (r.entry.is_dir) return Fail(EISDIR, path, "is a directory");
  UCFS_ASSIGN_OR_RETURN(UniqueFd dir, ParentOf(r, path));
  const std::string_view name = SplitLast(path).second;
  bool whited = false;
  if (r.entry.covers_view) {
    UCFS_ASSIGN_OR_RETURN(whited, WhiteOutAhead(dir.get(), name, path));
  }
  if (r.entry.in_upper) {
    if (Status s = writer_.UnlinkAt(dir.get(), r.ref.name, 0); !s.ok()) {
      UndoWhiteout(dir.get(), name, whited);
      return s.WithFile(path);
    }
  }
  return Status::OK();
}

Status Overlay::RemoveDir(std::string_view path) {
  if (path.empty()) return Fail(EBUSY, "/", "cannot remove the root");
  if (IsReadOnly(path)) return Fail(EROFS, path, "read-only");
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (!r.entry.is_dir) return Fail(ENOTDIR, path, "not a directory");
  UCFS_ASSIGN_OR_RETURN(auto entries, ReadDir(path));
  if (!entries.empty()) return Fail(ENOTEMPTY, path, "not empty");
  UCFS_ASSIGN_OR_RETURN(UniqueFd dir, ParentOf(r, path));
  const std::string_view name = SplitLast(path).second;
  bool whited = false;
  if (r.entry.covers_view) {
    UCFS_ASSIGN_OR_RETURN(whited, WhiteOutAhead(dir.get(), name, path));
  }
  if (r.entry.in_upper) {
    if (Status s = RemoveUpperDir(dir.get(), r.ref.name, path); !s.ok()) {
      UndoWhiteout(dir.get(), name, whited);
      return s;
    }
  }
  return Status::OK();
}

Status Overlay::Rename(std::string_view from, std::string_view to, unsigned flags) {
  if (from.empty() || to.empty()) return Fail(EBUSY, "/", "cannot rename the root");
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
    return Fail(EINVAL, to, "unsupported rename flags");
  }
  const bool exchange = (flags & RENAME_EXCHANGE) != 0;
  if (exchange && (flags & RENAME_NOREPLACE)) return Fail(EINVAL, to, "exclusive flags");
  if (IsReadOnly(from)) return Fail(EROFS, from, "read-only");
  if (IsReadOnly(to)) return Fail(EROFS, to, "read-only");
  auto [to_parent, to_name] = SplitLast(to);
  auto [from_parent, from_name] = SplitLast(from);
  UCFS_RETURN_IF_ERROR(CheckName(to, to_name));
  UCFS_ASSIGN_OR_RETURN(Entry src, Lookup(from));
  auto dst = Lookup(to);
  if (!dst.ok() && dst.status().posix_errno() != ENOENT) return dst.status();
  if (from == to) return Status::OK();
  if (dst.ok() && (flags & RENAME_NOREPLACE)) return Fail(EEXIST, to, "exists");
  if (exchange && !dst.ok()) return dst.status();
  // A directory with view entries in it would need every one copied up
  // (or a redirect, as overlayfs has); mv(1) does the copy on EXDEV.
  auto movable = [](const Entry& e) { return !e.is_dir || e.lower == 0; };
  if (!movable(src)) {
    return Fail(EXDEV, from, "a directory of the view cannot be renamed; copy it instead");
  }
  if (src.is_dir && std::string(to).starts_with(std::string(from) + "/")) {
    return Fail(EINVAL, to, "cannot move a directory into itself");
  }
  if (exchange) {
    if (!movable(*dst)) return Fail(EXDEV, to, "a directory of the view cannot be renamed");
    if (dst->is_dir && std::string(from).starts_with(std::string(to) + "/")) {
      return Fail(EINVAL, from, "cannot move a directory into itself");
    }
  } else if (dst.ok()) {
    if (src.is_dir && !dst->is_dir) return Fail(ENOTDIR, to, "not a directory");
    if (!src.is_dir && dst->is_dir) return Fail(EISDIR, to, "is a directory");
    if (dst->is_dir) {
      UCFS_ASSIGN_OR_RETURN(auto entries, ReadDir(to));
      if (!entries.empty()) return Fail(ENOTEMPTY, to, "not empty");
    }
  }
  UCFS_ASSIGN_OR_RETURN(UpperRef source, PrepareChange(from));
  UpperRef target;
  // An empty directory replaced: only ucfs's entries can be in its upper
  // part (and a view directory of that name is hidden by the opaque
  // mark); they go first, and come back if the rename fails.
  UniqueFd replaced_dir;
  std::vector<std::string> cleared;
  if (exchange) {
    UCFS_ASSIGN_OR_RETURN(target, PrepareChange(to));
  } else {
    UCFS_ASSIGN_OR_RETURN(target.dir, UpperDir(to_parent));
    target.name = StoredName(to_name);
    if (dst.ok() && dst->is_dir && dst->in_upper) {
      UCFS_ASSIGN_OR_RETURN(replaced_dir, OpenDirAt(target.dir.get(), target.name, to));
      UCFS_RETURN_IF_ERROR(ClearInternal(replaced_dir.get(), &cleared).WithFile(to));
    }
  }
  const bool view_at_target = dst.ok() ? dst->covers_view : ViewHas(to);
  // What the rename must leave marked is marked before it, so that a
  // failure of either leaves both names as they were: a directory moved
  // onto (or, exchanged, back to) a name the view has must not merge with
  // it, and may be marked opaque where it is (it holds no view entries,
  // or it could not move); the view's entry of the old name must not show
  // through again (an upper entry shows over its whiteout).
  if (src.is_dir && view_at_target) {
    UCFS_RETURN_IF_ERROR(MarkOpaque(writer_, source.dir.get(), source.name).WithFile(from));
  }
  if (exchange && dst->is_dir && src.covers_view) {
    UCFS_RETURN_IF_ERROR(MarkOpaque(writer_, target.dir.get(), target.name).WithFile(to));
  }
  bool whited = false;
  if (!exchange && src.covers_view) {
    UCFS_ASSIGN_OR_RETURN(whited, WhiteOutAhead(source.dir.get(), from_name, from));
  }
  if (Status s = writer_.RenameAt(source.dir.get(), source.name, target.dir.get(), target.name,
                                  exchange ? RENAME_EXCHANGE : 0);
      !s.ok()) {
    UndoWhiteout(source.dir.get(), from_name, whited);
    if (replaced_dir) RestoreInternal(replaced_dir.get(), cleared);
    return s.WithFile(to);
  }
  RemoveWhiteout(target.dir.get(), to_name);
  return Status::OK();
}

}  // namespace ucfs
