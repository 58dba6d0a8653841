// Copy-up: a view file made an upper file before it is changed, its bytes
// written aside (CopyAside, which may run unlocked) and given its name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "overlay/upper_dir.h"
#include "ucfs/overlay/overlay.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs {
namespace {

bool SameTime(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

}  // namespace

Overlay::CopyAside::~CopyAside() {
  if (root_ && !temp_.empty()) ::unlinkat(root_.get(), temp_.c_str(), 0);
}

Status Overlay::CopyAside::Run() {
  UCFS_ASSIGN_OR_RETURN(Attr attr, view_->GetAttr(lower_));
  if (attr.is_symlink) return RunForLink(attr);
  if (!file_) return Fail(EBADF, temp_, "no file to copy into");
  // In bounded chunks, as rank files may be GBs; the file has no name (or a
  // temporary one) until Install: a crash leaves either nothing or all.
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
        const ssize_t w = ::write(file_.get(), bytes.data() + done, bytes.size() - done);
        if (w < 0 && errno != EINTR)
          return Status::LastErrno("copy-up of " + std::to_string(lower_));
        if (w > 0) done += static_cast<size_t>(w);
      }
    }
  }
  // The copy is the file as it was shown: owner, mode and times (rsync and
  // make compare mtimes; a copy made empty for a truncation keeps the
  // atime, and the truncation then moves the mtime).
  const std::string what = "copy-up of " + std::to_string(lower_);
  if (can_chown_ && ::fchown(file_.get(), ViewEntryUid(attr), ViewEntryGid(attr)) != 0) {
    return Status::LastErrno(what);
  }
  if (::fchmod(file_.get(), ViewEntryMode(attr) & 07777) != 0) return Status::LastErrno(what);
  const timespec times[2] = {TimespecOf(attr.mtime_ns), TimespecOf(attr.mtime_ns)};
  if (::futimens(file_.get(), times) != 0) return Status::LastErrno(what);
  if (keep_contents_ && ::fsync(file_.get()) != 0) return Status::LastErrno(what);
  written_ = true;
  return Status::OK();
}

