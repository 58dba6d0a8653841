// The writable mount's operation table: each operation is a call into
// OverlayFs and its answer translated. Upper files are served by their own
// fds (reads spliced out of them, writes spliced into them); view files by
// the view's pieces, as in the read-only mount.
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <memory>

#include "fuse/server.h"

namespace ucfs::fuse {
namespace {

using Handle = OverlayFs::Handle;

Handle* HandleOf(const fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }

// One fd-backed buffer at `pos` (FUSE_BUFVEC_INIT is a C compound literal).
fuse_bufvec FdBuffer(int fd, off_t pos, size_t size) {
  fuse_bufvec v{};
  v.count = 1;
  v.buf[0].size = size;
  v.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  v.buf[0].fd = fd;
  v.buf[0].pos = pos;
  return v;
}

fuse_entry_param EntryOf(const Server& s, const struct stat& st) {
  fuse_entry_param e{};
  e.ino = st.st_ino;
  e.generation = 1;
  e.attr = st;
  e.attr_timeout = s.timeout;
  e.entry_timeout = s.timeout;
  return e;
}

void ReplyEntry(fuse_req_t req, const Server& s, const struct stat& st) {
  const fuse_entry_param e = EntryOf(s, st);
  fuse_reply_entry(req, &e);
}

void ReplyStatus(fuse_req_t req, const Status& st) {
  fuse_reply_err(req, st.ok() ? 0 : ErrnoOf(st));
}

void ReplyEntryOrError(fuse_req_t req, const Server& s, const Result<struct stat>& st) {
  if (!st.ok()) {
    fuse_reply_err(req, ErrnoOf(st.status()));
    return;
  }
  ReplyEntry(req, s, *st);
}

// Who asks: new entries are theirs, with their umask (FUSE_CAP_DONT_MASK:
// the kernel leaves it to us, so it is applied once).
OverlayFs::Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  OverlayFs::Caller c;
  c.uid = ctx->uid;
  c.gid = ctx->gid;
  c.umask = ctx->umask;
  return c;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  RaiseReadaheadOnce(s);
  auto st = s.overlay->Lookup(parent, name);
  if (!st.ok()) {
    // Negative entries are cached too; every change comes through here.
    ReplyLookupError(req, s, st.status());
    return;
  }
  ReplyEntry(req, s, *st);
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Of(req).overlay->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Of(req).overlay->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);
  RaiseReadaheadOnce(s);
  const int fd = fi != nullptr && HandleOf(fi) != nullptr ? HandleOf(fi)->fd : -1;
  auto st = s.overlay->GetAttr(ino, fd);
  if (!st.ok()) {
    fuse_reply_err(req, ErrnoOf(st.status()));
    return;
  }
  fuse_reply_attr(req, &*st, s.timeout);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
             struct fuse_file_info* fi) {
  Server& s = Of(req);
  OverlayFs::SetAttrRequest r;
  if (to_set & FUSE_SET_ATTR_MODE) r.mode = attr->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) r.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) r.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) r.size = static_cast<uint64_t>(attr->st_size);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    r.atime = timespec{0, UTIME_NOW};
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    r.atime = attr->st_atim;
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    r.mtime = timespec{0, UTIME_NOW};
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    r.mtime = attr->st_mtim;
  }
  const int fd = fi != nullptr && HandleOf(fi) != nullptr ? HandleOf(fi)->fd : -1;
  auto st = s.overlay->SetAttr(ino, r, fd);
  if (!st.ok()) {
    fuse_reply_err(req, ErrnoOf(st.status()));
    return;
  }
  fuse_reply_attr(req, &*st, s.timeout);
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  auto entries = Of(req).overlay->ReadDir(ino);
  if (!entries.ok()) {
    fuse_reply_err(req, ErrnoOf(entries.status()));
    return;
  }
  auto handle = std::make_unique<DirHandle>();
  handle->entries = std::move(*entries);
  fi->fh = reinterpret_cast<uint64_t>(handle.release());
  fuse_reply_open(req, fi);
}

// Whether an open upper file's handle bypasses the mount's page cache
// (ServeOptions::direct_writes): write-only handles, but not of a set-id
// file, whose bits the kernel clears on a buffered write by someone without
// CAP_FSETID (through SETATTR) but not on a direct one.
bool DirectWrites(const Server& s, const fuse_file_info* fi, int fd) {
  if (!s.options.direct_writes || (fi->flags & O_ACCMODE) != O_WRONLY || fd < 0) return false;
  struct stat st {};
  return ::fstat(fd, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)) == 0;
}

// A view file's pages may stay cached across opens while it is the same
// view file (OverlayFs::Handle::keep_cache); upper files are read fresh at
// each open, in case DIR was touched directly.
void ReplyOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi,
               std::unique_ptr<Handle> handle) {
  fi->keep_cache = handle->fd < 0 && handle->keep_cache ? 1 : 0;
  fi->direct_io = DirectWrites(Of(req), fi, handle->fd) ? 1 : 0;
  fi->fh = reinterpret_cast<uint64_t>(handle.release());
  if (fuse_reply_open(req, fi) != 0) {
    // The opener was interrupted: nobody will release this handle.
    Handle* h = HandleOf(fi);
    Of(req).overlay->Release(ino, *h);
    delete h;
  }
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  auto handle = Of(req).overlay->Open(ino, fi->flags);
  if (!handle.ok()) {
    fuse_reply_err(req, ErrnoOf(handle.status()));
    return;
  }
  ReplyOpen(req, ino, fi, std::make_unique<Handle>(*handle));
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
            struct fuse_file_info* fi) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  auto made = s.overlay->Create(parent, name, fi->flags, mode, &caller);
  if (!made.ok()) {
    fuse_reply_err(req, ErrnoOf(made.status()));
    return;
  }
  auto& [st, handle] = *made;
  const fuse_entry_param e = EntryOf(s, st);
  auto* h = new Handle(handle);
  fi->fh = reinterpret_cast<uint64_t>(h);
  fi->direct_io = DirectWrites(s, fi, h->fd) ? 1 : 0;
  if (fuse_reply_create(req, &e, fi) != 0) {
    s.overlay->Release(st.st_ino, *h);
    delete h;
  }
}

