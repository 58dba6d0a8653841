// The writable mount's operation table: each operation is a call into
// OverlayFs and its answer translated. Upper files are served by their own
// fds (reads spliced out of them, writes spliced into them); view files by
// the view's pieces, as in the read-only mount.
#include <fcntl.h>
#include <linux/capability.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

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

// The caller's supplementary groups and CAP_FSETID, which a request does
// not carry: from /proc/<pid>/status (the request's pid is the calling
// thread's, whose credentials these are). A caller gone meanwhile is taken
// to have none, and CAP_FSETID as uid 0 only.
Overlay::Credentials CredentialsOf(pid_t pid, uid_t uid) {
  Overlay::Credentials c;
  c.fsetid = uid == 0;
  if (pid <= 0) return c;
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "re");
  if (f == nullptr) return c;
  char* line = nullptr;
  size_t cap = 0;
  while (::getline(&line, &cap, f) > 0) {
    if (std::strncmp(line, "Groups:", 7) == 0) {
      char* at = line + 7;
      for (;;) {
        char* end = nullptr;
        const unsigned long g = std::strtoul(at, &end, 10);
        if (end == at) break;
        c.groups.push_back(static_cast<gid_t>(g));
        at = end;
      }
    } else if (std::strncmp(line, "CapEff:", 7) == 0) {
      const unsigned long long caps = std::strtoull(line + 7, nullptr, 16);
      c.fsetid = ((caps >> CAP_FSETID) & 1) != 0;
    }
  }
  std::free(line);
  std::fclose(f);
  return c;
}

// Who asks: new entries are theirs, with their umask (FUSE_CAP_DONT_MASK:
// the kernel leaves it to us, so it is applied once); what their writes and
// truncations keep of set-id bits is theirs to decide, by credentials read
// only when a set-id bit is at stake.
OverlayFs::Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  OverlayFs::Caller c;
  c.uid = ctx->uid;
  c.gid = ctx->gid;
  c.umask = ctx->umask;
  c.credentials = [pid = ctx->pid, uid = ctx->uid] { return CredentialsOf(pid, uid); };
  return c;
}

