// The operation table: each operation is a call into the mount's
// FileSystem (ReadOnlyFs or OverlayFs) and its answer translated. Files
// with a real file behind them (the upper directory's) are served by its
// fd (reads spliced out of it, writes spliced into it); view files by the
// view's pieces (read_reply.cc).
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

// The handle of an open file; empty where the kernel opened nothing
// (Server::no_open, or a getattr or setattr without a file).
const Handle& HandleOf(const fuse_file_info* fi) {
  static const Handle* const kNone = new Handle();
  return fi != nullptr && fi->fh != 0 ? *reinterpret_cast<const Handle*>(fi->fh) : *kNone;
}

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

// Answers a failed lookup: "no such entry" as a negative entry the kernel
// may cache for `negative_timeout` seconds, anything else as its errno.
void ReplyLookupError(fuse_req_t req, const Status& status, double negative_timeout) {
  if (ErrnoOf(status) == ENOENT) {
    fuse_entry_param e{};
    e.entry_timeout = negative_timeout;
    fuse_reply_entry(req, &e);
    return;
  }
  fuse_reply_err(req, ErrnoOf(status));
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
FileSystem::Credentials CredentialsOf(pid_t pid, uid_t uid) {
  FileSystem::Credentials c;
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
FileSystem::Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  FileSystem::Caller c;
  c.uid = ctx->uid;
  c.gid = ctx->gid;
  c.umask = ctx->umask;
  c.credentials = [pid = ctx->pid, uid = ctx->uid] { return CredentialsOf(pid, uid); };
  return c;
}

// The kernel caches attributes for the mount's timeout: those an operation
// changed behind it (FileSystem::TakeChangedBehind) it is told to drop.
void TellKernel(Server& s) {
  for (InodeId inode : s.fs->TakeChangedBehind()) {
    if (s.session != nullptr) fuse_lowlevel_notify_inval_inode(s.session, inode, -1, 0);
  }
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  RaiseReadaheadOnce(s);
  auto st = s.fs->Lookup(parent, name);
  if (!st.ok()) {
    // A negative entry is cached too, as every change comes through here
    // (and a read-only tree never changes) but the views of a tag saved
    // through a writable mount: a name one may add would otherwise stay
    // missing in the kernel for the timeout after it is listed (HF Trainer
    // looks model.safetensors up before it saves).
    ReplyLookupError(req, st.status(), s.fs->MightAppear(name) ? 0.0 : s.timeout);
    return;
  }
  ReplyEntry(req, s, *st);
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Of(req).fs->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Of(req).fs->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);
  RaiseReadaheadOnce(s);
  auto st = s.fs->GetAttr(ino, HandleOf(fi).ReadFd());
  if (!st.ok()) {
    fuse_reply_err(req, ErrnoOf(st.status()));
    return;
  }
  fuse_reply_attr(req, &*st, s.timeout);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
             struct fuse_file_info* fi) {
  Server& s = Of(req);
  FileSystem::SetAttrRequest r;
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
  const FileSystem::Caller caller = CallerOf(req);
  auto st = s.fs->SetAttr(ino, r, HandleOf(fi).fd, &caller);
  if (!st.ok()) {
    fuse_reply_err(req, ErrnoOf(st.status()));
  } else {
    fuse_reply_attr(req, &*st, s.timeout);
  }
  TellKernel(s);
}

// A read-only file system's listing is taken now and kept by the kernel
// (cache_readdir); a writable one's at the first READDIR and again at a
// rewind, not here: reading a directory moves its atime, opening it does
// not (FileSystem::read_only).
void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);
  auto dir = std::make_unique<DirHandle>();
  if (s.fs->read_only()) {
    auto entries = s.fs->ReadDir(ino);
    if (!entries.ok()) {
      fuse_reply_err(req, ErrnoOf(entries.status()));
      return;
    }
    dir->entries = std::move(entries).value();
    dir->listed = true;
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
  } else {
    auto attr = s.fs->GetAttr(ino);
    if (!attr.ok()) {
      fuse_reply_err(req, ErrnoOf(attr.status()));
      return;
    }
    if (!S_ISDIR(attr->st_mode)) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
  }
  fi->fh = Keep(s, std::move(dir));
  if (fuse_reply_open(req, fi) != 0) GiveBackDir(s, fi->fh);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info* fi) {
  Server& s = Of(req);
  auto& dir = *reinterpret_cast<DirHandle*>(fi->fh);
  if (!dir.listed || (offset == 0 && !s.fs->read_only())) {
    auto entries = s.fs->ReadDir(ino);
    if (!entries.ok()) {
      fuse_reply_err(req, ErrnoOf(entries.status()));
      return;
    }
    dir.entries = std::move(*entries);
    dir.listed = true;
  }
  std::vector<char> buf(size);
  size_t used = 0;
  // Entry i of the listing is at offset i + 1; "." and ".." come first.
  const size_t total = dir.entries.size() + 2;
  for (size_t i = static_cast<size_t>(offset); i < total; ++i) {
    struct stat st {};
    const char* name;
    if (i < 2) {
      name = i == 0 ? "." : "..";
      st.st_ino = ino;
      st.st_mode = S_IFDIR;
    } else {
      name = dir.entries[i - 2].first.c_str();
      st = dir.entries[i - 2].second;
    }
    const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st,
                                          static_cast<off_t>(i + 1));
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  GiveBackDir(Of(req), fi->fh);
  fuse_reply_err(req, 0);
}

