// OverlayFs's inode table: a number per path that stays put while the
// kernel holds it (lookup counts, forget), follows its file through renames
// and hard links, and is never reused (overlay_fs.h).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "ucfs/overlay/overlay_fs.h"
#include "ucfs/vfs/read_only_fs.h"

namespace ucfs {

std::vector<std::pair<InodeId, std::string>> OverlayFs::NamesOf(InodeId inode) {
  MutexLock lock(mu_);
  std::vector<std::pair<InodeId, std::string>> out;
  auto it = nodes_.find(inode);
  if (it == nodes_.end()) return out;
  for (const std::string& path : it->second.paths) {
    const auto [parent, name] = SplitLast(path);
    auto p = by_path_.find(std::string(parent));
    if (p != by_path_.end()) out.emplace_back(p->second, std::string(name));
  }
  return out;
}

size_t OverlayFs::inode_count() {
  MutexLock lock(mu_);
  return nodes_.size();
}

Result<std::string> OverlayFs::PathOf(InodeId inode) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || it->second.paths.empty()) {
    return Status::Posix(ESTALE, "inode " + std::to_string(inode) + " was removed");
  }
  return it->second.paths.front();
}

Result<std::string> OverlayFs::ChildPath(InodeId parent, std::string_view name) {
  if (name.size() > kMaxNameLength) {
    return Status::Posix(ENAMETOOLONG, std::string(name.substr(0, 32)) + "...: name too long");
  }
  if (!IsSafePathComponent(name)) return Status::Posix(EINVAL, std::string(name) + ": bad name");
  UCFS_ASSIGN_OR_RETURN(std::string dir, PathOf(parent));
  return JoinPath(dir, name);
}

InodeId OverlayFs::InodeFor(const std::string& path, uint64_t count, const struct stat* upper) {
  auto known = by_path_.find(path);
  InodeId inode = 0;
  if (known != by_path_.end()) {
    inode = known->second;
  } else {
    const bool linked = upper != nullptr && !S_ISDIR(upper->st_mode) && upper->st_nlink > 1;
    if (linked) {
      auto it = by_file_.find({upper->st_dev, upper->st_ino});
      if (it != by_file_.end()) {
        // The same file by another name, if that name still is it.
        Node& node = nodes_[it->second];
        auto other = node.paths.empty() ? Result<Overlay::Entry>(Status::Posix(ENOENT, ""))
                                        : overlay_->Lookup(node.paths.front());
        if (other.ok() && other->in_upper && other->st.st_dev == upper->st_dev &&
            other->st.st_ino == upper->st_ino) {
          inode = it->second;
          node.paths.push_back(path);
        }
      }
    }
    if (inode == 0) {
      inode = next_inode_++;
      Node& node = nodes_[inode];
      node.paths = {path};
      if (linked) {
        node.has_file_key = true;
        node.file_key = {upper->st_dev, upper->st_ino};
        by_file_[node.file_key] = inode;
      }
    }
    by_path_[path] = inode;
  }
  nodes_[inode].lookups += count;
  return inode;
}

struct stat OverlayFs::StatOf(const std::string& path, const Overlay::Entry& e, InodeId inode) {
  struct stat st {};
  if (e.in_upper) {
    st = e.st;
  } else {
    Attr a{};
    if (auto got = view_->GetAttr(e.lower); got.ok()) a = *got;
    st = StatOfAttr(a);  // as the read-only mount shows it
  }
  // Read-only entries show so, and the kernel refuses writers (EACCES)
  // before asking.
  if (overlay_->IsReadOnly(path)) st.st_mode &= ~static_cast<mode_t>(0222);
  // A merged directory's subdirectories are its upper directory's and the
  // view's: its link count is not counted but shown as 1, "unknown" (as
  // overlayfs shows one), which find(1) and the like take to mean so. The
  // upper directory's own count would leave the view's out.
  if (e.in_upper && e.is_dir && e.lower != 0) st.st_nlink = 1;
  st.st_ino = inode;
  return st;
}

Result<struct stat> OverlayFs::StatPath(const std::string& path, InodeId inode) {
  UCFS_ASSIGN_OR_RETURN(Overlay::Entry e, overlay_->Lookup(path));
  return StatOf(path, e, inode);
}

