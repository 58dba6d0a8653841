// The Overlay's core: opening the upper directory, and resolving a path
// through it and the view (lookup, listing, the upper directory of a path).
// What makes, copies up and removes entries is in overlay_create.cc,
// overlay_copy_up.cc and overlay_remove.cc; the upper directory's names in
// upper_dir.h.
#include "ucfs/overlay/overlay.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "overlay/upper_dir.h"

namespace ucfs {

bool IsOverlayInternalName(std::string_view stored) {
  std::string name;
  return Classify(stored, &name) != Stored::kEntry;
}

// As the view shows it (the source's owner and mode, or for a built file
// the strictest of its sources'), as overlayfs shows its lower layer's: the
// kernel then lets write to it whoever could write to its source.
mode_t ViewEntryMode(const Attr& a) {
  if (a.is_symlink) return S_IFLNK | 0777;
  return static_cast<mode_t>((a.is_dir ? S_IFDIR : S_IFREG) | (a.mode & 07777));
}
uid_t ViewEntryUid(const Attr& a) { return a.uid; }
gid_t ViewEntryGid(const Attr& a) { return a.gid; }

mode_t ModeAfterWrite(mode_t mode, gid_t gid, const Overlay::Caller& caller) {
  if (!S_ISREG(mode) || (mode & (S_ISUID | S_ISGID)) == 0) return mode;
  Overlay::Credentials creds;
  if (caller.credentials) {
    creds = caller.credentials();
  } else {
    creds.fsetid = caller.uid == 0;
  }
  if (creds.fsetid) return mode;
  mode_t kill = S_ISUID;
  const bool in_group = caller.gid == gid || std::find(creds.groups.begin(), creds.groups.end(),
                                                       gid) != creds.groups.end();
  if ((mode & S_IXGRP) || !in_group) kill |= S_ISGID;
  return mode & ~kill;
}

Result<std::unique_ptr<Overlay>> Overlay::Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env,
                                               Options options) {
  WriteEnv& writer = options.writer != nullptr ? *options.writer : *env.Writer();
  const Status mkdir = writer.MakeDirAt(AT_FDCWD, upper_dir, 0755);
  if (!mkdir.ok() && mkdir.posix_errno() != EEXIST) return mkdir.WithFile(upper_dir);
  const bool made = mkdir.ok();
  // The mount's root, shared with its users: 0755 whatever the daemon's
  // umask took from it.
  if (made) {
    UCFS_RETURN_IF_ERROR(writer.ChmodAt(AT_FDCWD, upper_dir, 0755).WithFile(upper_dir));
  }
  int fd = ::open(upper_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Fail(errno == ENOTDIR ? ENOTDIR : errno, upper_dir, "not a directory");
  UniqueFd root(fd);
  // A new upper root is the shown root copied up: its time, not the mount's.
  if (auto shown = lower->GetAttr(kRootInode); made && shown.ok()) {
    const timespec times[2] = {TimespecOf(shown->mtime_ns), TimespecOf(shown->mtime_ns)};
    writer.SetTimesAt(AT_FDCWD, upper_dir, times, 0);  // best effort
  }
  RemoveStaleCopyUps(writer, root.get(), 0);
  return std::unique_ptr<Overlay>(
      new Overlay(upper_dir, std::move(root), std::move(lower), env, std::move(options)));
}

Result<std::unique_ptr<Overlay>> Overlay::Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env) {
  return Open(upper_dir, std::move(lower), env, Options());
}

bool Overlay::IsReadOnly(std::string_view path) const {
  auto parts = Components(path);
  if (parts.empty()) return false;
  return std::find(options_.read_only.begin(), options_.read_only.end(), parts[0]) !=
         options_.read_only.end();
}