// How the kernel caches the file `handle` opened (CachingOf): a view
// file's pages may stay cached across opens while it is the same view file
// (Handle::keep_cache); a write-only handle of an upper file that is not
// set-id bypasses the page cache (ServeOptions::direct_writes). The kernel
// clears a set-id file's bits on a buffered write by someone without
// CAP_FSETID (through a SETATTR, whose reply updates the mode it caches),
// not on a direct one: WriteBuf clears what it leaves, on a file made
// set-id after a direct open too, and has the kernel drop what it cached.
void SetCaching(const Server& s, const Handle& handle, struct fuse_file_info* fi) {
  std::optional<mode_t> mode;
  struct stat st {};
  if (handle.fd >= 0 && ::fstat(handle.fd, &st) == 0) mode = st.st_mode;
  const OpenCaching c =
      CachingOf(s.options.direct_writes, fi->flags, handle.fd >= 0, mode, handle.keep_cache);
  fi->keep_cache = c.keep_cache ? 1 : 0;
  fi->direct_io = c.direct_io ? 1 : 0;
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);  // req is gone once replied to, even when that fails
  // Zero-message opens (SkipsOpens): the kernel stops sending OPEN and
  // RELEASE for files and keeps their page cache, which is what every file
  // of a read-only mount wants; its `ro` mount already refuses writes.
  if (s.no_open) {
    fuse_reply_err(req, ENOSYS);
    return;
  }
  const FileSystem::Caller caller = CallerOf(req);
  auto handle = s.fs->Open(ino, fi->flags, &caller);
  if (!handle.ok()) {
    fuse_reply_err(req, ErrnoOf(handle.status()));
  } else {
    // Not direct_io for a file mmap must work on (torch.load(mmap=True),
    // zero_to_fp32): only write-only opens (CachingOf).
    SetCaching(s, *handle, fi);
    auto kept = std::make_unique<Handle>(*handle);
    const Handle& h = *kept;
    fi->fh = Keep(s, std::move(kept));
    StartPassthrough(req, s, ino, h, fi);
    if (fuse_reply_open(req, fi) != 0) {
      // The opener was interrupted: nobody will release this handle.
      EndPassthrough(nullptr, s, ino, h);
      s.fs->Release(ino, *GiveBack(s, fi->fh));
    }
  }
  TellKernel(s);
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
            struct fuse_file_info* fi) {
  Server& s = Of(req);
  const FileSystem::Caller caller = CallerOf(req);
  auto made = s.fs->Create(parent, name, fi->flags, mode, &caller);
  TellKernel(s);
  if (!made.ok()) {
    fuse_reply_err(req, ErrnoOf(made.status()));
    return;
  }
  auto& [st, handle] = *made;
  const fuse_entry_param e = EntryOf(s, st);
  SetCaching(s, handle, fi);
  auto kept = std::make_unique<Handle>(handle);
  const Handle& h = *kept;
  fi->fh = Keep(s, std::move(kept));
  StartPassthrough(req, s, st.st_ino, h, fi);
  if (fuse_reply_create(req, &e, fi) != 0) {
    EndPassthrough(nullptr, s, st.st_ino, h);
    s.fs->Release(st.st_ino, *GiveBack(s, fi->fh));
  }
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info* fi) {
  Server& s = Of(req);
  const Handle& h = HandleOf(fi);
  // A view file's handle reads the view until the file is copied up, then
  // the copy (FileSystem::ViewFile).
  const int fd = h.ReadFd();
  if (fd < 0) {
    ReplyViewRead(req, s, s.fs->ViewFileOf(ino, h), size, offset);
    return;
  }
  fuse_bufvec buf = FdBuffer(fd, offset, size);
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void WriteBuf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec* in, off_t offset,
              struct fuse_file_info* fi) {
  Server& s = Of(req);  // req is gone once replied to
  const Handle& handle = HandleOf(fi);
  auto target = s.fs->StartWrite(handle, CallerOf(req));
  if (!target.ok()) {
    fuse_reply_err(req, ErrnoOf(target.status()));
    return;
  }
  const bool told = target->mode_changed && s.session != nullptr;
  // The kernel's cached mode is stale: what asks again (stat, permission
  // checks) gets the new one.
  if (told) fuse_lowlevel_notify_inval_inode(s.session, ino, -1, 0);
  const fuse_buf& first = in->buf[0];
  if (in->count == 1 && (first.flags & FUSE_BUF_IS_FD) == 0) {
    // Bytes in memory: written through the file system (its WriteEnv).
    auto written = s.fs->Write(ino, handle, {static_cast<const char*>(first.mem), first.size},
                               static_cast<uint64_t>(offset));
    if (written.ok()) {
      fuse_reply_write(req, *written);
    } else {
      fuse_reply_err(req, ErrnoOf(written.status()));
    }
  } else {
    // Bytes the kernel left in a pipe (FUSE_CAP_SPLICE_READ): spliced fd
    // to fd, the one write the overlay's WriteEnv does not see.
    fuse_bufvec out = FdBuffer(target->fd, offset, fuse_buf_size(in));
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
    for (const auto& [parent, name] : s.fs->NamesOf(ino)) {
      fuse_lowlevel_notify_inval_entry(s.session, parent, name.data(), name.size());
    }
  }
}

