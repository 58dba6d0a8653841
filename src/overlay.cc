#include "ucfs/overlay.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "ucfs/torch_pickle_builder.h"

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

Status Fail(int err, std::string_view path, std::string_view what) {
  return Status::Posix(err, std::string(path) + ": " + std::string(what));
}

// ".wh..wh." names are ucfs's own temporaries, never whiteouts of a user's file.
constexpr std::string_view kCopyUpPrefix = ".wh..wh.copyup.";

// Copy-up temporaries a crash left behind, anywhere in the upper tree.
void RemoveStaleCopyUps(Env& env, const std::string& dir, int depth) {
  if (depth > 64) return;
  auto entries = env.ListDir(dir);
  if (!entries.ok()) return;
  for (const auto& d : *entries) {
    const std::string path = JoinPath(dir, d.name);
    if (d.is_dir) {
      RemoveStaleCopyUps(env, path, depth + 1);
    } else if (d.name.starts_with(kCopyUpPrefix)) {
      ::unlink(path.c_str());
    }
  }
}

}  // namespace

bool IsOverlayInternalName(std::string_view name) { return name.starts_with(kWhiteoutPrefix); }

Result<std::unique_ptr<Overlay>> Overlay::Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env) {
  if (::mkdir(upper_dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno(upper_dir);
  bool is_dir = false;
  if (!Exists(upper_dir, &is_dir) || !is_dir) return Fail(ENOTDIR, upper_dir, "not a directory");
  RemoveStaleCopyUps(env, upper_dir, 0);
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
    if (!e.is_dir) return Fail(ENOTDIR, path, "not a directory on the way");
    if (IsOverlayInternalName(c)) return Fail(ENOENT, path, "no such file or directory");
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
      return Fail(ENOENT, path, "no such file or directory");
    }
    e = std::move(next);
  }
  return e;
}

Result<std::vector<std::pair<std::string, Overlay::Entry>>> Overlay::ReadDir(
    std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Entry dir, Lookup(path));
  if (!dir.is_dir) return Fail(ENOTDIR, path, "not a directory");
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
      if (!is_dir) return Fail(ENOTDIR, rel, "not a directory");
      continue;
    }
    UCFS_ASSIGN_OR_RETURN(Entry e, Lookup(rel));
    if (!e.is_dir) return Fail(ENOTDIR, rel, "not a directory");
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

bool Overlay::ViewHas(std::string_view path) {
  auto [parent, name] = SplitLast(path);
  auto p = Lookup(parent);
  return p.ok() && p->lower != 0 && lower_->Lookup(p->lower, name).ok();
}

static Status CheckNewName(std::string_view path) {
  if (IsOverlayInternalName(SplitLast(path).second)) {
    return Fail(EINVAL, path, "names starting with \".wh.\" are reserved for ucfs's whiteouts");
  }
  return Status::OK();
}

