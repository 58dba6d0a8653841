#include "ucfs/overlay.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "ucfs/torch_writer.h"

namespace ucfs {
namespace {

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaque = ".wh..opq";

std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    auto slash = path.find('/');
    std::string_view c = path.substr(0, slash);
    if (!c.empty()) out.push_back(c);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

std::pair<std::string_view, std::string_view> SplitLast(std::string_view path) {
  auto slash = path.rfind('/');
  if (slash == std::string_view::npos) return {"", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

bool Exists(const std::string& path, bool* is_dir) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return false;
  if (is_dir != nullptr) *is_dir = S_ISDIR(st.st_mode);
  return true;
}

Status Errno(const std::string& what) { return Status::FromErrno(what, errno); }

}  // namespace

bool IsOverlayInternalName(std::string_view name) { return name.starts_with(kWhiteoutPrefix); }

Result<std::unique_ptr<Overlay>> Overlay::Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env) {
  if (::mkdir(upper_dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno(upper_dir);
  bool is_dir = false;
  if (!Exists(upper_dir, &is_dir) || !is_dir) {
    return Status::InvalidArgument(upper_dir + ": not a directory");
  }
  return std::unique_ptr<Overlay>(new Overlay(upper_dir, std::move(lower), env));
}

std::string Overlay::UpperPath(std::string_view path) const {
  return path.empty() ? upper_ : JoinPath(upper_, path);
}

Result<Overlay::Entry> Overlay::Lookup(std::string_view path) {
  Entry e;
  e.is_dir = true;
  e.in_upper = true;
  e.lower = kRootInode;
  e.upper_path = upper_;
  std::string prefix;
  for (std::string_view c : Components(path)) {
    if (!e.is_dir) return Status::NotFound(std::string(path) + ": not a directory on the way");
    if (IsOverlayInternalName(c)) return Status::NotFound(std::string(path));
    const std::string dir_upper = e.upper_path;
    const bool opaque = e.in_upper && Exists(JoinPath(dir_upper, kOpaque), nullptr);
    const bool whited =
        e.in_upper &&
        Exists(JoinPath(dir_upper, std::string(kWhiteoutPrefix) + std::string(c)), nullptr);
    InodeId lower_child = 0;
    if (e.lower != 0 && !opaque && !whited) {
      auto found = lower_->Lookup(e.lower, c);
      if (found.ok()) lower_child = *found;
    }
    Entry next;
    next.upper_path = JoinPath(dir_upper, c);
    bool upper_is_dir = false;
    next.in_upper = e.in_upper && Exists(next.upper_path, &upper_is_dir);
    if (next.in_upper) {
      next.is_dir = upper_is_dir;
      // An upper directory merges with a view directory of the same name.
      if (upper_is_dir && lower_child != 0 && lower_->GetAttr(lower_child)->is_dir) {
        next.lower = lower_child;
      }
    } else if (lower_child != 0) {
      next.lower = lower_child;
      next.is_dir = lower_->GetAttr(lower_child)->is_dir;
    } else {
      return Status::NotFound(std::string(path) + ": no such file or directory");
    }
    e = std::move(next);
  }
  return e;
}

Result<std::vector<std::pair<std::string, Overlay::Entry>>> Overlay::ReadDir(
    std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Entry dir, Lookup(path));
  if (!dir.is_dir) return Status::InvalidArgument(std::string(path) + ": not a directory");
  std::map<std::string, Entry> merged;
  const bool opaque = dir.in_upper && Exists(JoinPath(dir.upper_path, kOpaque), nullptr);
  if (dir.lower != 0 && !opaque) {
    UCFS_ASSIGN_OR_RETURN(auto lower, lower_->ReadDir(dir.lower));
    for (const auto& [name, attr] : lower) {
      Entry e;
      e.is_dir = attr.is_dir;
      e.lower = attr.inode;
      e.upper_path = JoinPath(dir.upper_path, name);
      merged[name] = e;
    }
  }
  if (dir.in_upper) {
    auto upper = env_.ListDir(dir.upper_path);
    if (upper.ok()) {
      for (const auto& d : *upper) {
        // ".wh.<name>" hides <name>; ".wh..*" are ucfs's own markers.
        if (d.name.starts_with(kWhiteoutPrefix) && !d.name.starts_with(".wh..")) {
          merged.erase(d.name.substr(kWhiteoutPrefix.size()));
        }
      }
      for (const auto& d : *upper) {
        if (IsOverlayInternalName(d.name)) continue;
        Entry e;
        e.is_dir = d.is_dir;
        e.in_upper = true;
        e.upper_path = JoinPath(dir.upper_path, d.name);
        auto it = merged.find(d.name);
        if (it != merged.end() && d.is_dir && it->second.is_dir) e.lower = it->second.lower;
        merged[d.name] = e;
      }
    }
  }
  return std::vector<std::pair<std::string, Entry>>(merged.begin(), merged.end());
}

Status Overlay::EnsureUpperDir(std::string_view path) {
  std::string at = upper_;
  std::string rel;
  for (std::string_view c : Components(path)) {
    rel = rel.empty() ? std::string(c) : rel + "/" + std::string(c);
    at = JoinPath(at, c);
    bool is_dir = false;
    if (Exists(at, &is_dir)) {
      if (!is_dir) return Status::InvalidArgument(rel + ": not a directory");
      continue;
    }
    UCFS_ASSIGN_OR_RETURN(Entry e, Lookup(rel));
    if (!e.is_dir) return Status::InvalidArgument(rel + ": not a directory");
    if (::mkdir(at.c_str(), 0755) != 0) return Errno(at);
  }
  return Status::OK();
}

Status Overlay::AddWhiteout(std::string_view path) {
  auto [parent, name] = SplitLast(path);
  UCFS_RETURN_IF_ERROR(EnsureUpperDir(parent));
  const std::string wh =
      JoinPath(UpperPath(parent), std::string(kWhiteoutPrefix) + std::string(name));
  int fd = ::open(wh.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(wh);
  ::close(fd);
  return Status::OK();
}

Status Overlay::MakeDir(std::string_view path, mode_t mode) {
  if (Lookup(path).ok()) return Status::InvalidArgument(std::string(path) + ": exists");
  auto [parent, name] = SplitLast(path);
  UCFS_ASSIGN_OR_RETURN(Entry p, Lookup(parent));
  if (!p.is_dir) return Status::InvalidArgument(std::string(parent) + ": not a directory");
  UCFS_RETURN_IF_ERROR(EnsureUpperDir(parent));
  const std::string at = UpperPath(path);
  if (::mkdir(at.c_str(), mode) != 0) return Errno(at);
  // Where a deleted view directory stood, its contents must stay hidden.
  const std::string wh =
      JoinPath(UpperPath(parent), std::string(kWhiteoutPrefix) + std::string(name));
  if (Exists(wh, nullptr)) {
    ::unlink(wh.c_str());
    int fd = ::open(JoinPath(at, kOpaque).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
  return Status::OK();
}

Status Overlay::CopyUp(std::string_view path, const Entry& entry) {
  auto [parent, name] = SplitLast(path);
  UCFS_RETURN_IF_ERROR(EnsureUpperDir(parent));
  UCFS_ASSIGN_OR_RETURN(Attr attr, lower_->GetAttr(entry.lower));
  std::vector<ReadPiece> pieces;
  UCFS_RETURN_IF_ERROR(lower_->Plan(entry.lower, 0, attr.size, &pieces));
  PieceReader reader(env_, [this](uint32_t i) { return lower_->source(i); });
  std::string bytes;
  UCFS_RETURN_IF_ERROR(reader.Read(pieces, &bytes));
  // Written aside and renamed, so a crash leaves either nothing or all.
  // ".wh..wh." names are ucfs's own, never whiteouts of a user's file.
  const std::string tmp = JoinPath(UpperPath(parent), ".wh..wh.copyup." + std::string(name));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      Status s = Errno(tmp);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), UpperPath(path).c_str()) != 0) return Errno(tmp);
  return Status::OK();
}

Result<int> Overlay::OpenWrite(std::string_view path, int flags, mode_t mode) {
  auto found = Lookup(path);
  const std::string at = UpperPath(path);
  if (found.ok()) {
    if (found->is_dir) return Status::InvalidArgument(std::string(path) + ": is a directory");
    if (!found->in_upper && !(flags & O_TRUNC)) UCFS_RETURN_IF_ERROR(CopyUp(path, *found));
    if (!found->in_upper && (flags & O_TRUNC)) {
      UCFS_RETURN_IF_ERROR(EnsureUpperDir(SplitLast(path).first));
      flags |= O_CREAT;
    }
  } else {
    if (!(flags & O_CREAT)) return found.status();
    UCFS_RETURN_IF_ERROR(EnsureUpperDir(SplitLast(path).first));
  }
  int fd = ::open(at.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return Errno(at);
  // A file made where a deleted view file stood replaces its whiteout.
  auto [parent, name] = SplitLast(path);
  ::unlink(JoinPath(UpperPath(parent), std::string(kWhiteoutPrefix) + std::string(name)).c_str());
  return fd;
}

Status Overlay::Unlink(std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Entry e, Lookup(path));
  if (e.is_dir) return Status::InvalidArgument(std::string(path) + ": is a directory");
  const bool in_lower = e.lower != 0 || (e.in_upper && [&] {
                          // An upper file may still shadow a view file of the same name.
                          auto [parent, name] = SplitLast(path);
                          auto p = Lookup(parent);
                          return p.ok() && p->lower != 0 && lower_->Lookup(p->lower, name).ok();
                        }());
  if (e.in_upper && ::unlink(e.upper_path.c_str()) != 0) return Errno(e.upper_path);
  if (in_lower) UCFS_RETURN_IF_ERROR(AddWhiteout(path));
  return Status::OK();
}

Status Overlay::RemoveDir(std::string_view path) {
  if (path.empty()) return Status::InvalidArgument("cannot remove the root");
  UCFS_ASSIGN_OR_RETURN(Entry e, Lookup(path));
  if (!e.is_dir) return Status::InvalidArgument(std::string(path) + ": not a directory");
  UCFS_ASSIGN_OR_RETURN(auto entries, ReadDir(path));
  if (!entries.empty()) return Status::InvalidArgument(std::string(path) + ": not empty");
  if (e.in_upper) {
    // Only whiteouts can be left in it.
    auto names = env_.ListDir(e.upper_path);
    if (names.ok()) {
      for (const auto& d : *names) ::unlink(JoinPath(e.upper_path, d.name).c_str());
    }
    if (::rmdir(e.upper_path.c_str()) != 0) return Errno(e.upper_path);
  }
  auto [parent, name] = SplitLast(path);
  auto p = Lookup(parent);
  if (p.ok() && p->lower != 0 && lower_->Lookup(p->lower, name).ok()) {
    UCFS_RETURN_IF_ERROR(AddWhiteout(path));
  }
  return Status::OK();
}

Status Overlay::Rename(std::string_view from, std::string_view to) {
  UCFS_ASSIGN_OR_RETURN(Entry src, Lookup(from));
  if (src.is_dir) return Status::NotSupported("renaming directories across the overlay (EXDEV)");
  if (!src.in_upper) UCFS_RETURN_IF_ERROR(CopyUp(from, src));
  auto dst = Lookup(to);
  if (dst.ok() && dst->is_dir) return Status::InvalidArgument(std::string(to) + ": is a directory");
  UCFS_RETURN_IF_ERROR(EnsureUpperDir(SplitLast(to).first));
  const std::string target = UpperPath(to);
  if (::rename(UpperPath(from).c_str(), target.c_str()) != 0) return Errno(target);
  auto [to_parent, to_name] = SplitLast(to);
  ::unlink(
      JoinPath(UpperPath(to_parent), std::string(kWhiteoutPrefix) + std::string(to_name)).c_str());
  // The view's file of the old name must not show through again.
  auto [from_parent, from_name] = SplitLast(from);
  auto p = Lookup(from_parent);
  if (p.ok() && p->lower != 0 && lower_->Lookup(p->lower, from_name).ok()) {
    UCFS_RETURN_IF_ERROR(AddWhiteout(from));
  }
  return Status::OK();
}

}  // namespace ucfs
