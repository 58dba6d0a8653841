#define FUSE_USE_VERSION 312
#include "fuse/fuse_server.h"

#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

namespace ucfs::fuse {
namespace {

// Zeros for padding pieces: a read is at most max_pages (1 MiB), so one
// static page run covers any piece.
constexpr size_t kZeroBytes = size_t{4} << 20;
const char* Zeros() {
  static const std::vector<char>* zeros = new std::vector<char>(kZeroBytes, 0);
  return zeros->data();
}

// Source files, opened on first use and checked against the identity the
// view recorded: a file rewritten since makes reads of it fail (EIO),
// never return other bytes.
class SourceFds {
 public:
  explicit SourceFds(View& view) : view_(view) {}
  ~SourceFds() {
    for (const Open& o : fds_) {
      if (o.fd >= 0) ::close(o.fd);
    }
  }

  // The fd of source `index`, or -errno.
  int Get(uint32_t index) {
    {
      std::shared_lock lock(mu_);
      if (index < fds_.size() && fds_[index].fd >= 0) return Check(index, fds_[index]);
    }
    std::unique_lock lock(mu_);
    if (fds_.size() <= index) fds_.resize(index + 1);
    if (fds_[index].fd < 0) {
      const SourceFile src = view_.source(index);
      int fd = ::open(src.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
      if (fd < 0 && errno == EPERM) fd = ::open(src.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        spdlog::error("{}: cannot open source file: {}", src.path, std::strerror(errno));
        return -EIO;
      }
      fds_[index] = Open{fd, src.identity};
    }
    return Check(index, fds_[index]);
  }

 private:
  struct Open {
    int fd = -1;
    FileIdentity identity;  // what the view was built from
  };

  // A changed size or mtime means the bytes the view maps are gone.
  int Check(uint32_t index, const Open& open) {
    struct stat st {};
    if (::fstat(open.fd, &st) != 0) return -EIO;
    const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (static_cast<uint64_t>(st.st_size) != open.identity.size ||
        mtime != open.identity.mtime_ns) {
      const SourceFile src = view_.source(index);
      std::call_once(ChangedOnce(index), [&] {
        spdlog::error(
            "{}: changed since it was mounted (size {} -> {}); reads that need it fail "
            "with EIO",
            src.path, src.identity.size, st.st_size);
      });
      return -EIO;
    }
    return open.fd;
  }
  std::once_flag& ChangedOnce(uint32_t index) {
    std::lock_guard lock(once_mu_);
    while (changed_.size() <= index) changed_.emplace_back();
    return changed_[index];
  }

  View& view_;
  std::shared_mutex mu_;
  std::vector<Open> fds_;
  std::mutex once_mu_;
  std::deque<std::once_flag> changed_;
};

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

// Cold reads of a synthesised file jump between the rank shards, which
// defeats the kernel's readahead on them; ucfs knows which source ranges a
// file needs, so it asks for them ahead (POSIX_FADV_WILLNEED, asynchronous).
constexpr uint64_t kPrefetchWindow = uint64_t{32} << 20;

// libfuse splices a read reply only if it fits a pipe (pipe-max-size, 1 MiB
// by default) with room for the header and a page per buffer; a larger
// reply falls back to a malloc'd copy of the whole reply. Reads are capped
// to fit, with room for 14 buffers.
uint32_t MaxReadForSplice() {
  uint64_t pipe_max = 1 << 20;
  if (FILE* f = std::fopen("/proc/sys/fs/pipe-max-size", "r")) {
    unsigned long v = 0;
    if (std::fscanf(f, "%lu", &v) == 1 && v >= (256u << 10)) pipe_max = v;
    std::fclose(f);
  }
  return static_cast<uint32_t>(std::min<uint64_t>(pipe_max, 1 << 20) - (64u << 10));
}

struct Server {
  std::shared_ptr<View> view;
  uint32_t max_read = MaxReadForSplice();
  std::string mountpoint;
  std::once_flag readahead_raised;
  bool no_open = false;  // the kernel takes ENOSYS from OPEN as "never ask again"
  bool drop_source_pages = std::getenv("UCFS_KEEP_SOURCE_PAGES") == nullptr;
  std::mutex read_mu;
  std::unordered_set<fuse_ino_t> read_before;  // files read at least once
  SourceFds fds;
  double timeout;
  uid_t uid = ::getuid();
  gid_t gid = ::getgid();
  std::string statfs_path;

