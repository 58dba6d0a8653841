// ucfs: the command-line tool. A thin layer over the core library: parse
// arguments, call it, print its answer or its error.
//
// Exit codes: 0 success; 1 the checkpoint could not be read or mounted
// (the message names the file and the problem); 2 bad usage.
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "fuse/fuse_server.h"
#include "ucfs/checkpoint.h"
#include "ucfs/describe.h"
#include "ucfs/index.h"
#include "ucfs/inspect.h"
#include "ucfs/overlay_fs.h"
#include "ucfs/reshard_view.h"
#include "ucfs/universal_view.h"
#include "ucfs/zip.h"

#ifndef UCFS_VERSION
#define UCFS_VERSION "unknown"
#endif

namespace {

constexpr int kExitCheckpointError = 1;
constexpr int kExitUsage = 2;

spdlog::level::level_enum LevelFor(int verbosity) {
  return verbosity >= 2   ? spdlog::level::trace
         : verbosity == 1 ? spdlog::level::debug
                          : spdlog::level::warn;
}

// Logs go to stderr so that stdout stays clean for --json; a daemon logs to
// --log-file, or to syslog.
void SetUpLogging(int verbosity, const std::string& log_file, bool daemon) {
  spdlog::drop("ucfs");
  std::shared_ptr<spdlog::logger> logger;
  if (!log_file.empty()) {
    logger = spdlog::basic_logger_mt("ucfs", log_file);
    logger->flush_on(spdlog::level::info);
  } else if (daemon) {
    logger = spdlog::syslog_logger_mt("ucfs", "ucfs", LOG_PID);
  } else {
    logger = spdlog::stderr_color_mt("ucfs");
    logger->set_pattern("ucfs: %^%l%$: %v");
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(LevelFor(verbosity));
}

int Fail(const char* command, const ucfs::Status& s) {
  std::fprintf(stderr, "ucfs %s: %s\n", command, s.message().c_str());
  return kExitCheckpointError;
}

int RunInspect(const std::string& path, const std::optional<std::string>& tag, bool json) {
  ucfs::CheckpointOptions options;
  options.tag = tag;
  auto ckpt = ucfs::Checkpoint::Open(*ucfs::Env::Posix(), path, options);
  if (!ckpt.ok()) return Fail("inspect", ckpt.status());
  if (json) {
    std::cout << ucfs::InspectJson(*ckpt).dump(2) << "\n";
  } else {
    std::cout << ucfs::InspectText(*ckpt);
  }
  return 0;
}

// Prints a torch.save file's pickle without executing it.
int RunShow(const std::string& path) {
  auto file = ucfs::Env::Posix()->Open(path);
  if (!file.ok()) return Fail("show", file.status());
  auto archive = ucfs::ZipArchive::Open(**file);
  if (!archive.ok()) return Fail("show", archive.status());
  const ucfs::ZipRecord* pkl = archive->Find("data.pkl");
  if (pkl == nullptr) return Fail("show", ucfs::Status::Corruption(path + ": no data.pkl record"));
  auto bytes = ucfs::ZipArchive::ReadRecord(**file, *pkl);
  if (!bytes.ok()) return Fail("show", bytes.status());
  auto doc = ucfs::pickle::Parse(*bytes);
  if (!doc.ok()) return Fail("show", doc.status().Annotate(path + ": data.pkl"));
  std::cout << ucfs::Describe(*doc, doc->root());
  return 0;
}

struct MountArgs {
  std::string checkpoint;
  std::string mountpoint;
  std::optional<std::string> tag;
  bool foreground = false;
  bool fuse_debug = false;
  std::vector<std::string> options;
  std::optional<std::string> cache_dir;
  bool no_cache = false;
  bool crc = false;
  std::string log_file;
  std::optional<uint32_t> world_size;
  std::optional<uint64_t> sub_group_size;
  std::optional<std::string> upper;
};

int RunMount(MountArgs a, int verbosity) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  // Absolute paths: a daemon works from "/".
  std::error_code ec;
  const std::string checkpoint = fs::absolute(a.checkpoint, ec).lexically_normal().string();
  const std::string mountpoint = fs::absolute(a.mountpoint, ec).lexically_normal().string();
  SetUpLogging(verbosity, a.log_file, false);

  std::unique_ptr<ucfs::SummaryIndex> index;
  if (!a.no_cache) {
    const std::string dir = a.cache_dir.value_or(ucfs::DefaultIndexDir());
    auto opened = ucfs::SummaryIndex::Open(*ucfs::Env::Posix(), dir);
    if (opened.ok()) {
      index = std::move(opened).value();
    } else {
      spdlog::warn("{} (mounting without the index)", opened.status().message());
    }
  }
  ucfs::CheckpointOptions options;
  options.tag = a.tag;
  options.source = index.get();
  auto ckpt = ucfs::Checkpoint::Open(*ucfs::Env::Posix(), checkpoint, options);
  if (!ckpt.ok()) return Fail("mount", ckpt.status());
  auto shared = std::make_shared<const ucfs::Checkpoint>(std::move(ckpt).value());
  ucfs::Result<std::unique_ptr<ucfs::View>> view = ucfs::Status::InvalidArgument("no view");
  if (a.world_size) {
    view = ucfs::BuildReshardView(*ucfs::Env::Posix(), shared, {*a.world_size, a.sub_group_size});
  } else {
    ucfs::UniversalViewOptions view_options;
    view_options.compute_crc = a.crc;
    view = ucfs::BuildUniversalView(*ucfs::Env::Posix(), shared, view_options);
  }
  if (!view.ok()) return Fail("mount", view.status());
  std::shared_ptr<ucfs::View> shown = std::move(view).value();
  std::unique_ptr<ucfs::OverlayFs> overlay;
  std::string upper;
  if (a.upper) {
    upper = fs::absolute(*a.upper, ec).lexically_normal().string();
    if (upper == checkpoint || upper.starts_with(checkpoint + "/") ||
        checkpoint.starts_with(upper + "/")) {
      std::fprintf(stderr,
                   "ucfs mount: --upper %s: must be outside the checkpoint %s (the source is "
                   "never written)\n",
                   upper.c_str(), checkpoint.c_str());
      return kExitUsage;
    }
    auto opened = ucfs::Overlay::Open(upper, shown, *ucfs::Env::Posix());
    if (!opened.ok()) return Fail("mount", opened.status());
    overlay = std::make_unique<ucfs::OverlayFs>(std::move(opened).value(), shown);
  }
  const std::string kind =
      (a.world_size ? "view at world size " + std::to_string(*a.world_size) : "universal view") +
      (a.upper ? ", writable into " + upper : "");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  ucfs::fuse::ServeOptions serve;
  serve.mountpoint = mountpoint;
  serve.foreground = a.foreground;
  serve.fuse_debug = a.fuse_debug;
  serve.fuse_options = a.options;
  serve.statfs_path = shared->files().root.empty() ? shared->files().tag_dir : shared->files().root;
  // A writable mount changes under the kernel's caches only through
  // itself, but DIR may also be touched directly: keep them short.
  if (overlay) serve.cache_timeout_s = 1.0;
  const uint64_t hits = index ? index->cache_hits() : 0;
  const uint64_t misses = index ? index->cache_misses() : 0;
  serve.on_mounted = [&] {
    if (!a.foreground) SetUpLogging(verbosity, a.log_file, true);
    const std::string index_note =
        index ? fmt::format("{} rank files from the index, {} read", hits, misses) : "no index";
    spdlog::info(
        "{} mounted on {}: {} of tag {}, {} params, world size {} ({:.1f} ms, "
        "{})",
        checkpoint, mountpoint, kind, shared->files().tag, shared->params().size(),
        shared->world_size(), ms, index_note);
  };
  return ucfs::fuse::Serve(shown, serve, std::move(overlay));
}

int RunUmount(const std::string& mountpoint) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("fusermount3", "fusermount3", "-u", mountpoint.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
      WEXITSTATUS(status) == 0) {
    return 0;
  }
  // Without fusermount3, root can unmount directly.
  if (::umount2(mountpoint.c_str(), 0) == 0) return 0;
  std::fprintf(stderr, "ucfs umount: cannot unmount %s: %s\n", mountpoint.c_str(),
               std::strerror(errno));
  return kExitCheckpointError;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ucfs: DeepSpeed ZeRO-3 checkpoints, mounted as the layout you need"};
  app.set_version_flag("--version", std::string("ucfs ") + UCFS_VERSION);
  app.require_subcommand(1);
  int verbosity = 0;
  app.add_flag("-v,--verbose", verbosity, "More log output (repeat for more)");