void Read(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, struct fuse_file_info* fi) {
  Server& s = Of(req);
  const Handle& h = *HandleOf(fi);
  if (h.fd < 0) {
    ReplyViewRead(req, s, h.view_inode, size, offset);
    return;
  }
  fuse_bufvec buf = FdBuffer(h.fd, offset, size);
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void WriteBuf(fuse_req_t req, fuse_ino_t, struct fuse_bufvec* in, off_t offset,
              struct fuse_file_info* fi) {
  const Handle& h = *HandleOf(fi);
  if (h.fd < 0) {
    fuse_reply_err(req, EBADF);
    return;
  }
  fuse_bufvec out = FdBuffer(h.fd, offset, fuse_buf_size(in));
  const ssize_t written = fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
  if (written < 0) {
    fuse_reply_err(req, static_cast<int>(-written));
  } else {
    fuse_reply_write(req, static_cast<size_t>(written));
  }
}

void Flush(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  // close(2) of the opener's fd: report what closing ours would (as NFS
  // and passthrough_ll do), without giving ours up.
  const Handle& h = *HandleOf(fi);
  int err = 0;
  if (h.fd >= 0) {
    const int dup = ::dup(h.fd);
    err = dup < 0 || ::close(dup) != 0 ? errno : 0;
  }
  fuse_reply_err(req, err);
}

void Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Handle* h = HandleOf(fi);
  Of(req).overlay->Release(ino, *h);
  delete h;
  fuse_reply_err(req, 0);
}

void Fsync(fuse_req_t req, fuse_ino_t, int datasync, struct fuse_file_info* fi) {
  const Handle& h = *HandleOf(fi);
  int err = 0;
  if (h.fd >= 0 && (datasync ? ::fdatasync(h.fd) : ::fsync(h.fd)) != 0) err = errno;
  fuse_reply_err(req, err);
}

void FsyncDir(fuse_req_t req, fuse_ino_t, int, struct fuse_file_info*) {
  // Directory changes are made by rename/mkdir/unlink in the upper
  // directory; syncing its file system covers them.
  const int fd = ::open(Of(req).overlay->upper_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = 0;
  if (fd < 0 || ::syncfs(fd) != 0) err = errno;
  if (fd >= 0) ::close(fd);
  fuse_reply_err(req, err);
}

void Fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length,
               struct fuse_file_info* fi) {
  const Handle& h = *HandleOf(fi);
  if (h.fd < 0) {
    fuse_reply_err(req, EBADF);
    return;
  }
  fuse_reply_err(req, ::fallocate(h.fd, mode, offset, length) == 0 ? 0 : errno);
}

void MakeDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.overlay->MakeDir(parent, name, mode, &caller));
}

void MakeNode(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.overlay->MakeNode(parent, name, mode, rdev, &caller));
}

void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.overlay->Symlink(target, parent, name, &caller));
}

void ReadLink(fuse_req_t req, fuse_ino_t ino) {
  auto target = Of(req).overlay->ReadLink(ino);
  if (!target.ok()) {
    fuse_reply_err(req, ErrnoOf(target.status()));
    return;
  }
  fuse_reply_readlink(req, target->c_str());
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) {
  Server& s = Of(req);
  ReplyEntryOrError(req, s, s.overlay->Link(ino, new_parent, new_name));
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyStatus(req, Of(req).overlay->Unlink(parent, name));
}

void RemoveDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyStatus(req, Of(req).overlay->RemoveDir(parent, name));
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
            const char* new_name, unsigned int flags) {
  ReplyStatus(req, Of(req).overlay->Rename(parent, name, new_parent, new_name, flags));
}

void ReplyXattrValue(fuse_req_t req, const Result<std::string>& value, size_t size) {
  if (!value.ok()) {
    fuse_reply_err(req, ErrnoOf(value.status()));
  } else if (size == 0) {
    fuse_reply_xattr(req, value->size());
  } else if (size < value->size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value->data(), value->size());
  }
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  ReplyXattrValue(req, Of(req).overlay->GetXattr(ino, name), size);
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  ReplyXattrValue(req, Of(req).overlay->ListXattr(ino), size);
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
              int flags) {
  ReplyStatus(req, Of(req).overlay->SetXattr(ino, name, std::string_view(value, size), flags));
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  ReplyStatus(req, Of(req).overlay->RemoveXattr(ino, name));
}

}  // namespace

fuse_lowlevel_ops WritableOperations() {
  fuse_lowlevel_ops ops{};
  ops.init = InitConnection;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.forget_multi = ForgetMulti;
  ops.getattr = GetAttr;
  ops.setattr = SetAttr;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.releasedir = ReleaseDir;
  ops.fsyncdir = FsyncDir;
  ops.open = Open;
  ops.create = Create;
  ops.read = Read;
  ops.write_buf = WriteBuf;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.fallocate = Fallocate;
  ops.mkdir = MakeDir;
  ops.mknod = MakeNode;
  ops.symlink = Symlink;
  ops.readlink = ReadLink;
  ops.link = Link;
  ops.unlink = Unlink;
  ops.rmdir = RemoveDir;
  ops.rename = Rename;
  ops.statfs = StatFs;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.setxattr = SetXattr;
  ops.removexattr = RemoveXattr;
  return ops;
}

}  // namespace ucfs::fuse