Status Overlay::MakeDir(std::string_view path, mode_t mode) {
  UCFS_RETURN_IF_ERROR(CheckNewName(path));
  if (Lookup(path).ok()) return Fail(EEXIST, path, "exists");
  auto [parent, name] = SplitLast(path);
  UCFS_ASSIGN_OR_RETURN(Entry p, Lookup(parent));
  if (!p.is_dir) return Fail(ENOTDIR, parent, "not a directory");
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
  // Written aside and renamed, so a crash leaves either nothing or all; in
  // bounded chunks, as rank files may be GBs.
  const std::string tmp =
      JoinPath(UpperPath(parent), std::string(kCopyUpPrefix) + std::string(name));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(tmp);
  SourceFiles reader(env_, [this](uint32_t i) { return lower_->source(i); });
  constexpr uint64_t kChunk = uint64_t{8} << 20;
  Status status;
  std::vector<ReadPiece> pieces;
  std::string bytes;
  for (uint64_t at = 0; at < attr.size && status.ok(); at += kChunk) {
    pieces.clear();
    bytes.clear();
    status = lower_->Plan(entry.lower, at, kChunk, &pieces);
    if (status.ok()) status = reader.Read(pieces, &bytes);
    for (size_t done = 0; status.ok() && done < bytes.size();) {
      ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (w < 0 && errno != EINTR) status = Errno(tmp);
      if (w > 0) done += static_cast<size_t>(w);
    }
  }
  if (status.ok() && ::fsync(fd) != 0) status = Errno(tmp);
  ::close(fd);
  if (status.ok() && ::rename(tmp.c_str(), UpperPath(path).c_str()) != 0) status = Errno(tmp);
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

Result<int> Overlay::OpenWrite(std::string_view path, int flags, mode_t mode) {
  auto found = Lookup(path);
  const std::string at = UpperPath(path);
  if (found.ok()) {
    if ((flags & O_CREAT) && (flags & O_EXCL)) return Fail(EEXIST, path, "exists");
    if (found->is_dir) return Fail(EISDIR, path, "is a directory");
    if (!found->in_upper && !(flags & O_TRUNC)) UCFS_RETURN_IF_ERROR(CopyUp(path, *found));
    if (!found->in_upper && (flags & O_TRUNC)) {
      // Made anew in the upper directory, with the mode the view shows.
      UCFS_RETURN_IF_ERROR(EnsureUpperDir(SplitLast(path).first));
      UCFS_ASSIGN_OR_RETURN(Attr attr, lower_->GetAttr(found->lower));
      flags |= O_CREAT;
      mode = attr.mode | 0200;
    }
  } else {
    if (!(flags & O_CREAT)) return found.status();
    UCFS_RETURN_IF_ERROR(CheckNewName(path));
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
  if (e.is_dir) return Fail(EISDIR, path, "is a directory");
  // An upper file may still shadow a view file of the same name.
  const bool in_lower = e.lower != 0 || ViewHas(path);
  if (e.in_upper && ::unlink(e.upper_path.c_str()) != 0) return Errno(e.upper_path);
  if (in_lower) UCFS_RETURN_IF_ERROR(AddWhiteout(path));
  return Status::OK();
}

Status Overlay::RemoveDir(std::string_view path) {
  if (path.empty()) return Fail(EBUSY, "/", "cannot remove the root");
  UCFS_ASSIGN_OR_RETURN(Entry e, Lookup(path));
  if (!e.is_dir) return Fail(ENOTDIR, path, "not a directory");
  UCFS_ASSIGN_OR_RETURN(auto entries, ReadDir(path));
  if (!entries.empty()) return Fail(ENOTEMPTY, path, "not empty");
  if (e.in_upper) {
    // Only whiteouts can be left in it.
    auto names = env_.ListDir(e.upper_path);
    if (names.ok()) {
      for (const auto& d : *names) ::unlink(JoinPath(e.upper_path, d.name).c_str());
    }
    if (::rmdir(e.upper_path.c_str()) != 0) return Errno(e.upper_path);
  }
  if (ViewHas(path)) UCFS_RETURN_IF_ERROR(AddWhiteout(path));
  return Status::OK();
}

Status Overlay::Rename(std::string_view from, std::string_view to, bool no_replace) {
  if (from.empty() || to.empty()) return Fail(EBUSY, "/", "cannot rename the root");
  UCFS_RETURN_IF_ERROR(CheckNewName(to));
  UCFS_ASSIGN_OR_RETURN(Entry src, Lookup(from));
  if (from == to) return Status::OK();
  auto dst = Lookup(to);
  if (dst.ok() && no_replace) return Fail(EEXIST, to, "exists");
  if (src.is_dir) {
    // A directory with view entries in it would need every one copied up
    // (or a redirect, as overlayfs has); mv(1) does the copy on EXDEV.
    if (!src.in_upper || src.lower != 0) {
      return Fail(EXDEV, from, "a directory of the view cannot be renamed; copy it instead");
    }
    if (std::string(to).starts_with(std::string(from) + "/")) {
      return Fail(EINVAL, to, "cannot move a directory into itself");
    }
    if (dst.ok()) {
      if (!dst->is_dir) return Fail(ENOTDIR, to, "not a directory");
      if (!dst->in_upper || dst->lower != 0) return Fail(EXDEV, to, "a directory of the view");
      UCFS_ASSIGN_OR_RETURN(auto entries, ReadDir(to));
      if (!entries.empty()) return Fail(ENOTEMPTY, to, "not empty");
    }
  } else {
    if (dst.ok() && dst->is_dir) return Fail(EISDIR, to, "is a directory");
    if (!src.in_upper) UCFS_RETURN_IF_ERROR(CopyUp(from, src));
  }
  UCFS_RETURN_IF_ERROR(EnsureUpperDir(SplitLast(to).first));
  const std::string target = UpperPath(to);
  if (src.is_dir && dst.ok()) {
    // Only whiteouts can be in it; rename(2) wants it empty.
    auto names = env_.ListDir(target);
    if (names.ok()) {
      for (const auto& d : *names) ::unlink(JoinPath(target, d.name).c_str());
    }
  }
  const bool view_at_target = ViewHas(to);
  if (::rename(UpperPath(from).c_str(), target.c_str()) != 0) return Errno(target);
  auto [to_parent, to_name] = SplitLast(to);
  ::unlink(
      JoinPath(UpperPath(to_parent), std::string(kWhiteoutPrefix) + std::string(to_name)).c_str());
  // A directory moved onto a view directory's name must not merge with it.
  if (src.is_dir && view_at_target) {
    int fd = ::open(JoinPath(target, kOpaque).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
  // The view's entry of the old name must not show through again.
  if (ViewHas(from)) UCFS_RETURN_IF_ERROR(AddWhiteout(from));
  return Status::OK();
}

}  // namespace ucfs
