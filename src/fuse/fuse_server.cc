// The adapter's state, the connection's setup, and Serve.
#include "fuse/fuse_server.h"

#include <linux/capability.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "fuse/server.h"

namespace ucfs::fuse {
namespace {

// Best effort (kMountReadaheadKb): as root only, and the kernel resets it
// at INIT.
void RaiseReadahead(const std::string& mountpoint) {
  std::ifstream info("/proc/self/mountinfo");
  if (!info) return;
  std::ostringstream text;
  text << info.rdbuf();
  const auto device = MountDevice(text.str(), mountpoint);
  if (!device) return;
  std::ofstream knob("/sys/class/bdi/" + *device + "/read_ahead_kb");
  if (knob) knob << kMountReadaheadKb;
}

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

Server::~Server() {
  MutexLock lock(handles_mu);
  for (Handle* h : handles) delete h;  // their fds close with the FileSystem
  for (DirHandle* d : dir_handles) delete d;
}

uint64_t Keep(Server& s, std::unique_ptr<Handle> handle) {
  MutexLock lock(s.handles_mu);
  s.handles.insert(handle.get());
  return reinterpret_cast<uint64_t>(handle.release());
}

uint64_t Keep(Server& s, std::unique_ptr<DirHandle> handle) {
  MutexLock lock(s.handles_mu);
  s.dir_handles.insert(handle.get());
  return reinterpret_cast<uint64_t>(handle.release());
}

std::unique_ptr<Handle> GiveBack(Server& s, uint64_t fh) {
  auto* h = reinterpret_cast<Handle*>(fh);
  MutexLock lock(s.handles_mu);
  s.handles.erase(h);
  return std::unique_ptr<Handle>(h);
}

std::unique_ptr<DirHandle> GiveBackDir(Server& s, uint64_t fh) {
  auto* d = reinterpret_cast<DirHandle*>(fh);
  MutexLock lock(s.handles_mu);
  s.dir_handles.erase(d);
  return std::unique_ptr<DirHandle>(d);
}

int SourceFd(SourcesOfRead& read, uint32_t index) {
  auto file = read.Get(index);
  if (!file.ok()) return -ErrnoOf(file.status());
  return (*file)->fd() >= 0 ? (*file)->fd() : -EIO;
}

uint32_t MaxReadForSplice() {
  unsigned long pipe_max = 0;  // unread: the default
  if (FILE* f = std::fopen("/proc/sys/fs/pipe-max-size", "r")) {
    if (std::fscanf(f, "%lu", &pipe_max) != 1) pipe_max = 0;
    std::fclose(f);
  }
  return MaxReadForPipe(pipe_max);
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
  conn->max_background = kMaxBackground;
  conn->congestion_threshold = kCongestionThreshold;
  const bool read_only = server.fs->read_only();
  const bool admin = HasSysAdmin();
  server.passthrough = UsesPassthrough(conn->capable, server.options.passthrough, admin);
  server.no_open = SkipsOpens(conn->capable, read_only, server.passthrough);
  conn->want = WantedCapabilities(conn->capable, conn->want, server.options.splice, read_only,
                                  server.passthrough);
  if (server.passthrough) {
    spdlog::info(
        "FUSE passthrough: on (files that are one real file whole are read by the "
        "kernel from it)");
  } else if (!server.options.passthrough) {
    spdlog::info("FUSE passthrough: off (--no-passthrough)");
  } else {
    spdlog::info("FUSE passthrough: not used ({})",
                 PassthroughCapability() == 0 ? "built against libfuse < 3.16"
                 : (conn->capable & PassthroughCapability()) == 0
                     ? "the kernel does not offer it (< 6.9)"
                     : "no CAP_SYS_ADMIN, which backing files need");
  }
}

bool HasSysAdmin() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN)) != 0;
}

void StartPassthrough(fuse_req_t req, Server& s, fuse_ino_t ino, const Handle& handle,
                      fuse_file_info* fi) {
#if UCFS_FUSE_PASSTHROUGH
  if (!s.passthrough) return;
  std::optional<FileSystem::WholeFile> whole = s.fs->WholeFileOf(ino, handle);
  // Checked at every open: a changed source is never handed to the kernel.
  SourcesOfRead opened(s.sources);
  const int source_fd = whole && whole->source ? SourceFd(opened, *whole->source) : -1;
  const int id = s.backing.Start(ino, &handle, whole, source_fd, [req, ino](int fd) {
    const int got = fuse_passthrough_open(req, fd);
    if (got <= 0) spdlog::debug("inode {}: no backing file (served by the daemon)", ino);
    return got;
  });
  if (id > 0) {
    fi->backing_id = id;
    fi->keep_cache = 0;
    fi->direct_io = 0;
  }
#else
  (void)req, (void)s, (void)ino, (void)handle, (void)fi;
#endif
}

void EndPassthrough(fuse_req_t req, Server& s, fuse_ino_t ino, const Handle& handle) {
#if UCFS_FUSE_PASSTHROUGH
  if (!s.passthrough) return;
  s.backing.End(ino, &handle, [req](int id) {
    if (req != nullptr) fuse_passthrough_close(req, id);
  });
#else
  (void)req, (void)s, (void)ino, (void)handle;
#endif
}

void RaiseReadaheadOnce(Server& s) {
  std::call_once(s.readahead_raised, [&] { RaiseReadahead(s.options.mountpoint); });
}

int Serve(std::unique_ptr<FileSystem> fs, const ServeOptions& options) {
  Server server(std::move(fs), options);
  std::vector<std::string> args = {"ucfs"};
  std::string opts = std::string(server.fs->read_only() ? "ro" : "rw") +
                     ",default_permissions,subtype=ucfs,fsname=" + EscapeOption(options.fsname) +
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
