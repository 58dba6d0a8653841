#include "ucfs/overlay/overlay.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "ucfs/view/source_files.h"

namespace ucfs {
namespace {

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaque = ".wh..opq";
// ".wh..wh." names are ucfs's own, never the whiteout of a user's entry.
constexpr std::string_view kPrivatePrefix = ".wh..wh.";
constexpr std::string_view kEscapedEntry = ".wh..wh.e.";
constexpr std::string_view kEscapedWhiteout = ".wh..wh.w.";
constexpr std::string_view kCopyUpPrefix = ".wh..wh.copyup.";

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

// Where an entry named `name` is stored in its upper directory.
std::string StoredName(std::string_view name) {
  if (name.starts_with(kWhiteoutPrefix)) return std::string(kEscapedEntry) + std::string(name);
  return std::string(name);
}

// The whiteout hiding the view's entry `name`.
std::string WhiteoutName(std::string_view name) {
  if (name.starts_with(kWhiteoutPrefix) || name == kOpaque.substr(kWhiteoutPrefix.size())) {
    return std::string(kEscapedWhiteout) + std::string(name);
  }
  return std::string(kWhiteoutPrefix) + std::string(name);
}

enum class Stored { kEntry, kWhiteout, kInternal };

// What an upper directory's entry `stored` is, and the name it is about.
Stored Classify(std::string_view stored, std::string* name) {
  if (stored.starts_with(kEscapedEntry)) {
    *name = stored.substr(kEscapedEntry.size());
    return Stored::kEntry;
  }
  if (stored.starts_with(kEscapedWhiteout)) {
    *name = stored.substr(kEscapedWhiteout.size());
    return Stored::kWhiteout;
  }
  if (stored.starts_with(kPrivatePrefix) || stored == kOpaque) return Stored::kInternal;
  if (stored.starts_with(kWhiteoutPrefix)) {
    *name = stored.substr(kWhiteoutPrefix.size());
    return Stored::kWhiteout;
  }
  *name = stored;
  return Stored::kEntry;
}

bool StatAt(int dir, const std::string& name, struct stat* st = nullptr) {
  struct stat ignored {};
  return ::fstatat(dir, name.c_str(), st != nullptr ? st : &ignored, AT_SYMLINK_NOFOLLOW) == 0;
}

Status Errno(std::string_view what) { return Status::FromErrno(what, errno); }

Status Fail(int err, std::string_view path, std::string_view what) {
  return Status::Posix(err, std::string(path) + ": " + std::string(what));
}

Result<UniqueFd> OpenDirAt(int dir, const std::string& name, std::string_view what) {
  int fd = ::openat(dir, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno(what);
  return UniqueFd(fd);
}

UniqueFd Dup(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

struct UpperName {
  std::string stored;
  bool is_dir;
};

// The entries of an upper directory (stored names), without "." and "..".
Result<std::vector<UpperName>> ListUpper(int dir, std::string_view what) {
  int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(what);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    Status s = Errno(what);
    ::close(fd);
    return s;
  }
  std::vector<UpperName> out;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_dir =
          ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    out.push_back({std::string(name), is_dir});
  }
  ::closedir(d);
  return out;
}

Status CheckName(std::string_view path, std::string_view name) {
  if (name.size() > kMaxNameLength || StoredName(name).size() > kMaxNameLength) {
    return Fail(ENAMETOOLONG, path, "name too long");
  }
  return Status::OK();
}

// Copy-up temporaries a crash left behind, anywhere in the upper tree.
void RemoveStaleCopyUps(int dir, int depth) {
  if (depth > 64) return;
  auto entries = ListUpper(dir, "upper");
  if (!entries.ok()) return;
  for (const auto& d : *entries) {
    if (d.is_dir) {
      auto sub = OpenDirAt(dir, d.stored, d.stored);
      if (sub.ok()) RemoveStaleCopyUps(sub->get(), depth + 1);
    } else if (d.stored.starts_with(kCopyUpPrefix)) {
      ::unlinkat(dir, d.stored.c_str(), 0);
    }
  }
}

}  // namespace

bool IsOverlayInternalName(std::string_view stored) {
  std::string name;
  return Classify(stored, &name) != Stored::kEntry;
}

// As the view shows it (the source's owner and mode, or for a built file
// the strictest of its sources'), as overlayfs shows its lower layer's: the
// kernel then lets write to it whoever could write to its source.
mode_t ViewEntryMode(const Attr& a) {
  return static_cast<mode_t>((a.is_dir ? S_IFDIR : S_IFREG) | (a.mode & 07777));
}
uid_t ViewEntryUid(const Attr& a) { return a.uid; }
gid_t ViewEntryGid(const Attr& a) { return a.gid; }

Result<std::unique_ptr<Overlay>> Overlay::Open(const std::string& upper_dir,
                                               std::shared_ptr<View> lower, Env& env,
                                               Options options) {
  if (::mkdir(upper_dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno(upper_dir);
  int fd = ::open(upper_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Fail(errno == ENOTDIR ? ENOTDIR : errno, upper_dir, "not a directory");
  UniqueFd root(fd);
  RemoveStaleCopyUps(root.get(), 0);
  return std::unique_ptr<Overlay>(
      new Overlay(upper_dir, std::move(root), std::move(lower), env, std::move(options)));
}

bool Overlay::IsReadOnly(std::string_view path) const {
  auto parts = Components(path);
  if (parts.empty()) return false;
  return std::find(options_.read_only.begin(), options_.read_only.end(), parts[0]) !=
         options_.read_only.end();
}

Result<Overlay::Resolved> Overlay::Resolve(std::string_view path) {
  Resolved r;
  Entry& e = r.entry;
  e.is_dir = true;
  e.in_upper = true;
  e.lower = kRootInode;
  e.upper_path = upper_;
  if (::fstat(root_.get(), &e.st) != 0) return Errno(upper_);
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
    // Whiteouts and opaque markers matter only where the view has entries.
    bool opaque = false;
    bool whited = false;
    if (e.in_upper && e.lower != 0) {
      opaque = StatAt(cur.get(), std::string(kOpaque));
      whited = StatAt(cur.get(), WhiteoutName(c));
    }
    InodeId view_child = 0;
    if (e.lower != 0 && !opaque) {
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
      // An upper directory merges with a view directory of the same name.
      if (next.is_dir && lower_child != 0 && lower_->GetAttr(lower_child)->is_dir) {
        next.lower = lower_child;
      }
    } else if (lower_child != 0) {
      next.lower = lower_child;
      next.is_dir = lower_->GetAttr(lower_child)->is_dir;
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
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  return std::move(r.entry);
}

Result<std::vector<std::pair<std::string, Overlay::Entry>>> Overlay::ReadDir(
    std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Resolved dir, Resolve(path));
  if (!dir.entry.is_dir) return Fail(ENOTDIR, path, "not a directory");
  std::map<std::string, Entry> merged;
  UniqueFd fd;
  std::vector<UpperName> upper;
  bool opaque = false;
  if (dir.entry.in_upper) {
    if (path.empty()) {
      fd = Dup(root_.get());
    } else {
      UCFS_ASSIGN_OR_RETURN(fd, OpenDirAt(dir.ref.dir.get(), dir.ref.name, path));
    }
    UCFS_ASSIGN_OR_RETURN(upper, ListUpper(fd.get(), path));
    opaque = StatAt(fd.get(), std::string(kOpaque));
  }
  if (dir.entry.lower != 0 && !opaque) {
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
      if (e.is_dir && it->second.is_dir) e.lower = it->second.lower;
    }
    merged[name] = e;
  }
  return std::vector<std::pair<std::string, Entry>>(merged.begin(), merged.end());
}

Result<UniqueFd> Overlay::UpperDir(std::string_view path) {
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
      if (::mkdirat(cur.get(), stored.c_str(), 0700) != 0) return Errno(rel);
      if (can_chown_) {
        ::fchownat(cur.get(), stored.c_str(), ViewEntryUid(a), ViewEntryGid(a),
                   AT_SYMLINK_NOFOLLOW);
      }
      ::fchmodat(cur.get(), stored.c_str(), ViewEntryMode(a) & 07777, 0);
      const timespec t{a.mtime_ns / 1000000000, a.mtime_ns % 1000000000};
      const timespec times[2] = {t, t};
      ::utimensat(cur.get(), stored.c_str(), times, AT_SYMLINK_NOFOLLOW);
    } else if (!S_ISDIR(st.st_mode)) {
      return Fail(ENOTDIR, rel, "not a directory");
    }
    UCFS_ASSIGN_OR_RETURN(cur, OpenDirAt(cur.get(), stored, rel));
  }
  return cur;
}

Status Overlay::EnsureUpperDir(std::string_view path) { return UpperDir(path).status(); }

Status Overlay::AddWhiteout(int dir, std::string_view name) {
  const std::string wh = WhiteoutName(name);
  int fd = ::openat(dir, wh.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Errno(wh);
  ::close(fd);
  return Status::OK();
}

bool Overlay::RemoveWhiteout(int dir, std::string_view name) {
  return ::unlinkat(dir, WhiteoutName(name).c_str(), 0) == 0;
}

void Overlay::Created(const UpperRef& ref, std::string_view name, bool is_dir) {
  // Where a deleted view entry stood, its whiteout goes; a directory made
  // there must not show the old directory's contents.
  if (RemoveWhiteout(ref.dir.get(), name) && is_dir) {
    int fd = ::openat(ref.dir.get(), (ref.name + "/" + std::string(kOpaque)).c_str(),
                      O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) ::close(fd);
  }
}

void Overlay::ClearInternal(int dir_fd) {
  auto names = ListUpper(dir_fd, "upper");
  if (!names.ok()) return;
  for (const auto& d : *names) {
    if (IsOverlayInternalName(d.stored)) ::unlinkat(dir_fd, d.stored.c_str(), 0);
  }
}

Status Overlay::FinishCreate(int dir, const std::string& name, mode_t mode, const Caller* caller,
                             bool is_dir, bool is_symlink) {
  struct stat parent {};
  if (::fstat(dir, &parent) != 0) return Errno(name);
  mode &= 07777;
  // In a setgid directory the new entry has the directory's group (the
  // kernel gave it), and a new directory is setgid too.
  const bool setgid_parent = (parent.st_mode & S_ISGID) != 0;
  if (is_dir && setgid_parent) mode |= S_ISGID;
  if (caller != nullptr && can_chown_) {
    const gid_t gid = setgid_parent ? static_cast<gid_t>(-1) : caller->gid;
    if (::fchownat(dir, name.c_str(), caller->uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return Errno(name);
    }
  }
  if (is_symlink) return Status::OK();
  // The daemon's own umask (and a chown's clearing of set-id bits) may have
  // changed the mode; it is set to what was asked.
  struct stat st {};
  if (!StatAt(dir, name, &st)) return Errno(name);
  if ((st.st_mode & 07777) != mode && ::fchmodat(dir, name.c_str(), mode, 0) != 0) {
    return Errno(name);
  }
  return Status::OK();
}

Result<Overlay::UpperRef> Overlay::PrepareNew(std::string_view path) {
  auto [parent, name] = SplitLast(path);
  if (IsReadOnly(path)) return Fail(EROFS, path, "read-only");
  UCFS_RETURN_IF_ERROR(CheckName(path, name));
  UCFS_ASSIGN_OR_RETURN(Entry p, Lookup(parent));
  if (!p.is_dir) return Fail(ENOTDIR, parent, "not a directory");
  if (Lookup(path).ok()) return Fail(EEXIST, path, "exists");
  UpperRef ref;
  UCFS_ASSIGN_OR_RETURN(ref.dir, UpperDir(parent));
  ref.name = StoredName(name);
  return ref;
}

Status Overlay::MakeDir(std::string_view path, mode_t mode, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (caller != nullptr) mode &= ~caller->umask;
  if (::mkdirat(ref.dir.get(), ref.name.c_str(), mode & 07777) != 0) return Errno(path);
  Status s = FinishCreate(ref.dir.get(), ref.name, mode, caller, true, false);
  if (!s.ok()) {
    ::unlinkat(ref.dir.get(), ref.name.c_str(), AT_REMOVEDIR);
    return s;
  }
  Created(ref, SplitLast(path).second, true);
  return Status::OK();
}

Status Overlay::MakeNode(std::string_view path, mode_t mode, dev_t rdev, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (caller != nullptr) mode &= ~caller->umask;
  if (::mknodat(ref.dir.get(), ref.name.c_str(), mode, rdev) != 0) return Errno(path);
  Status s = FinishCreate(ref.dir.get(), ref.name, mode, caller, false, false);
  if (!s.ok()) {
    ::unlinkat(ref.dir.get(), ref.name.c_str(), 0);
    return s;
  }
  Created(ref, SplitLast(path).second, false);
  return Status::OK();
}

Status Overlay::Symlink(std::string_view target, std::string_view path, const Caller* caller) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (::symlinkat(std::string(target).c_str(), ref.dir.get(), ref.name.c_str()) != 0) {
    return Errno(path);
  }
  Status s = FinishCreate(ref.dir.get(), ref.name, 0777, caller, false, true);
  if (!s.ok()) {
    ::unlinkat(ref.dir.get(), ref.name.c_str(), 0);
    return s;
  }
  Created(ref, SplitLast(path).second, false);
  return Status::OK();
}

Result<std::string> Overlay::ReadLink(std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (!r.entry.in_upper || !S_ISLNK(r.entry.st.st_mode)) {
    return Fail(EINVAL, path, "not a symbolic link");
  }
  std::string target(4096, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(r.ref.dir.get(), r.ref.name.c_str(), target.data(), target.size());
    if (n < 0) return Errno(path);
    if (static_cast<size_t>(n) < target.size()) {
      target.resize(static_cast<size_t>(n));
      return target;
    }
    target.resize(target.size() * 2);
  }
}

Overlay::CopyAside::~CopyAside() {
  if (root_ && !temp_.empty()) ::unlinkat(root_.get(), temp_.c_str(), 0);
}

Status Overlay::CopyAside::Run() {
  UCFS_ASSIGN_OR_RETURN(Attr attr, view_->GetAttr(lower_));
  // Written aside and renamed, so a crash leaves either nothing or all; in
  // bounded chunks, as rank files may be GBs.
  ::unlinkat(root_.get(), temp_.c_str(), 0);
  UniqueFd fd(::openat(root_.get(), temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return Errno(temp_);
  written_ = true;
  if (keep_contents_) {
    SourceFiles reader(*env_, [this](uint32_t i) { return view_->source(i); });
    constexpr uint64_t kChunk = uint64_t{8} << 20;
    std::vector<ReadPiece> pieces;
    std::string bytes;
    for (uint64_t at = 0; at < attr.size; at += kChunk) {
      pieces.clear();
      bytes.clear();
      UCFS_RETURN_IF_ERROR(view_->Plan(lower_, at, kChunk, &pieces));
      UCFS_RETURN_IF_ERROR(reader.Read(pieces, &bytes));
      for (size_t done = 0; done < bytes.size();) {
        const ssize_t w = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
        if (w < 0 && errno != EINTR) return Errno(temp_);
        if (w > 0) done += static_cast<size_t>(w);
      }
    }
  }
  // The copy is the file as it was shown: owner, mode and, when its bytes
  // were kept, its times (rsync and make compare mtimes).
  if (can_chown_ && ::fchown(fd.get(), ViewEntryUid(attr), ViewEntryGid(attr)) != 0) {
    return Errno(temp_);
  }
  if (::fchmod(fd.get(), ViewEntryMode(attr) & 07777) != 0) return Errno(temp_);
  if (keep_contents_) {
    const timespec t{attr.mtime_ns / 1000000000, attr.mtime_ns % 1000000000};
    const timespec times[2] = {t, t};
    if (::futimens(fd.get(), times) != 0) return Errno(temp_);
    if (::fsync(fd.get()) != 0) return Errno(temp_);
  }
  return Status::OK();
}

Overlay::CopyAside Overlay::NewCopyAside(InodeId lower, bool keep_contents) {
  CopyAside copy;
  copy.root_ = Dup(root_.get());
  copy.temp_ = std::string(kCopyUpPrefix) + std::to_string(++copy_ups_);
  copy.view_ = lower_;
  copy.env_ = &env_;
  copy.lower_ = lower;
  copy.keep_contents_ = keep_contents;
  copy.can_chown_ = can_chown_;
  return copy;
}

Status Overlay::CopyUp(int dir, std::string_view name, InodeId lower, bool keep_contents) {
  CopyAside copy = NewCopyAside(lower, keep_contents);
  UCFS_RETURN_IF_ERROR(copy.Run());
  return Install(dir, name, std::move(copy));
}

Status Overlay::Install(int dir, std::string_view name, CopyAside copy) {
  if (::renameat(copy.root_.get(), copy.temp_.c_str(), dir, std::string(name).c_str()) != 0) {
    return Errno(name);
  }
  copy.temp_.clear();  // installed: nothing to remove
  return Status::OK();
}

Result<std::optional<Overlay::CopyAside>> Overlay::PrepareCopyAside(std::string_view path,
                                                                    bool keep_contents) {
  if (IsReadOnly(path)) return std::optional<CopyAside>();
  auto r = Resolve(path);
  if (!r.ok() || r->entry.in_upper || r->entry.is_dir) return std::optional<CopyAside>();
  return std::optional<CopyAside>(NewCopyAside(r->entry.lower, keep_contents));
}

Status Overlay::Adopt(std::string_view path, CopyAside copy) {
  if (!copy.written_ || IsReadOnly(path)) return Status::OK();
  auto r = Resolve(path);
  if (!r.ok() || r->entry.in_upper || r->entry.is_dir || r->entry.lower != copy.lower_) {
    return Status::OK();  // changed meanwhile: the copy is dropped
  }
  auto [parent, name] = SplitLast(path);
  UCFS_ASSIGN_OR_RETURN(UniqueFd dir, UpperDir(parent));
  return Install(dir.get(), StoredName(name), std::move(copy));
}

Result<Overlay::UpperRef> Overlay::PrepareChange(std::string_view path, bool keep_contents) {
  if (IsReadOnly(path)) return Fail(EROFS, path, "read-only");
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (r.entry.in_upper) return std::move(r.ref);
  auto [parent, name] = SplitLast(path);
  if (r.entry.is_dir) {
    UCFS_ASSIGN_OR_RETURN(UniqueFd dir, UpperDir(parent));
    UCFS_RETURN_IF_ERROR(UpperDir(path).status());
    return UpperRef{std::move(dir), StoredName(name)};
  }
  UCFS_ASSIGN_OR_RETURN(UniqueFd dir, UpperDir(parent));
  UCFS_RETURN_IF_ERROR(CopyUp(dir.get(), StoredName(name), r.entry.lower, keep_contents));
  return UpperRef{std::move(dir), StoredName(name)};
}

Result<Overlay::UpperRef> Overlay::LocateUpper(std::string_view path) {
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (!r.entry.in_upper) return Fail(ENOENT, path, "not in the upper directory");
  return std::move(r.ref);
}

Result<int> Overlay::OpenWrite(std::string_view path, int flags, mode_t mode,
                               const Caller* caller) {
  flags &= ~O_NOFOLLOW;
  auto found = Resolve(path);
  if (found.ok()) {
    if ((flags & O_CREAT) && (flags & O_EXCL)) return Fail(EEXIST, path, "exists");
    if (found->entry.is_dir) return Fail(EISDIR, path, "is a directory");
    UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareChange(path, !(flags & O_TRUNC)));
    int fd = ::openat(ref.dir.get(), ref.name.c_str(),
                      (flags & ~(O_CREAT | O_EXCL)) | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Errno(path);
    return fd;
  }
  if (!(flags & O_CREAT) || found.status().posix_errno() != ENOENT) return found.status();
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, PrepareNew(path));
  if (caller != nullptr) mode &= ~caller->umask;
  int fd = ::openat(ref.dir.get(), ref.name.c_str(), flags | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    mode & 07777);
  if (fd < 0) return Errno(path);
  Status s = FinishCreate(ref.dir.get(), ref.name, mode, caller, false, false);
  if (!s.ok()) {
    ::close(fd);
    ::unlinkat(ref.dir.get(), ref.name.c_str(), 0);
    return s;
  }
  Created(ref, SplitLast(path).second, false);
  return fd;
}

Result<int> Overlay::OpenRead(std::string_view path, int flags) {
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (!r.entry.in_upper) return Fail(ENOENT, path, "not in the upper directory");
  int fd = ::openat(r.ref.dir.get(), r.ref.name.c_str(),
                    (flags & ~(O_CREAT | O_EXCL)) | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno(path);
  return fd;
}

bool Overlay::ViewHas(std::string_view path) {
  auto [parent, name] = SplitLast(path);
  auto p = Lookup(parent);
  return p.ok() && p->lower != 0 && lower_->Lookup(p->lower, name).ok();
}

Status Overlay::Link(std::string_view from, std::string_view to) {
  if (IsReadOnly(from)) return Fail(EROFS, from, "read-only");
  UCFS_ASSIGN_OR_RETURN(Entry src, Lookup(from));
  if (src.is_dir) return Fail(EPERM, from, "hard links to directories are not allowed");
  UCFS_ASSIGN_OR_RETURN(UpperRef target, PrepareNew(to));
  UCFS_ASSIGN_OR_RETURN(UpperRef source, PrepareChange(from));
  if (::linkat(source.dir.get(), source.name.c_str(), target.dir.get(), target.name.c_str(), 0) !=
      0) {
    return Errno(to);
  }
  Created(target, SplitLast(to).second, false);
  return Status::OK();
}

Status Overlay::Unlink(std::string_view path) {
  if (IsReadOnly(path)) return Fail(EROFS, path, "read-only");
  UCFS_ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (r.entry.is_dir) return Fail(EISDIR, path, "is a directory");
  auto [parent, name] = SplitLast(path);
  if (r.entry.in_upper) {
    if (::unlinkat(r.ref.dir.get(), r.ref.name.c_str(), 0) != 0) return Errno(path);
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
    if (::unlinkat(r.ref.dir.get(), r.ref.name.c_str(), AT_REMOVEDIR) != 0) return Errno(path);
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
    return Errno(to);
  }
  // A directory moved onto a name the view has must not merge with it.
  auto mark_opaque = [](int dir, const std::string& name) {
    int fd = ::openat(dir, (name + "/" + std::string(kOpaque)).c_str(),
                      O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) ::close(fd);
  };
  if (src.is_dir && view_at_target) mark_opaque(target.dir.get(), target.name);
  RemoveWhiteout(target.dir.get(), to_name);
  if (exchange) {
    if (dst->is_dir && src.covers_view) mark_opaque(source.dir.get(), source.name);
  } else if (src.covers_view) {
    // The view's entry of the old name must not show through again.
    UCFS_RETURN_IF_ERROR(AddWhiteout(source.dir.get(), from_name));
  }
  return Status::OK();
}

}  // namespace ucfs