void Flush(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  ReplyStatus(req, Of(req).fs->Flush(HandleOf(fi)));
}

void Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);
  // Nothing to give back where the kernel opened nothing (no_open).
  if (fi->fh != 0) {
    std::unique_ptr<Handle> handle = GiveBack(s, fi->fh);
    EndPassthrough(req, s, ino, *handle);
    s.fs->Release(ino, *handle);
  }
  fuse_reply_err(req, 0);
}

void Fsync(fuse_req_t req, fuse_ino_t, int datasync, struct fuse_file_info* fi) {
  ReplyStatus(req, Of(req).fs->Fsync(HandleOf(fi), datasync != 0));
}

void FsyncDir(fuse_req_t req, fuse_ino_t ino, int, struct fuse_file_info*) {
  ReplyStatus(req, Of(req).fs->FsyncDir(ino));
}

void Fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length,
               struct fuse_file_info* fi) {
  ReplyStatus(req, Of(req).fs->Fallocate(HandleOf(fi), mode, offset, length));
}

void MakeDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Server& s = Of(req);
  const FileSystem::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.fs->MakeDir(parent, name, mode, &caller));
  TellKernel(s);
}

void MakeNode(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Server& s = Of(req);
  const FileSystem::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.fs->MakeNode(parent, name, mode, rdev, &caller));
  TellKernel(s);
}

void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  const FileSystem::Caller caller = CallerOf(req);
  ReplyEntryOrError(req, s, s.fs->Symlink(target, parent, name, &caller));
  TellKernel(s);
}

void ReadLink(fuse_req_t req, fuse_ino_t ino) {
  auto target = Of(req).fs->ReadLink(ino);
  if (!target.ok()) {
    fuse_reply_err(req, ErrnoOf(target.status()));
    return;
  }
  fuse_reply_readlink(req, target->c_str());
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) {
  Server& s = Of(req);
  ReplyEntryOrError(req, s, s.fs->Link(ino, new_parent, new_name));
  TellKernel(s);
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.fs->Unlink(parent, name));
  TellKernel(s);
}

void RemoveDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.fs->RemoveDir(parent, name));
  TellKernel(s);
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
            const char* new_name, unsigned int flags) {
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.fs->Rename(parent, name, new_parent, new_name, flags));
  TellKernel(s);
}

// The space of the file system under the source (read-only) or the upper
// directory (writable), as df shows it for a read-only NFS mount: a
// read-only mount reported full looks like a problem to whoever runs df.
void StatFs(fuse_req_t req, fuse_ino_t) {
  const struct statvfs sv = Of(req).fs->StatFs();
  fuse_reply_statfs(req, &sv);
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
  ReplyXattrValue(req, Of(req).fs->GetXattr(ino, name), size);
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  ReplyXattrValue(req, Of(req).fs->ListXattr(ino), size);
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
              int flags) {
  Server& s = Of(req);  // req is gone once replied to
  ReplyStatus(req, s.fs->SetXattr(ino, name, std::string_view(value, size), flags));
  TellKernel(s);
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  ReplyStatus(req, Of(req).fs->RemoveXattr(ino, name));
}

}  // namespace

fuse_lowlevel_ops Operations() {
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
