#include "ucfs/vfs/read_only_fs.h"

#include <cerrno>
#include <climits>  // NAME_MAX: not through <string> with every libstdc++

namespace ucfs {
namespace {

// The errno a View error answers with: the View says NotFound for a
// missing name or inode and InvalidArgument for the wrong kind of node.
Status AsPosix(const Status& s, int wrong_kind) {
  if (s.ok() || s.posix_errno() != 0) return s;
  switch (s.code()) {
    case Status::Code::kNotFound:
      return Status::Posix(ENOENT, s.message());
    case Status::Code::kInvalidArgument:
      return Status::Posix(wrong_kind, s.message());
    default:
      return Status::Posix(EIO, s.message());
  }
}

}  // namespace

struct stat StatOfAttr(const Attr& a) {
  struct stat st {};
  st.st_ino = a.inode;
  // A link's permission bits mean nothing; ls shows them all set.
  st.st_mode = a.is_symlink ? S_IFLNK | 0777 : (a.is_dir ? S_IFDIR : S_IFREG) | a.mode;
  st.st_nlink = a.is_dir ? 2 : 1;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  // What cat and cp size their buffers by: 128 KiB keeps the buffer in cache
  // while they copy from the page cache (1 MiB measured 25% slower).
  st.st_blksize = 128 << 10;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_mtim = TimespecOf(a.mtime_ns);
  st.st_atim = st.st_mtim;
  st.st_ctim = st.st_mtim;
  return st;
}

Result<struct stat> ReadOnlyFs::Lookup(InodeId parent, std::string_view name) {
  if (name.size() > NAME_MAX) return Status::Posix(ENAMETOOLONG, "name longer than NAME_MAX");
  auto dir = view_->GetAttr(parent);
  if (!dir.ok()) return AsPosix(dir.status(), ENOTDIR);
  if (!dir->is_dir) return Status::Posix(ENOTDIR, "not a directory");
  auto inode = view_->Lookup(parent, name);
  if (!inode.ok()) return AsPosix(inode.status(), ENOTDIR);
  return GetAttr(*inode);
}

Result<struct stat> ReadOnlyFs::GetAttr(InodeId inode, int) {
  auto attr = view_->GetAttr(inode);
  if (!attr.ok()) return AsPosix(attr.status(), EINVAL);
  return StatOfAttr(*attr);
}

Result<FileSystem::DirEntries> ReadOnlyFs::ReadDir(InodeId dir) {
  auto entries = view_->ReadDir(dir);
  if (!entries.ok()) return AsPosix(entries.status(), ENOTDIR);
  DirEntries out;
  out.reserve(entries->size());
  for (const auto& [name, attr] : *entries) out.emplace_back(name, StatOfAttr(attr));
  return out;
}

Result<FileSystem::Handle> ReadOnlyFs::Open(InodeId inode, int flags, const Caller*) {
  auto attr = view_->GetAttr(inode);
  if (!attr.ok()) return AsPosix(attr.status(), EINVAL);
  if (attr->is_dir) return Status::Posix(EISDIR, "is a directory");
  // The kernel follows links itself; only O_NOFOLLOW opens could name one.
  if (attr->is_symlink) return Status::Posix(ELOOP, "a symbolic link");
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)) != 0) return Refused();
  Handle handle;
  handle.view_inode = inode;
  // Files never change while mounted: their pages may stay cached.
  handle.keep_cache = true;
  return handle;
}

std::optional<FileSystem::WholeFile> ReadOnlyFs::WholeFileOf(InodeId inode, const Handle&) {
  auto source = view_->WholeSource(inode);
  if (!source.ok() || !*source) return std::nullopt;
  WholeFile whole;
  whole.source = **source;
  return whole;
}

Result<std::string> ReadOnlyFs::ReadLink(InodeId inode) {
  auto target = view_->ReadLink(inode);
  if (!target.ok()) return AsPosix(target.status(), EINVAL);
  return target;
}

Result<std::string> ReadOnlyFs::GetXattr(InodeId inode, const std::string& name) {
  auto xattrs = view_->Xattrs(inode);
  if (!xattrs.ok()) return AsPosix(xattrs.status(), EINVAL);
  return XattrValue(*xattrs, name);
}

Result<std::string> ReadOnlyFs::ListXattr(InodeId inode) {
  auto xattrs = view_->Xattrs(inode);
  if (!xattrs.ok()) return AsPosix(xattrs.status(), EINVAL);
  return XattrNames(*xattrs);
}

}  // namespace ucfs