int OverlayFs::OpenFdOf(InodeId inode, std::shared_ptr<ViewFile>* held) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end()) return -1;
  if (!it->second.fds.empty()) return it->second.fds.front().get();
  *held = it->second.view_file.lock();
  return *held ? (*held)->copy_fd.load() : -1;
}

std::optional<std::pair<InodeId, struct stat>> OverlayFs::LastAttrs(const std::string& path) {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return std::nullopt;
  auto e = overlay_->Lookup(path);
  if (!e.ok()) return std::nullopt;
  struct stat st = StatOf(path, *e, it->second);
  // A regular file answers through its open files only (it is gone once
  // closed); a directory or special file is opened without us.
  if (S_ISREG(st.st_mode)) return std::nullopt;
  // The link the removal takes away: an upper entry's own (a directory's
  // every one); a view entry's lower part, and so its count, stays (as
  // overlayfs's lower layer keeps the file).
  if (e->in_upper && !(e->is_dir && e->lower != 0)) {
    st.st_nlink = e->is_dir || st.st_nlink == 0 ? 0 : st.st_nlink - 1;
  }
  return std::make_pair(it->second, st);
}

void OverlayFs::Orphan(const std::optional<std::pair<InodeId, struct stat>>& last) {
  if (!last) return;
  auto it = nodes_.find(last->first);
  if (it == nodes_.end() || !it->second.paths.empty()) return;
  it->second.orphan = last->second;
}

void OverlayFs::DropPath(const std::string& path) {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return;
  auto node = nodes_.find(it->second);
  if (node != nodes_.end()) {
    auto& paths = node->second.paths;
    paths.erase(std::remove(paths.begin(), paths.end(), path), paths.end());
  }
  by_path_.erase(it);
}

void OverlayFs::Detach(const std::string& path) { DropPath(path); }

void OverlayFs::Move(const std::string& from, const std::string& to) {
  // Whatever was at `to` (and below it) is gone.
  std::vector<std::string> gone;
  for (const auto& [path, inode] : by_path_) {
    if (IsAtOrBelow(path, to)) gone.push_back(path);
  }
  for (const auto& path : gone) DropPath(path);
  std::vector<std::pair<std::string, InodeId>> moved;
  for (const auto& [path, inode] : by_path_) {
    if (IsAtOrBelow(path, from)) moved.emplace_back(path, inode);
  }
  for (const auto& [path, inode] : moved) DropPath(path);
  for (const auto& [path, inode] : moved) {
    std::string now = to + path.substr(from.size());
    nodes_[inode].paths.push_back(now);
    by_path_[std::move(now)] = inode;
  }
}

void OverlayFs::Exchange(const std::string& a, const std::string& b) {
  std::vector<std::pair<std::string, InodeId>> moved;
  for (const auto& [path, inode] : by_path_) {
    if (IsAtOrBelow(path, a) || IsAtOrBelow(path, b)) moved.emplace_back(path, inode);
  }
  for (const auto& [path, inode] : moved) DropPath(path);
  for (const auto& [path, inode] : moved) {
    std::string now = IsAtOrBelow(path, a) ? b + path.substr(a.size()) : a + path.substr(b.size());
    nodes_[inode].paths.push_back(now);
    by_path_[std::move(now)] = inode;
  }
}

void OverlayFs::Forget(InodeId inode, uint64_t count) {
  MutexLock lock(mu_);
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || inode == kRootInode) return;
  Node& node = it->second;
  node.lookups = node.lookups > count ? node.lookups - count : 0;
  MaybeErase(inode);
}

void OverlayFs::MaybeErase(InodeId inode) {
  auto it = nodes_.find(inode);
  if (it == nodes_.end() || inode == kRootInode) return;
  Node& node = it->second;
  // Open files keep it (their fds are Release's to close).
  if (node.lookups > 0 || !node.fds.empty()) return;
  for (const auto& path : node.paths) by_path_.erase(path);
  if (node.has_file_key) {
    auto f = by_file_.find(node.file_key);
    if (f != by_file_.end() && f->second == inode) by_file_.erase(f);
  }
  nodes_.erase(it);
}

}  // namespace ucfs
