// The read-only operation table, what both tables share, and Serve.
#include "fuse/fuse_server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "fuse/server.h"

namespace ucfs::fuse {
namespace {

// Zeros for padding pieces: a read is at most max_pages (1 MiB), so one
// static page run covers any piece.
constexpr size_t kZeroBytes = size_t{4} << 20;
const char* Zeros() {
  static const std::vector<char>* zeros = new std::vector<char>(kZeroBytes, 0);
  return zeros->data();
}

// The kernel gives a FUSE mount 128 KiB of readahead, so reads arrive in
// 128 KiB requests. Root may raise it (the kernel caps requests at
// max_pages, 1 MiB): fewer, larger requests for the big sequential reads
// of tensor files. Best effort. The device comes from mountinfo: a stat of
// the mountpoint would wait for this very process to answer it.
void RaiseReadahead(const std::string& mountpoint) {
  FILE* info = std::fopen("/proc/self/mountinfo", "r");
  if (info == nullptr) return;
  char line[4096];
  std::string device;
  while (std::fgets(line, sizeof line, info) != nullptr) {
    char dev[64], point[4000];
    // "36 25 0:52 / /mnt/run7 rw,... - fuse.ucfs ucfs rw,..."
    if (std::sscanf(line, "%*s %*s %63s %*s %3999s", dev, point) == 2 && mountpoint == point) {
      device = dev;
    }
  }
  std::fclose(info);
  if (device.empty()) return;
  FILE* f = std::fopen(("/sys/class/bdi/" + device + "/read_ahead_kb").c_str(), "w");
  if (f == nullptr) return;
  std::fputs("16384", f);
  std::fclose(f);
}

}  // namespace

Server::~Server() {
  MutexLock lock(handles_mu);
  for (OverlayFs::Handle* h : handles) delete h;  // their fds close with the OverlayFs
  for (DirHandle* d : dir_handles) delete d;
}

uint64_t Keep(Server& s, std::unique_ptr<OverlayFs::Handle> handle) {
  MutexLock lock(s.handles_mu);
  s.handles.insert(handle.get());
  return reinterpret_cast<uint64_t>(handle.release());
}

uint64_t Keep(Server& s, std::unique_ptr<DirHandle> handle) {
  MutexLock lock(s.handles_mu);
  s.dir_handles.insert(handle.get());
  return reinterpret_cast<uint64_t>(handle.release());
}

std::unique_ptr<OverlayFs::Handle> GiveBack(Server& s, uint64_t fh) {
  auto* h = reinterpret_cast<OverlayFs::Handle*>(fh);
  MutexLock lock(s.handles_mu);
  s.handles.erase(h);
  return std::unique_ptr<OverlayFs::Handle>(h);
}

std::unique_ptr<DirHandle> GiveBackDir(Server& s, uint64_t fh) {
  auto* d = reinterpret_cast<DirHandle*>(fh);
  MutexLock lock(s.handles_mu);
  s.dir_handles.erase(d);
  return std::unique_ptr<DirHandle>(d);
}

int SourceFd(Server& s, uint32_t index) {
  auto file = s.sources.Get(index);
  if (!file.ok()) return -ErrnoOf(file.status());
  return (*file)->fd() >= 0 ? (*file)->fd() : -EIO;
}

namespace {

void Prefetch(Server& s, InodeId ino, uint64_t offset, uint64_t length) {
  if (!s.options.prefetch) return;
  std::vector<ReadPiece> pieces;
  if (!s.view->Plan(ino, offset, length, &pieces).ok()) return;
  for (const ReadPiece& p : pieces) {
    if (p.kind != ReadPiece::Kind::kSource) continue;
    const int fd = SourceFd(s, p.source);
    if (fd >= 0) {
      ::posix_fadvise(fd, static_cast<off_t>(p.offset), static_cast<off_t>(p.length),
                      POSIX_FADV_WILLNEED);
    }
  }
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  RaiseReadaheadOnce(s);
  auto st = s.read_only.Lookup(parent, name);
  if (!st.ok()) {
    // A negative entry is cacheable too: the tree does not change.
    ReplyLookupError(req, st.status(), s.timeout);
    return;
  }
  fuse_entry_param e{};
  e.ino = st->st_ino;
  e.generation = 1;
  e.attr = *st;
  e.attr_timeout = s.timeout;
  e.entry_timeout = s.timeout;
  fuse_reply_entry(req, &e);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  Server& s = Of(req);
  RaiseReadaheadOnce(s);
  auto st = s.read_only.GetAttr(ino);
  if (!st.ok()) {
    fuse_reply_err(req, ErrnoOf(st.status()));
    return;
  }
  fuse_reply_attr(req, &*st, s.timeout);
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  auto entries = Of(req).read_only.ReadDir(ino);
  if (!entries.ok()) {
    fuse_reply_err(req, ErrnoOf(entries.status()));
    return;
  }
  Server& s = Of(req);
  auto handle = std::make_unique<DirHandle>();
  handle->entries = std::move(entries).value();
  fi->fh = Keep(s, std::move(handle));
  fi->cache_readdir = 1;
  fi->keep_cache = 1;
  if (fuse_reply_open(req, fi) != 0) GiveBackDir(s, fi->fh);
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);
  // Zero-message opens: with ENOSYS the kernel stops sending OPEN and
  // RELEASE for files and keeps their page cache (FOPEN_KEEP_CACHE), which
  // is what every file here wants; the `ro` mount already refuses writes.
  if (s.no_open) {
    fuse_reply_err(req, ENOSYS);
    return;
  }
  Status allowed = s.read_only.Open(ino, fi->flags);
  if (!allowed.ok()) {
    fuse_reply_err(req, ErrnoOf(allowed));
    return;
  }
  // Not direct_io: mmap must work (torch.load(mmap=True), zero_to_fp32).
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void ReadLink(fuse_req_t req, fuse_ino_t ino) {
  auto target = Of(req).read_only.ReadLink(ino);
  if (!target.ok()) {
    fuse_reply_err(req, ErrnoOf(target.status()));
    return;
  }
  fuse_reply_readlink(req, target->c_str());
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info*) {
  ReplyViewRead(req, Of(req), ino, size, offset);
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  auto xattrs = Of(req).read_only.Xattrs(ino);
  if (!xattrs.ok()) {
    fuse_reply_err(req, ErrnoOf(xattrs.status()));
    return;
  }
  ReplyGetXattr(req, *xattrs, name, size);
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  auto xattrs = Of(req).read_only.Xattrs(ino);
  if (!xattrs.ok()) {
    fuse_reply_err(req, ErrnoOf(xattrs.status()));
    return;
  }
  ReplyListXattr(req, *xattrs, size);
}

}  // namespace

uint32_t MaxReadForSplice() {
  uint64_t pipe_max = 1 << 20;
  if (FILE* f = std::fopen("/proc/sys/fs/pipe-max-size", "r")) {
    unsigned long v = 0;
    if (std::fscanf(f, "%lu", &v) == 1 && v >= (256u << 10)) pipe_max = v;
    std::fclose(f);
  }
  return static_cast<uint32_t>(std::min<uint64_t>(pipe_max, 1 << 20) - (64u << 10));
}

int ErrnoOf(const Status& s) {
  if (s.posix_errno() != 0) return s.posix_errno();
  switch (s.code()) {
    case Status::Code::kNotFound:
      return ENOENT;
    case Status::Code::kInvalidArgument:
      return EINVAL;
    default:
      return EIO;
  }
}

void InitConnection(void* userdata, struct fuse_conn_info* conn) {
  Server& server = *static_cast<Server*>(userdata);
  conn->max_read = server.max_read;
  // Zero-message opens need nothing per open file: only when read-only.
  server.no_open = !server.overlay && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
  // Tensor bytes go from the shards to the kernel by splice.
  if (server.options.splice) {
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  } else {
    conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }
  if (server.overlay) {
    // open(O_TRUNC) arrives as one OPEN, not a SETATTR first: a view file
    // rewritten whole (DeepSpeed's `latest`) is never copied up.
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    // Writes arrive as they are, spliced from the kernel.
    if (conn->capable & FUSE_CAP_SPLICE_READ) conn->want |= FUSE_CAP_SPLICE_READ;
    // The daemon's size of a file is the truth (ServeOptions::direct_writes).
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
    // The caller's umask comes with each create, for ucfs to apply (once:
    // otherwise the kernel applies it and the upper file system the
    // daemon's on top).
    if (conn->capable & FUSE_CAP_DONT_MASK) conn->want |= FUSE_CAP_DONT_MASK;
  } else {
    // Files are immutable while mounted: keep their pages across opens.
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  }
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  Server& s = Of(req);
  struct statvfs sv {};
  if (s.statfs_path.empty() || ::statvfs(s.statfs_path.c_str(), &sv) != 0) {
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_namemax = 255;
  }
  // The space of the file system under the source (read-only) or the upper
  // directory (writable), as df shows it for a read-only NFS mount: a
  // read-only mount reported full looks like a problem to whoever runs df.
  fuse_reply_statfs(req, &sv);
}

void ReplyLookupError(fuse_req_t req, const Status& status, double negative_timeout) {
  if (ErrnoOf(status) == ENOENT) {
    fuse_entry_param e{};
    e.entry_timeout = negative_timeout;
    fuse_reply_entry(req, &e);
    return;
  }
  fuse_reply_err(req, ErrnoOf(status));
}

void RaiseReadaheadOnce(Server& s) {
  std::call_once(s.readahead_raised, [&] { RaiseReadahead(s.options.mountpoint); });
}

void ReplyViewRead(fuse_req_t req, Server& s, InodeId ino, size_t size, off_t offset) {
  // Keep the source ranges of the next window on their way (ReadAhead).
  const uint64_t begin = static_cast<uint64_t>(offset);
  if (auto ahead = s.read_ahead.Next(ino, begin, size)) {
    Prefetch(s, ino, ahead->offset, ahead->length);
  }
  std::vector<ReadPiece> pieces;
  Status st = s.view->Plan(ino, begin, size, &pieces);
  if (!st.ok()) {
    spdlog::error("read of inode {} at {}: {}", ino, offset, TerminalSafe(st.ToString()));
    fuse_reply_err(req, EIO);
    return;
  }
  // Zero pieces longer than the zero page run are split.
  size_t count = 0;
  for (const ReadPiece& p : pieces) {
    count += p.kind == ReadPiece::Kind::kZeros ? (p.length + kZeroBytes - 1) / kZeroBytes : 1;
  }
  if (count == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  std::vector<char> storage(sizeof(fuse_bufvec) + (count - 1) * sizeof(fuse_buf));
  auto* bufv = reinterpret_cast<fuse_bufvec*>(storage.data());
  bufv->count = count;
  bufv->idx = 0;
  bufv->off = 0;
  size_t i = 0;
  for (const ReadPiece& p : pieces) {
    switch (p.kind) {
      case ReadPiece::Kind::kBytes: {
        fuse_buf& b = bufv->buf[i++];
        b = fuse_buf{};
        b.size = p.length;
        b.mem = const_cast<char*>(p.bytes.data());
        break;
      }
      case ReadPiece::Kind::kZeros:
        for (uint64_t left = p.length; left > 0;) {
          fuse_buf& b = bufv->buf[i++];
          b = fuse_buf{};
          b.size = std::min<uint64_t>(left, kZeroBytes);
          b.mem = const_cast<char*>(Zeros());
          left -= b.size;
        }
        break;
      case ReadPiece::Kind::kSource: {
        const int fd = SourceFd(s, p.source);
        if (fd < 0) {
          fuse_reply_err(req, -fd);
          return;
        }
        fuse_buf& b = bufv->buf[i++];
        b = fuse_buf{};
        b.size = p.length;
        b.flags =
            static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY);
        b.fd = fd;
        b.pos = static_cast<off_t>(p.offset);
        break;
      }
    }
  }
  fuse_reply_data(req, bufv, FUSE_BUF_SPLICE_MOVE);
  // The bytes now live in this file's page cache (kept across opens); the
  // source pages they came from would only be a second copy. Dropping them
  // halves the memory a full read costs and leaves the page cache to others.
  if (s.options.drop_source_pages) {
    for (size_t j = 0; j < bufv->count; ++j) {
      const fuse_buf& b = bufv->buf[j];
      if (b.flags & FUSE_BUF_IS_FD) {
        ::posix_fadvise(b.fd, b.pos, static_cast<off_t>(b.size), POSIX_FADV_DONTNEED);
      }
    }
  }
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info* fi) {
  const DirHandle& dir = *reinterpret_cast<DirHandle*>(fi->fh);
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

void ReplyGetXattr(fuse_req_t req, const std::vector<Xattr>& xattrs, const char* name,
                   size_t size) {
  for (const Xattr& x : xattrs) {
    if (x.name != name) continue;
    if (size == 0) {
      fuse_reply_xattr(req, x.value.size());
    } else if (size < x.value.size()) {
      fuse_reply_err(req, ERANGE);
    } else {
      fuse_reply_buf(req, x.value.data(), x.value.size());
    }
    return;
  }
  fuse_reply_err(req, ENODATA);
}

void ReplyListXattr(fuse_req_t req, const std::vector<Xattr>& xattrs, size_t size) {
  std::string names;
  for (const Xattr& x : xattrs) {
    names += x.name;
    names.push_back('\0');
  }
  if (size == 0) {
    fuse_reply_xattr(req, names.size());
  } else if (size < names.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, names.data(), names.size());
  }
}

fuse_lowlevel_ops ReadOnlyOperations() {
  fuse_lowlevel_ops ops{};
  ops.init = InitConnection;
  ops.lookup = Lookup;
  ops.getattr = GetAttr;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.releasedir = ReleaseDir;
  ops.open = Open;
  ops.readlink = ReadLink;
  ops.read = Read;
  ops.statfs = StatFs;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  return ops;
}

namespace {

// libfuse splits -o at commas; a comma or backslash in a value is escaped.
std::string EscapeOption(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int Serve(std::shared_ptr<View> view, const ServeOptions& options,
          std::unique_ptr<OverlayFs> overlay) {
  Server server(std::move(view), options);
  server.overlay = std::move(overlay);
  server.statfs_path = server.overlay ? server.overlay->upper_dir() : options.statfs_path;
  std::vector<std::string> args = {"ucfs"};
  std::string opts = std::string(server.overlay ? "rw" : "ro") +
                     ",default_permissions,subtype=ucfs,fsname=" + EscapeOption(options.fsname) +
                     ",max_read=" + std::to_string(server.max_read);
  for (const auto& o : options.fuse_options) opts += "," + o;
  args.push_back("-o");
  args.push_back(opts);
  if (options.fuse_debug) args.push_back("-d");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  const fuse_lowlevel_ops ops = server.overlay ? WritableOperations() : ReadOnlyOperations();
  fuse_session* se = fuse_session_new(&fargs, &ops, sizeof(ops), &server);
  if (se == nullptr) {
    std::fprintf(stderr, "ucfs mount: libfuse refused the options '%s'\n", opts.c_str());
    return 1;
  }
  server.session = se;
  int rc = 1;
  if (fuse_set_signal_handlers(se) == 0) {
    if (fuse_session_mount(se, options.mountpoint.c_str()) == 0) {
      if (fuse_daemonize(options.foreground ? 1 : 0) == 0) {
        if (options.on_mounted) options.on_mounted();
        fuse_loop_config* config = fuse_loop_cfg_create();
        fuse_loop_cfg_set_max_threads(config, options.max_threads);
        // Idle workers are kept (libfuse's default, which it advises): one
        // that ends itself does so detached, and one still ending when
        // the session goes at unmount leaks its splice pipe (its
        // thread-specific destructor no longer runs).
        rc = fuse_session_loop_mt(se, config) == 0 ? 0 : 1;
        fuse_loop_cfg_destroy(config);
      }
      fuse_session_unmount(se);
    } else {
      std::fprintf(stderr,
                   "ucfs mount: cannot mount on %s (does it exist, and is it an empty "
                   "directory you may mount on?)\n",
                   options.mountpoint.c_str());
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  fuse_opt_free_args(&fargs);
  return rc;
}

}  // namespace ucfs::fuse