// A source's link is copied as a link: its target, owner and times.
Status Overlay::CopyAside::RunForLink(const Attr& attr) {
  if (can_chown_ && ::fchownat(root_.get(), temp_.c_str(), ViewEntryUid(attr), ViewEntryGid(attr),
                               AT_SYMLINK_NOFOLLOW) != 0) {
    return Status::LastErrno(temp_);
  }
  const timespec times[2] = {TimespecOf(attr.mtime_ns), TimespecOf(attr.mtime_ns)};
  if (::utimensat(root_.get(), temp_.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
    return Status::LastErrno(temp_);
  }
  written_ = true;
  return Status::OK();
}

Result<int> Overlay::CopyAside::TakeUnnamed() {
  if (!written_ || !file_) return Fail(EINVAL, temp_, "no copy of a file to take");
  if (!temp_.empty()) {
    if (::unlinkat(root_.get(), temp_.c_str(), 0) != 0) return Status::LastErrno(temp_);
    temp_.clear();
  }
  return file_.release();
}

Result<Overlay::CopyAside> Overlay::NewCopyAside(InodeId lower, bool keep_contents) {
  CopyAside copy;
  copy.root_ = Dup(root_.get());
  copy.view_ = lower_;
  copy.env_ = &env_;
  copy.lower_ = lower;
  copy.keep_contents_ = keep_contents;
  copy.can_chown_ = can_chown_;
  UCFS_ASSIGN_OR_RETURN(Attr attr, lower_->GetAttr(lower));
  if (!attr.is_symlink) {
    // Open for reading too: TakeUnnamed's file serves reads.
    int fd = ::openat(root_.get(), ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
      copy.file_ = UniqueFd(fd);
      return copy;
    }
  }
  // A link, or a file system without O_TMPFILE: a temporary name in the
  // root, whose times Install puts back if nothing else moved them.
  copy.temp_ = std::string(kCopyUpPrefix) + std::to_string(++copy_ups_);
  ::unlinkat(root_.get(), copy.temp_.c_str(), 0);
  ::fstat(root_.get(), &copy.root_before_);
  if (attr.is_symlink) {
    UCFS_ASSIGN_OR_RETURN(std::string target, lower_->ReadLink(lower));
    if (::symlinkat(target.c_str(), root_.get(), copy.temp_.c_str()) != 0) {
      Status s = Status::LastErrno(copy.temp_);
      copy.temp_.clear();
      return s;
    }
  } else {
    int fd = ::openat(root_.get(), copy.temp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      Status s = Status::LastErrno(copy.temp_);
      copy.temp_.clear();
      return s;
    }
    copy.file_ = UniqueFd(fd);
  }
  ::fstat(root_.get(), &copy.root_after_);
  return copy;
}

Status Overlay::CopyUp(int dir, std::string_view name, InodeId lower, bool keep_contents) {
  UCFS_ASSIGN_OR_RETURN(CopyAside copy, NewCopyAside(lower, keep_contents));
  UCFS_RETURN_IF_ERROR(copy.Run());
  return Install(dir, name, std::move(copy));
}

Status Overlay::Install(int dir, std::string_view name, CopyAside copy) {
  // A copy-up changes nothing the mount shows of the directory it lands
  // in: its times are put back (as overlayfs does), and the root's, where
  // a temporary name was made and nothing else changed it since.
  struct stat parent {};
  const bool stated = ::fstat(dir, &parent) == 0;
  struct stat root {};
  const bool root_kept = !copy.temp_.empty() && ::fstat(copy.root_.get(), &root) == 0 &&
                         SameTime(root.st_mtim, copy.root_after_.st_mtim);
  const std::string to(name);
  if (copy.temp_.empty()) {
    const std::string self = "/proc/self/fd/" + std::to_string(copy.file_.get());
    if (::linkat(AT_FDCWD, self.c_str(), dir, to.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      return Status::LastErrno(name);
    }
  } else {
    if (::renameat(copy.root_.get(), copy.temp_.c_str(), dir, to.c_str()) != 0) {
      return Status::LastErrno(name);
    }
    copy.temp_.clear();  // installed: nothing to remove
  }
  if (stated) RestoreTimes(dir, parent);
  if (root_kept) RestoreTimes(copy.root_.get(), copy.root_before_);
  return Status::OK();
}

Result<std::optional<Overlay::CopyAside>> Overlay::PrepareCopyAside(std::string_view path,
                                                                    bool keep_contents) {
  if (IsReadOnly(path)) return std::optional<CopyAside>();
  auto r = Resolve(path);
  if (!r.ok() || r->entry.in_upper || r->entry.is_dir) return std::optional<CopyAside>();
  UCFS_ASSIGN_OR_RETURN(CopyAside copy, NewCopyAside(r->entry.lower, keep_contents));
  return std::optional<CopyAside>(std::move(copy));
}

Result<Overlay::CopyAside> Overlay::CopyAsideOf(InodeId lower) {
  UCFS_ASSIGN_OR_RETURN(Attr attr, lower_->GetAttr(lower));
  if (attr.is_dir || attr.is_symlink) return Fail(EINVAL, "", "not a regular file of the view");
  return NewCopyAside(lower, true);
}

Status Overlay::Adopt(std::string_view path, CopyAside copy) {
  if (!copy.written_ || IsReadOnly(path)) return Status::OK();
  auto r = Resolve(path);
  if (!r.ok() || r->entry.in_upper || r->entry.is_dir || r->entry.lower != copy.lower_) {
    return Status::OK();  // changed meanwhile: the copy is dropped
  }
  auto [parent, name] = SplitLast(path);
  // The parent as the walk left it, or made (its view directories copied up).
  UniqueFd dir = std::move(r->ref.dir);
  if (!dir) {
    UCFS_ASSIGN_OR_RETURN(dir, UpperDir(parent));
  }
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
  // The parent as the walk left it, or made (its view directories copied up).
  UniqueFd dir = std::move(r.ref.dir);
  if (!dir) {
    UCFS_ASSIGN_OR_RETURN(dir, UpperDir(parent));
  }
  UCFS_RETURN_IF_ERROR(CopyUp(dir.get(), StoredName(name), r.entry.lower, keep_contents));
  return UpperRef{std::move(dir), StoredName(name)};
}

}  // namespace ucfs
