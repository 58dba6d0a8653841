// Copy-up: a view file made an upper file before it is changed, its bytes
// written aside (CopyAside, which may run unlocked) and renamed in.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "overlay/upper_dir.h"
#include "ucfs/overlay/overlay.h"
#include "ucfs/view/source_files.h"

namespace ucfs {

Overlay::CopyAside::~CopyAside() {
  if (root_ && !temp_.empty()) ::unlinkat(root_.get(), temp_.c_str(), 0);
}

Status Overlay::CopyAside::Run() {
  UCFS_ASSIGN_OR_RETURN(Attr attr, view_->GetAttr(lower_));
  if (attr.is_symlink) return RunForLink(attr);
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

// A source's link is copied as a link: its target, owner and times.
Status Overlay::CopyAside::RunForLink(const Attr& attr) {
  UCFS_ASSIGN_OR_RETURN(std::string target, view_->ReadLink(lower_));
  ::unlinkat(root_.get(), temp_.c_str(), 0);
  if (::symlinkat(target.c_str(), root_.get(), temp_.c_str()) != 0) return Errno(temp_);
  written_ = true;
  if (can_chown_ && ::fchownat(root_.get(), temp_.c_str(), ViewEntryUid(attr), ViewEntryGid(attr),
                               AT_SYMLINK_NOFOLLOW) != 0) {
    return Errno(temp_);
  }
  const timespec t{attr.mtime_ns / 1000000000, attr.mtime_ns % 1000000000};
  const timespec times[2] = {t, t};
  if (::utimensat(root_.get(), temp_.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
    return Errno(temp_);
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

}  // namespace ucfs
