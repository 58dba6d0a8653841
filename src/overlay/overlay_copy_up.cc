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

// A copy-up's failure: about the view file at `path`, or where it is about
// another file (a source that changed, a directory on the way), saying
// whose copy-up failed.
Status CopyUpFailure(const Status& s, std::string_view path) {
  if (!s.file().empty()) return s.Annotate("copy-up of " + std::string(path));
  return s.Annotate("copy-up").WithFile(path);
}

}  // namespace

Overlay::CopyAside::~CopyAside() {
  if (root_ && !temp_.empty()) writer_->UnlinkAt(root_.get(), temp_, 0);  // best effort
}

Status Overlay::CopyAside::Run() {
  // A failure names the file and what failed; the copy, which has no name
  // (or a temporary one) until Install, goes with the CopyAside.
  return CopyUpFailure(Copy(), path_);
}

Status Overlay::CopyAside::Copy() {
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
      UCFS_RETURN_IF_ERROR(writer_->WriteAll(file_.get(), bytes, at));
    }
  }
  // The copy is the file as it was shown: owner, mode and times (rsync and
  // make compare mtimes; a copy made empty for a truncation keeps the
  // atime, and the truncation then moves the mtime).
  if (can_chown_) {
    UCFS_RETURN_IF_ERROR(
        writer_->ChownAt(file_.get(), "", ViewEntryUid(attr), ViewEntryGid(attr), 0));
  }
  UCFS_RETURN_IF_ERROR(writer_->ChmodAt(file_.get(), "", ViewEntryMode(attr) & 07777));
  const timespec times[2] = {TimespecOf(attr.mtime_ns), TimespecOf(attr.mtime_ns)};
  UCFS_RETURN_IF_ERROR(writer_->SetTimesAt(file_.get(), "", times, 0));
  if (keep_contents_) UCFS_RETURN_IF_ERROR(writer_->Sync(file_.get(), false));
  written_ = true;
  return Status::OK();
}

// A source's link is copied as a link: its target, owner and times.
Status Overlay::CopyAside::RunForLink(const Attr& attr) {
  if (can_chown_) {
    UCFS_RETURN_IF_ERROR(writer_->ChownAt(root_.get(), temp_, ViewEntryUid(attr),
                                          ViewEntryGid(attr), AT_SYMLINK_NOFOLLOW));
  }
  const timespec times[2] = {TimespecOf(attr.mtime_ns), TimespecOf(attr.mtime_ns)};
  UCFS_RETURN_IF_ERROR(writer_->SetTimesAt(root_.get(), temp_, times, AT_SYMLINK_NOFOLLOW));
  written_ = true;
  return Status::OK();
}

Result<int> Overlay::CopyAside::TakeUnnamed() {
  if (!written_ || !file_) return Fail(EINVAL, temp_, "no copy of a file to take");
  if (!temp_.empty()) {
    UCFS_RETURN_IF_ERROR(writer_->UnlinkAt(root_.get(), temp_, 0).WithFile(path_));
    temp_.clear();
  }
  return file_.release();
}