  auto* inspect = app.add_subcommand("inspect",
                                     "Describe a ZeRO-3 checkpoint: world size, dtype, "
                                     "step, groups, and every parameter");
  std::string path;
  std::optional<std::string> tag;
  bool json = false;
  inspect->add_option("CKPT", path, "Checkpoint root (with `latest`) or tag directory")->required();
  inspect->add_option("--tag", tag, "Tag directory to read instead of the one `latest` names");
  inspect->add_flag("--json", json, "Print JSON for scripts");
  inspect->add_flag("-v,--verbose", verbosity, "More log output (repeat for more)");

  auto* show = app.add_subcommand("show",
                                  "Print the pickled structure of a torch.save file "
                                  "(tensors summarised; nothing is executed)");
  std::string show_path;
  show->add_option("FILE", show_path, "A .pt file")->required();

  MountArgs m;
  auto* mount = app.add_subcommand(
      "mount",
      "Mount a ZeRO-3 checkpoint as the universal checkpoint ds_to_universal.py would "
      "write, assembled on read");
  mount->add_option("CKPT", m.checkpoint, "Checkpoint root (with `latest`) or tag directory")
      ->required();
  mount->add_option("MNT", m.mountpoint, "An empty directory to mount on")->required();
  mount->add_option("--tag", m.tag, "Tag to show instead of the one `latest` names");
  mount->add_flag("-f,--foreground", m.foreground, "Stay in the foreground (logs to stderr)");
  mount->add_flag("-d,--fuse-debug", m.fuse_debug, "Log every FUSE request (implies -f)");
  mount->add_option("-o", m.options, "Mount options for libfuse and the kernel (allow_other, ...)")
      ->delimiter(',');
  mount->add_option("--cache-dir", m.cache_dir,
                    "Where the index of parsed rank files lives (default $XDG_CACHE_HOME/ucfs)");
  mount->add_flag("--no-cache", m.no_cache, "Neither read nor write the index");
  mount->add_flag("--crc", m.crc,
                  "Write real CRC-32s into the zip records (reads every byte at mount time; "
                  "only Python's zipfile checks them)");
  mount->add_option("--log-file", m.log_file, "Log to this file instead of syslog/stderr");
  mount
      ->add_option("--world-size", m.world_size,
                   "Show the checkpoint as DeepSpeed would have saved it with N ranks")
      ->check(CLI::Range(1u, 1u << 20));
  mount->add_option("--sub-group-size", m.sub_group_size,
                    "The run's zero_optimization.sub_group_size, when its ds_config has none "
                    "(default 1e9)");
  mount->add_option("--upper", m.upper,
                    "Make the mount writable: whatever is written (new checkpoints, a rewritten "
                    "`latest`) lands in this directory (created if missing); the source is never "
                    "written");
  mount->add_flag("-v,--verbose", verbosity, "More log output (repeat for more)");

  std::string umount_path;
  auto* umount = app.add_subcommand("umount", "Unmount a ucfs mount (fusermount3 -u)");
  umount->add_option("MNT", umount_path, "The mountpoint")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (*mount) {
    if (m.fuse_debug) m.foreground = true;
    return RunMount(std::move(m), verbosity);
  }
  SetUpLogging(verbosity, "", false);
  if (*inspect) return RunInspect(path, tag, json);
  if (*show) return RunShow(show_path);
  if (*umount) return RunUmount(umount_path);
  return kExitUsage;
}