  Server(std::shared_ptr<View> v, double t) : view(std::move(v)), fds(*view), timeout(t) {}
};

void Prefetch(Server& s, fuse_ino_t ino, uint64_t offset, uint64_t length) {
  // UCFS_NO_PREFETCH=1 turns it off, to measure what it buys.
  static const bool disabled = std::getenv("UCFS_NO_PREFETCH") != nullptr;
  if (disabled) return;
  std::vector<ReadPiece> pieces;
  if (!s.view->Plan(ino, offset, length, &pieces).ok()) return;
  for (const ReadPiece& p : pieces) {
    if (p.kind != ReadPiece::Kind::kSource) continue;
    const int fd = s.fds.Get(p.source);
    if (fd >= 0) {
      ::posix_fadvise(fd, static_cast<off_t>(p.offset), static_cast<off_t>(p.length),
                      POSIX_FADV_WILLNEED);
    }
  }
}

Server& Of(fuse_req_t req) { return *static_cast<Server*>(fuse_req_userdata(req)); }

int ErrnoOf(const Status& s) {
  switch (s.code()) {
    case Status::Code::kNotFound:
      return ENOENT;
    case Status::Code::kInvalidArgument:
      return EINVAL;
    default:
      return EIO;
  }
}

struct stat StatOf(const Server& server, const Attr& a) {
  struct stat st {};
  st.st_ino = a.inode;
  st.st_mode = (a.is_dir ? S_IFDIR : S_IFREG) | a.mode;
  st.st_nlink = a.is_dir ? 2 : 1;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  // What cat and cp size their buffers by: 128 KiB keeps the buffer in cache
  // while they copy from the page cache (1 MiB measured 25% slower).
  st.st_blksize = 128 << 10;
  st.st_uid = server.uid;
  st.st_gid = server.gid;
  st.st_mtim.tv_sec = a.mtime_ns / 1000000000;
  st.st_mtim.tv_nsec = a.mtime_ns % 1000000000;
  st.st_atim = st.st_mtim;
  st.st_ctim = st.st_mtim;
  return st;
}

void Init(void* userdata, struct fuse_conn_info* conn) {
  Server& server = *static_cast<Server*>(userdata);
  conn->max_read = server.max_read;
  server.no_open = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
  // Tensor bytes go from the shards to the kernel by splice.
  if (std::getenv("UCFS_NO_SPLICE") == nullptr) {
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  } else {
    conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }
  // Files are immutable while mounted: keep their pages across opens.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server& s = Of(req);
  std::call_once(s.readahead_raised, [&] { RaiseReadahead(s.mountpoint); });
  auto ino = s.view->Lookup(parent, name);
  if (!ino.ok()) {
    // A negative entry is cacheable too: the tree does not change.
    if (ino.status().code() == Status::Code::kNotFound) {
      fuse_entry_param e{};
      e.entry_timeout = s.timeout;
      fuse_reply_entry(req, &e);
      return;
    }
    fuse_reply_err(req, ErrnoOf(ino.status()));
    return;
  }
  auto attr = s.view->GetAttr(*ino);
  if (!attr.ok()) {
    fuse_reply_err(req, ErrnoOf(attr.status()));
    return;
  }
  fuse_entry_param e{};
  e.ino = *ino;
  e.generation = 1;
  e.attr = StatOf(s, *attr);
  e.attr_timeout = s.timeout;
  e.entry_timeout = s.timeout;
  fuse_reply_entry(req, &e);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  Server& s = Of(req);
  // The first request comes after INIT, which resets the readahead.
  std::call_once(s.readahead_raised, [&] { RaiseReadahead(s.mountpoint); });
  auto attr = s.view->GetAttr(ino);
  if (!attr.ok()) {
    fuse_reply_err(req, ErrnoOf(attr.status()));
    return;
  }
  struct stat st = StatOf(s, *attr);
  fuse_reply_attr(req, &st, s.timeout);
}

struct DirHandle {
  std::vector<std::pair<std::string, Attr>> entries;
};

void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Server& s = Of(req);
  auto entries = s.view->ReadDir(ino);
  if (!entries.ok()) {
    fuse_reply_err(req, entries.status().code() == Status::Code::kInvalidArgument
                            ? ENOTDIR
                            : ErrnoOf(entries.status()));
    return;
  }
  auto* handle = new DirHandle{std::move(*entries)};
  fi->fh = reinterpret_cast<uint64_t>(handle);
  fi->cache_readdir = 1;
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info* fi) {
  Server& s = Of(req);
  auto* handle = reinterpret_cast<DirHandle*>(fi->fh);
  std::vector<char> buf(size);
  size_t used = 0;
  // Entry i of the listing is at offset i + 1; "." and ".." come first.
  const size_t total = handle->entries.size() + 2;
  for (size_t i = static_cast<size_t>(offset); i < total; ++i) {
    struct stat st {};
    const char* name;
    if (i < 2) {
      name = i == 0 ? "." : "..";
      st.st_ino = ino;
      st.st_mode = S_IFDIR;
    } else {
      const auto& [entry_name, attr] = handle->entries[i - 2];
      name = entry_name.c_str();
      st = StatOf(s, attr);
    }
    const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st,
                                          static_cast<off_t>(i + 1));
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  delete reinterpret_cast<DirHandle*>(fi->fh);
  fuse_reply_err(req, 0);
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
  auto attr = s.view->GetAttr(ino);
  if (!attr.ok()) {
    fuse_reply_err(req, ErrnoOf(attr.status()));
    return;
  }
  if (attr->is_dir) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);
    return;
  }
  // Not direct_io: mmap must work (torch.load(mmap=True), zero_to_fp32).
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info*) {
  Server& s = Of(req);
  // Keep the source ranges of the next window on their way: each time a
  // read crosses into a new window, ask for the one after it.
  const uint64_t begin = static_cast<uint64_t>(offset);
  bool first_read;
  {
    std::lock_guard lock(s.read_mu);
    first_read = s.read_before.insert(ino).second;
  }
  if (first_read) {
    // The first read of a file: its first two windows, from all its shards
    // at once. (Whole files, up to 256 MiB, measured slower on whole-tree
    // reads: too many random requests queued at once.)
    Prefetch(s, ino, begin, 2 * kPrefetchWindow);
  } else if (begin / kPrefetchWindow != (begin + size) / kPrefetchWindow) {
    Prefetch(s, ino, ((begin + size) / kPrefetchWindow + 1) * kPrefetchWindow, kPrefetchWindow);
  }
  std::vector<ReadPiece> pieces;
  Status st = s.view->Plan(ino, begin, size, &pieces);
  if (!st.ok()) {
    spdlog::error("read of inode {} at {}: {}", ino, offset, st.ToString());
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
        const int fd = s.fds.Get(p.source);
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
  if (s.drop_source_pages) {
    for (size_t j = 0; j < bufv->count; ++j) {
      const fuse_buf& b = bufv->buf[j];
      if (b.flags & FUSE_BUF_IS_FD) {
        ::posix_fadvise(b.fd, b.pos, static_cast<off_t>(b.size), POSIX_FADV_DONTNEED);
      }
    }
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
  sv.f_bfree = 0;  // read-only
  sv.f_bavail = 0;
  fuse_reply_statfs(req, &sv);
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Server& s = Of(req);
  auto xattrs = s.view->Xattrs(ino);
  if (!xattrs.ok()) {
    fuse_reply_err(req, ErrnoOf(xattrs.status()));
    return;
  }
  for (const Xattr& x : *xattrs) {
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

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Server& s = Of(req);
  auto xattrs = s.view->Xattrs(ino);
  if (!xattrs.ok()) {
    fuse_reply_err(req, ErrnoOf(xattrs.status()));
    return;
  }
  std::string names;
  for (const Xattr& x : *xattrs) {
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

fuse_lowlevel_ops Operations() {
  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.getattr = GetAttr;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.releasedir = ReleaseDir;
  ops.open = Open;
  ops.read = Read;
  ops.statfs = StatFs;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  return ops;
}

}  // namespace

int Serve(std::shared_ptr<View> view, const ServeOptions& options) {
  Server server(std::move(view), options.cache_timeout_s);
  server.statfs_path = options.statfs_path;
  server.mountpoint = options.mountpoint;
  std::vector<std::string> args = {"ucfs"};
  std::string opts = "ro,default_permissions,subtype=ucfs,fsname=" + options.fsname +
                     ",max_read=" + std::to_string(server.max_read);
  for (const auto& o : options.fuse_options) opts += "," + o;
  args.push_back("-o");
  args.push_back(opts);
  if (options.fuse_debug) args.push_back("-d");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  const fuse_lowlevel_ops ops = Operations();
  fuse_session* se = fuse_session_new(&fargs, &ops, sizeof(ops), &server);
  if (se == nullptr) {
    std::fprintf(stderr, "ucfs mount: libfuse refused the options '%s'\n", opts.c_str());
    return 1;
  }
  int rc = 1;
  if (fuse_set_signal_handlers(se) == 0) {
    if (fuse_session_mount(se, options.mountpoint.c_str()) == 0) {
      if (fuse_daemonize(options.foreground ? 1 : 0) == 0) {
        if (options.on_mounted) options.on_mounted();
        fuse_loop_config* config = fuse_loop_cfg_create();
        fuse_loop_cfg_set_max_threads(config, 16);
        fuse_loop_cfg_set_idle_threads(config, 4);
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