Result<Overlay::CopyAside> Overlay::NewCopyAside(InodeId lower, std::string_view path,
                                                 bool keep_contents) {
  CopyAside copy;
  copy.root_ = Dup(root_.get());
  copy.path_ = path;
  copy.view_ = lower_;
  copy.env_ = &env_;
  copy.writer_ = &writer_;
  copy.lower_ = lower;
  copy.keep_contents_ = keep_contents;
  copy.can_chown_ = can_chown_;
  UCFS_ASSIGN_OR_RETURN(Attr attr, lower_->GetAttr(lower));
  if (!attr.is_symlink) {
    // Open for reading too: TakeUnnamed's file serves reads.
    auto nameless = writer_.OpenAt(root_.get(), ".", O_TMPFILE | O_RDWR, 0600);
    if (nameless.ok()) {
      copy.file_ = std::move(nameless).value();
      return copy;
    }
  }
  // A link, or a file system without O_TMPFILE: a temporary name in the
  // root, whose times Install puts back if nothing else moved them.
  const std::string temp = std::string(kCopyUpPrefix) + std::to_string(++copy_ups_);
  writer_.UnlinkAt(root_.get(), temp, 0);  // a stale one, if any
  ::fstat(root_.get(), &copy.root_before_);
  if (attr.is_symlink) {
    UCFS_ASSIGN_OR_RETURN(std::string target, lower_->ReadLink(lower));
    UCFS_RETURN_IF_ERROR(CopyUpFailure(writer_.SymlinkAt(target, root_.get(), temp), path));
  } else {
    auto file = writer_.OpenAt(root_.get(), temp, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (!file.ok()) return CopyUpFailure(file.status(), path);
    copy.file_ = std::move(file).value();
  }
  copy.temp_ = temp;  // made: the CopyAside removes it unless installed
  ::fstat(root_.get(), &copy.root_after_);
  return copy;
}

Status Overlay::CopyUp(int dir, std::string_view name, std::string_view path, InodeId lower,
                       bool keep_contents) {
  UCFS_ASSIGN_OR_RETURN(CopyAside copy, NewCopyAside(lower, path, keep_contents));
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
    UCFS_RETURN_IF_ERROR(
        CopyUpFailure(writer_.LinkAt(AT_FDCWD, self, dir, to, AT_SYMLINK_FOLLOW), copy.path_));
  } else {
    UCFS_RETURN_IF_ERROR(
        CopyUpFailure(writer_.RenameAt(copy.root_.get(), copy.temp_, dir, to, 0), copy.path_));
    copy.temp_.clear();  // installed: nothing to remove
  }
  if (stated) RestoreTimes(writer_, dir, parent);
  if (root_kept) RestoreTimes(writer_, copy.root_.get(), copy.root_before_);
  return Status::OK();
}

Result<std::optional<Overlay::CopyAside>> Overlay::PrepareCopyAside(std::string_view path,
                                                                    bool keep_contents) {
  if (IsReadOnly(path)) return std::optional<CopyAside>();
  auto r = Resolve(path);
  if (!r.ok() || r->entry.in_upper || r->entry.is_dir) return std::optional<CopyAside>();
  UCFS_ASSIGN_OR_RETURN(CopyAside copy, NewCopyAside(r->entry.lower, path, keep_contents));
  return std::optional<CopyAside>(std::move(copy));
}

Result<Overlay::CopyAside> Overlay::CopyAsideOf(InodeId lower) {
  UCFS_ASSIGN_OR_RETURN(Attr attr, lower_->GetAttr(lower));
  if (attr.is_dir || attr.is_symlink) return Fail(EINVAL, "", "not a regular file of the view");
  return NewCopyAside(lower, "a removed view file (inode " + std::to_string(lower) + ")", true);
}

Status Overlay::Adopt(std::string_view path, CopyAside copy) {
  return AdoptAt(path, std::move(copy)).status();
}

Result<UniqueFd> Overlay::AdoptAndOpen(std::string_view path, CopyAside copy, int flags) {
  UCFS_ASSIGN_OR_RETURN(UpperRef ref, AdoptAt(path, std::move(copy)));
  if (!ref.dir) return UniqueFd();
  return OpenUpper(ref, path, flags);
}

Result<Overlay::UpperRef> Overlay::AdoptAt(std::string_view path, CopyAside copy) {
  if (!copy.written_ || IsReadOnly(path)) return UpperRef{};
  auto r = Resolve(path);
  if (!r.ok() || r->entry.in_upper || r->entry.is_dir || r->entry.lower != copy.lower_) {
    return UpperRef{};  // changed meanwhile: the copy is dropped
  }
  auto dir = ParentOf(*r, path);
  if (!dir.ok()) return CopyUpFailure(dir.status(), path);
  UpperRef installed{std::move(dir).value(), StoredName(SplitLast(path).second)};
  UCFS_RETURN_IF_ERROR(Install(installed.dir.get(), installed.name, std::move(copy)));
  return installed;
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
  auto dir = ParentOf(r, path);
  if (!dir.ok()) return CopyUpFailure(dir.status(), path);
  UCFS_RETURN_IF_ERROR(CopyUp(dir->get(), StoredName(name), path, r.entry.lower, keep_contents));
  return UpperRef{std::move(dir).value(), StoredName(name)};
}

}  // namespace ucfs