Result<Overlay::Resolved> Overlay::Resolve(std::string_view path) {
  ++walks_;
  Resolved r;
  Entry& e = r.entry;
  e.is_dir = true;
  e.in_upper = true;
  e.lower = kRootInode;
  e.upper_path = upper_;
  if (::fstat(root_.get(), &e.st) != 0) return Status::LastErrno(upper_);
  // The directory of the current entry, while it is an upper directory.
  UniqueFd cur = Dup(root_.get());
  r.ref.dir = Dup(root_.get());
  r.ref.name = ".";
  const auto parts = Components(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string_view c = parts[i];
    if (!e.is_dir) return Fail(ENOTDIR, path, "not a directory on the way");
    UCFS_RETURN_IF_ERROR(CheckName(path, c));
    const std::string stored = StoredName(c);
    // Whiteouts matter only where the view has entries (an opaque
    // directory has none: its `lower` is 0).
    const bool whited = e.in_upper && e.lower != 0 && StatAt(cur.get(), WhiteoutName(c));
    InodeId view_child = 0;
    if (e.lower != 0) {
      auto found = lower_->Lookup(e.lower, c);
      if (found.ok()) view_child = *found;
    }
    Entry next;
    next.upper_path = JoinPath(e.upper_path, stored);
    next.covers_view = view_child != 0;
    const InodeId lower_child = whited ? 0 : view_child;
    next.in_upper = e.in_upper && StatAt(cur.get(), stored, &next.st);
    if (next.in_upper) {
      next.is_dir = S_ISDIR(next.st.st_mode);
      // An upper directory merges with a view directory of the same name,
      // unless it is opaque (made where that one was removed).
      // A view entry it cannot stat it does not show.
      if (next.is_dir && lower_child != 0 && !IsOpaque(cur.get(), stored)) {
        auto attr = lower_->GetAttr(lower_child);
        if (attr.ok() && attr->is_dir) next.lower = lower_child;
      }
    } else if (lower_child != 0) {
      auto attr = lower_->GetAttr(lower_child);
      if (!attr.ok()) return attr.status().Annotate(path);
      next.lower = lower_child;
      next.is_dir = attr->is_dir;
    } else {
      return Fail(ENOENT, path, "no such file or directory");
    }
    if (i + 1 == parts.size()) {
      r.ref.dir = e.in_upper ? std::move(cur) : UniqueFd();
      r.ref.name = stored;
    } else if (next.in_upper && next.is_dir) {
      UCFS_ASSIGN_OR_RETURN(cur, OpenDirAt(cur.get(), stored, path));
    } else {
      cur = UniqueFd();
    }
    e = std::move(next);
  }
  return r;
}

Result<Overlay::Entry> Overlay::Lookup(std::string_view path) {
  auto r = Resolve(path);
  auto [parent, name] = SplitLast(path);
  if (!r.ok() && r.status().posix_errno() == ENOENT && !path.empty() && MightAppear(name)) {
    auto p = Resolve(parent);
    if (p.ok() && p->entry.in_upper && p->entry.is_dir &&
        options_.on_upper_dir(std::string(parent), p->entry.upper_path)) {
      r = Resolve(path);
    }
  }
  if (!r.ok()) return r.status();
  return std::move(r->entry);
}

bool Overlay::MightAppear(std::string_view name) const {
  return options_.on_upper_dir && options_.might_show && options_.might_show(name);
}

Result<std::vector<std::pair<std::string, Overlay::Entry>>> Overlay::ReadDir(std::string_view path,
                                                                             bool reading) {
  UCFS_ASSIGN_OR_RETURN(Resolved dir, Resolve(path));
  if (!dir.entry.is_dir) return Fail(ENOTDIR, path, "not a directory");
  if (dir.entry.in_upper && options_.on_upper_dir &&
      options_.on_upper_dir(std::string(path), dir.entry.upper_path)) {
    UCFS_ASSIGN_OR_RETURN(dir, Resolve(path));
  }
  std::map<std::string, Entry> merged;
  UniqueFd fd;
  std::vector<UpperName> upper;
  if (dir.entry.in_upper) {
    if (path.empty()) {
      fd = Dup(root_.get());
    } else {
      UCFS_ASSIGN_OR_RETURN(fd, OpenDirAt(dir.ref.dir.get(), dir.ref.name, path));
    }
    UCFS_ASSIGN_OR_RETURN(upper, ListUpper(fd.get(), path, reading));
  }
  if (dir.entry.lower != 0) {  // 0 for an opaque directory
    UCFS_ASSIGN_OR_RETURN(auto lower, lower_->ReadDir(dir.entry.lower));
    for (const auto& [name, attr] : lower) {
      Entry e;
      e.is_dir = attr.is_dir;
      e.lower = attr.inode;
      e.covers_view = true;
      e.upper_path = JoinPath(dir.entry.upper_path, StoredName(name));
      merged[name] = e;
    }
  }
  for (const auto& d : upper) {
    std::string name;
    if (Classify(d.stored, &name) == Stored::kWhiteout) merged.erase(name);
  }
  for (const auto& d : upper) {
    std::string name;
    if (Classify(d.stored, &name) != Stored::kEntry) continue;
    Entry e;
    if (!StatAt(fd.get(), d.stored, &e.st)) continue;  // gone meanwhile
    e.is_dir = S_ISDIR(e.st.st_mode);
    e.in_upper = true;
    e.upper_path = JoinPath(dir.entry.upper_path, d.stored);
    auto it = merged.find(name);
    if (it != merged.end()) {
      e.covers_view = true;
      if (e.is_dir && it->second.is_dir && !IsOpaque(fd.get(), d.stored)) {
        e.lower = it->second.lower;
      }
    }
    merged[name] = e;
  }
  return std::vector<std::pair<std::string, Entry>>(merged.begin(), merged.end());
}