// The kernel caches attributes for the mount's timeout: those an operation
// changed behind it (OverlayFs::TakeChangedBehind) it is told to drop.
void TellKernel(Server& s) {
  for (InodeId inode : s.overlay->TakeChangedBehind()) {
    if (s.session != nullptr) fuse_lowlevel_notify_inval_inode(s.session, inode, -1, 0);
  }
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  RaiseReadaheadOnce(s);
  auto st = s.overlay->Lookup(parent, name);
  if (!st.ok()) {
    // Negative entries are cached too, as every change comes through here
    // but the views of a tag saved through the mount: a name one may add
    // would otherwise stay missing in the kernel for the timeout after it
    // is listed (HF Trainer looks model.safetensors up before it saves).
    ReplyLookupError(req, st.status(), s.overlay->MightAppear(name) ? 0.0 : s.timeout);
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
  const int fd = fi != nullptr && HandleOf(fi) != nullptr ? HandleOf(fi)->ReadFd() : -1;
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
  const OverlayFs::Caller caller = CallerOf(req);
  auto st = s.overlay->SetAttr(ino, r, fd, &caller);
  if (!st.ok()) {
    fuse_reply_err(req, ErrnoOf(st.status()));
  } else {
    fuse_reply_attr(req, &*st, s.timeout);
  }
  TellKernel(s);
}

// The listing is taken at the first READDIR (and again at a rewind), not at
// OPENDIR: reading a directory moves its atime, opening it does not.
void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  auto attr = Of(req).overlay->GetAttr(ino);
  if (!attr.ok()) {
    fuse_reply_err(req, ErrnoOf(attr.status()));
    return;
  }
  if (!S_ISDIR(attr->st_mode)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  Server& s = Of(req);
  fi->fh = Keep(s, std::make_unique<DirHandle>());
  if (fuse_reply_open(req, fi) != 0) GiveBackDir(s, fi->fh);
}

void ReadDirListed(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                   struct fuse_file_info* fi) {
  auto& dir = *reinterpret_cast<DirHandle*>(fi->fh);
  if (offset == 0 || !dir.listed) {
    auto entries = Of(req).overlay->ReadDir(ino);
    if (!entries.ok()) {
      fuse_reply_err(req, ErrnoOf(entries.status()));
      return;
    }
    dir.entries = std::move(*entries);
    dir.listed = true;
  }
  ReadDir(req, ino, size, offset, fi);
}

// Whether an open upper file's handle bypasses the mount's page cache
// (ServeOptions::direct_writes): write-only handles, but not of a set-id
// file. The kernel clears a set-id file's bits on a buffered write by
// someone without CAP_FSETID (through a SETATTR, whose reply updates the
// mode it caches), not on a direct one: WriteBuf clears what it leaves, on
// a file made set-id after a direct open too, and has the kernel drop what
// it cached.
bool WritesDirect(const Server& s, const fuse_file_info* fi, int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 &&
         fuse::DirectWrites(s.options.direct_writes, fi->flags, st.st_mode);
}

// A view file's pages may stay cached across opens while it is the same
// view file (OverlayFs::Handle::keep_cache); upper files are read fresh at
// each open, in case DIR was touched directly.
void ReplyOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi,
               std::unique_ptr<Handle> handle) {
  Server& s = Of(req);  // req is gone once replied to, even when that fails
  fi->keep_cache = handle->fd < 0 && handle->keep_cache ? 1 : 0;
  fi->direct_io = WritesDirect(s, fi, handle->fd) ? 1 : 0;
  fi->fh = Keep(s, std::move(handle));
  if (fuse_reply_open(req, fi) != 0) {
    // The opener was interrupted: nobody will release this handle.
    s.overlay->Release(ino, *GiveBack(s, fi->fh));
  }
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  auto handle = s.overlay->Open(ino, fi->flags, &caller);
  if (!handle.ok()) {
    fuse_reply_err(req, ErrnoOf(handle.status()));
  } else {
    ReplyOpen(req, ino, fi, std::make_unique<Handle>(*handle));
  }
  TellKernel(s);
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
            struct fuse_file_info* fi) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  auto made = s.overlay->Create(parent, name, fi->flags, mode, &caller);
  TellKernel(s);
  if (!made.ok()) {
    fuse_reply_err(req, ErrnoOf(made.status()));
    return;
  }
  auto& [st, handle] = *made;
  const fuse_entry_param e = EntryOf(s, st);
  fi->direct_io = WritesDirect(s, fi, handle.fd) ? 1 : 0;
  fi->fh = Keep(s, std::make_unique<Handle>(handle));
  if (fuse_reply_create(req, &e, fi) != 0) s.overlay->Release(st.st_ino, *GiveBack(s, fi->fh));
}

