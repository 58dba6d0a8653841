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
  const std::string wh = WhiteoutName(name);
  const UniqueFd fd(::openat(dir, wh.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return Status::LastErrno(wh);
  return Status::OK();
}

bool Overlay::RemoveWhiteout(int dir, std::string_view name) {
  return ::unlinkat(dir, WhiteoutName(name).c_str(), 0) == 0;
}

void Overlay::ClearInternal(int dir_fd) {
  auto names = ListUpper(dir_fd, "upper");
  if (!names.ok()) return;
  for (const auto& d : *names) {
    if (IsOverlayInternalName(d.stored)) ::unlinkat(dir_fd, d.stored.c_str(), 0);
  }
}

Status Overlay::Unlink(std::string_view path) {
  if (IsReadOnly(path)) return Fail(EROFS, path, "read-only");
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (r.entry.is_dir) return Fail(EISDIR, path, "is a directory");
  auto [parent, name] = SplitLast(path);
  if (r.entry.in_upper) {
    if (::unlinkat(r.ref.dir.get(), r.ref.name.c_str(), 0) != 0) return Status::LastErrno(path);
  }
  // The view's entry of that name must not show through.
  if (r.entry.covers_view) {
    UCFS_ASSIGN_OR_RETURN(UniqueFd dir, UpperDir(parent));
    UCFS_RETURN_IF_ERROR(AddWhiteout(dir.get(), name));
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
  auto [parent, name] = SplitLast(path);
  if (r.entry.in_upper) {
    // Only ucfs's own entries can be left in it.
    UCFS_ASSIGN_OR_RETURN(UniqueFd self, OpenDirAt(r.ref.dir.get(), r.ref.name, path));
    ClearInternal(self.get());
    if (::unlinkat(r.ref.dir.get(), r.ref.name.c_str(), AT_REMOVEDIR) != 0)
      return Status::LastErrno(path);
  }
  if (r.entry.covers_view) {
    UCFS_ASSIGN_OR_RETURN(UniqueFd dir, UpperDir(parent));
    UCFS_RETURN_IF_ERROR(AddWhiteout(dir.get(), name));
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
  if (exchange) {
    UCFS_ASSIGN_OR_RETURN(target, PrepareChange(to));
  } else {
    UCFS_ASSIGN_OR_RETURN(target.dir, UpperDir(to_parent));
    target.name = StoredName(to_name);
    if (dst.ok() && dst->is_dir) {
      // An empty directory: only ucfs's entries can be in its upper part,
      // and a view directory of that name is hidden by the opaque mark.
      if (dst->in_upper) {
        UCFS_ASSIGN_OR_RETURN(UniqueFd self, OpenDirAt(target.dir.get(), target.name, to));
        ClearInternal(self.get());
      }
    }
  }
  const bool view_at_target = dst.ok() ? dst->covers_view : ViewHas(to);
  if (::renameat2(source.dir.get(), source.name.c_str(), target.dir.get(), target.name.c_str(),
                  exchange ? RENAME_EXCHANGE : 0) != 0) {
    return Status::LastErrno(to);
  }
  // A directory moved onto a name the view has must not merge with it.
  if (src.is_dir && view_at_target) MarkOpaque(target.dir.get(), target.name);
  RemoveWhiteout(target.dir.get(), to_name);
  if (exchange) {
    if (dst->is_dir && src.covers_view) MarkOpaque(source.dir.get(), source.name);
  } else if (src.covers_view) {
    // The view's entry of the old name must not show through again.
    UCFS_RETURN_IF_ERROR(AddWhiteout(source.dir.get(), from_name));
  }
  return Status::OK();
}

}  // namespace ucfs