Result<UniqueFd> Overlay::UpperDir(std::string_view path) {
  ++walks_;
  UniqueFd cur = Dup(root_.get());
  std::string rel;
  for (std::string_view c : Components(path)) {
    rel = rel.empty() ? std::string(c) : rel + "/" + std::string(c);
    const std::string stored = StoredName(c);
    struct stat st {};
    if (!StatAt(cur.get(), stored, &st)) {
      // Copied up as the view shows it: mode, owner, times.
      UCFS_ASSIGN_OR_RETURN(Entry e, Lookup(rel));
      if (!e.is_dir) return Fail(ENOTDIR, rel, "not a directory");
      if (e.lower == 0) return Fail(ENOENT, rel, "no such directory");
      UCFS_ASSIGN_OR_RETURN(Attr a, lower_->GetAttr(e.lower));
      // A copy-up, which changes nothing the mount shows of the directory
      // it is made in: its times are put back (as overlayfs does).
      struct stat parent {};
      const bool stated = ::fstat(cur.get(), &parent) == 0;
      Status made = CopyUpDir(cur.get(), stored, a);
      if (stated) RestoreTimes(writer_, cur.get(), parent);
      UCFS_RETURN_IF_ERROR(made.WithFile(rel));
      copied_up_dirs_.push_back(rel);
    } else if (!S_ISDIR(st.st_mode)) {
      return Fail(ENOTDIR, rel, "not a directory");
    }
    UCFS_ASSIGN_OR_RETURN(cur, OpenDirAt(cur.get(), stored, rel));
  }
  return cur;
}

Status Overlay::CopyUpDir(int dir, const std::string& name, const Attr& a) {
  UCFS_RETURN_IF_ERROR(writer_.MakeDirAt(dir, name, 0700));
  // The owner as far as the daemon may set it (a user namespace may map
  // no such id: the directory is then the daemon's, as a new one is).
  if (can_chown_) {
    writer_.ChownAt(dir, name, ViewEntryUid(a), ViewEntryGid(a), AT_SYMLINK_NOFOLLOW);
  }
  // A directory shown with another mode or time than the view's would be
  // a change no one made: it goes again.
  const timespec times[2] = {TimespecOf(a.mtime_ns), TimespecOf(a.mtime_ns)};
  Status s = writer_.ChmodAt(dir, name, ViewEntryMode(a) & 07777);
  if (s.ok()) s = writer_.SetTimesAt(dir, name, times, AT_SYMLINK_NOFOLLOW);
  if (!s.ok()) writer_.UnlinkAt(dir, name, AT_REMOVEDIR);
  return s;
}

Status Overlay::EnsureUpperDir(std::string_view path) { return UpperDir(path).status(); }

Result<UniqueFd> Overlay::ParentOf(Resolved& r, std::string_view path) {
  if (r.ref.dir) return std::move(r.ref.dir);
  return UpperDir(SplitLast(path).first);
}

bool Overlay::ViewHas(std::string_view path) {
  auto [parent, name] = SplitLast(path);
  auto p = Lookup(parent);
  return p.ok() && p->lower != 0 && lower_->Lookup(p->lower, name).ok();
}

Result<Overlay::UpperRef> Overlay::LocateUpper(std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (!r.entry.in_upper) return Fail(ENOENT, path, "not in the upper directory");
  return std::move(r.ref);
}

Result<UniqueFd> Overlay::OpenRead(std::string_view path, int flags) {
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (!r.entry.in_upper) return Fail(ENOENT, path, "not in the upper directory");
  // A read: nothing made (OpenWrite makes and writes, through the WriteEnv).
  const int read_flags = flags & ~(O_CREAT | O_EXCL);
  UniqueFd fd(::openat(r.ref.dir.get(), r.ref.name.c_str(), read_flags | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Status::LastErrno(path);
  return fd;
}

Result<std::string> Overlay::ReadLink(std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (!r.entry.in_upper && r.entry.lower != 0) {  // a source's link, shown as one
    auto target = lower_->ReadLink(r.entry.lower);
    if (!target.ok()) return Fail(EINVAL, path, "not a symbolic link");
    return target;
  }
  if (!r.entry.in_upper || !S_ISLNK(r.entry.st.st_mode)) {
    return Fail(EINVAL, path, "not a symbolic link");
  }
  std::string target(4096, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(r.ref.dir.get(), r.ref.name.c_str(), target.data(), target.size());
    if (n < 0) return Status::LastErrno(path);
    if (static_cast<size_t>(n) < target.size()) {
      target.resize(static_cast<size_t>(n));
      return target;
    }
    target.resize(target.size() * 2);
  }
}

}  // namespace ucfs