void Read(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, struct fuse_file_info* fi) {
  Server& s = Of(req);
  const Handle& h = *HandleOf(fi);
  // A view file's handle reads the view until the file is copied up, then
  // the copy (OverlayFs::ViewFile).
  const int fd = h.ReadFd();
  if (fd < 0) {
    ReplyViewRead(req, s, h.view_inode, size, offset);
    return;
  }
  fuse_bufvec buf = FdBuffer(fd, offset, size);
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void WriteBuf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec* in, off_t offset,
              struct fuse_file_info* fi) {
  const Handle& h = *HandleOf(fi);
  if (h.fd < 0) {
    fuse_reply_err(req, EBADF);
    return;
  }
  Server& s = Of(req);  // req is gone once replied to
  // The set-id bits the write clears: FUSE leaves a direct write's, and
  // some of a buffered one's (S_ISGID for a writer outside the file's
  // group), to the file system.
  auto cleared = s.overlay->BeforeWrite(h.fd, CallerOf(req));
  if (!cleared.ok()) {
    fuse_reply_err(req, ErrnoOf(cleared.status()));
    return;
  }
  const bool told = *cleared && s.session != nullptr;
  // The kernel's cached mode is stale: what asks again (stat, permission
  // checks) gets the new one.
  if (told) fuse_lowlevel_notify_inval_inode(s.session, ino, -1, 0);
  const fuse_buf& first = in->buf[0];
  if (in->count == 1 && (first.flags & FUSE_BUF_IS_FD) == 0) {
    // Bytes in memory: written through the overlay (its WriteEnv).
    auto written = s.overlay->Write(ino, h, {static_cast<const char*>(first.mem), first.size},
                                    static_cast<uint64_t>(offset));
    if (written.ok()) {
      fuse_reply_write(req, *written);
    } else {
      fuse_reply_err(req, ErrnoOf(written.status()));
    }
  } else {
    // Bytes the kernel left in a pipe (FUSE_CAP_SPLICE_READ): spliced fd
    // to fd, the one write the overlay's WriteEnv does not see.
    fuse_bufvec out = FdBuffer(h.fd, offset, fuse_buf_size(in));
    const ssize_t written = fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
    if (written < 0) {
      fuse_reply_err(req, static_cast<int>(-written));
    } else {
      fuse_reply_write(req, static_cast<size_t>(written));
    }
  }
  // Some checks read the cached mode without asking (hard-link protection,
  // on the way to a link): the file's names are dropped from the kernel's
  // cache, so that the next path to it is looked up, its attributes with
  // it. Only once replied to: this locks each name's directory, and the
  // writer may hold the file, which an unlink there waits for with the
  // directory held.
  if (told) {
    for (const auto& [parent, name] : s.overlay->NamesOf(ino)) {
      fuse_lowlevel_notify_inval_entry(s.session, parent, name.data(), name.size());
    }
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
  Server& s = Of(req);
  s.overlay->Release(ino, *GiveBack(s, fi->fh));
  fuse_reply_err(req, 0);
}

void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info* fi) {
  const Status synced = Of(req).overlay->Sync(ino, *HandleOf(fi), datasync != 0);
  fuse_reply_err(req, synced.ok() ? 0 : ErrnoOf(synced));
}

void FsyncDir(fuse_req_t req, fuse_ino_t, int, struct fuse_file_info*) {
  // Directory changes are made by rename/mkdir/unlink in the upper
  // directory; syncing its file system covers them.
  const UniqueFd fd(
      ::open(Of(req).overlay->upper_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  fuse_reply_err(req, !fd || ::syncfs(fd.get()) != 0 ? errno : 0);
}

void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
               struct fuse_file_info* fi) {
  const Status allocated = Of(req).overlay->Allocate(
      ino, *HandleOf(fi), mode, static_cast<uint64_t>(offset), static_cast<uint64_t>(length));
  fuse_reply_err(req, allocated.ok() ? 0 : ErrnoOf(allocated));
}

void MakeDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.overlay->MakeDir(parent, name, mode, &caller));
  TellKernel(s);
}

void MakeNode(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.overlay->MakeNode(parent, name, mode, rdev, &caller));
  TellKernel(s);
}

void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  const OverlayFs::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.overlay->Symlink(target, parent, name, &caller));
  TellKernel(s);
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
  TellKernel(s);
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.overlay->Unlink(parent, name));
  TellKernel(s);
}

void RemoveDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.overlay->RemoveDir(parent, name));
  TellKernel(s);
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
            const char* new_name, unsigned int flags) {
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.overlay->Rename(parent, name, new_parent, new_name, flags));
  TellKernel(s);
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
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.overlay->SetXattr(ino, name, std::string_view(value, size), flags));
  TellKernel(s);
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
  ops.readdir = ReadDirListed;
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
