#include "cli/mount_command.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <variant>

#include "cli/logging.h"
#include "cli/mount_options.h"
#include "cli/source_stats.h"
#include "fuse/fuse_server.h"
#include "ucfs/mount/mount_plan.h"
#include "ucfs/overlay/overlay_fs.h"
#include "ucfs/vfs/read_only_fs.h"

namespace ucfs::cli {
namespace {

constexpr int kExitCheckpointError = 1;
constexpr int kExitUsage = 2;

int Fail(const Status& s, int exit_status) {
  std::fprintf(stderr, "ucfs mount: %s\n", TerminalSafe(s.message()).c_str());
  return exit_status;
}

fuse::ServeOptions ServeOptionsOf(const MountArgs& a, const MountRequest& r,
                                  const MountPlan& plan) {
  fuse::ServeOptions serve;
  serve.mountpoint = *r.mountpoint;
  serve.foreground = a.foreground;
  serve.fuse_debug = a.fuse_debug;
  serve.fuse_options = a.options;
  serve.prefetch = !a.no_prefetch;
  serve.splice = !a.no_splice;
  serve.drop_source_pages = a.drop_source_pages;
  serve.direct_writes = !a.no_direct_writes;
  serve.passthrough = !a.no_passthrough;
  // Like a network file system's host:path, the source shows in mount(8).
  serve.fsname = r.checkpoint;
  // A writable mount changes under the kernel's caches only through
  // itself, but DIR may also be touched directly: keep them short.
  if (plan.writable) serve.cache_timeout_s = 1.0;
  return serve;
}

}  // namespace

int RunMount(MountArgs a) {
  const int verbosity = a.verbosity;
  const auto start = std::chrono::steady_clock::now();
  SetUpLogging(verbosity, a.log_file, false);
  auto request = RequestOf(a);
  if (!request.ok()) return Fail(request.status(), kExitUsage);
  const MountRequest& r = *request;
  // Declared before the plan, whose Envs it counts through: it outlives them.
  auto counter = SourceCounter(verbosity);
  if (!counter.ok()) return Fail(counter.status(), kExitUsage);
  Env& host = *counter ? static_cast<Env&>(**counter) : *Env::Posix();
  // The request's own faults are the user's to fix (exit 2), found by
  // the plan's first step, whose questions it does not ask again.
  bool request_fault = false;
  auto planned = PlanMount(host, r, &request_fault);
  if (!planned.ok()) {
    return Fail(planned.status(), request_fault ? kExitUsage : kExitCheckpointError);
  }
  MountPlan& plan = *planned;
  std::unique_ptr<FileSystem> fs;
  if (plan.writable) {
    auto opened = Overlay::Open(plan.writable->upper_dir, plan.view, *Env::Posix(),
                                std::move(plan.writable->options));
    if (!opened.ok()) return Fail(opened.status(), kExitCheckpointError);
    fs = std::make_unique<OverlayFs>(std::move(opened).value(), plan.view);
  } else {
    // statfs shows the space of the source checkpoint's file system.
    fs = std::make_unique<ReadOnlyFs>(plan.view, plan.source_dirs.front());
  }
  const std::string kind =
      plan.description + (plan.writable ? ", writable into " + plan.writable->upper_dir : "");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  fuse::ServeOptions serve = ServeOptionsOf(a, r, plan);
  serve.on_mounted = [&] {
    if (!a.foreground) SetUpLogging(verbosity, a.log_file, true);
    if (*counter) {
      spdlog::info("{}: source operations until mounted: {}", r.checkpoint,
                   DescribeCounts((*counter)->counts()));
    }
    const auto* mounted = std::get_if<CheckpointMount>(&plan.kind);
    if (mounted == nullptr) {
      spdlog::info("{} mounted on {}: {} ({:.1f} ms)", r.checkpoint, *r.mountpoint, kind, ms);
      return;
    }
    const Checkpoint& c = *mounted->checkpoint;
    spdlog::info("{} mounted on {}: {} of tag {}, {} params, world size {} ({:.1f} ms, {})",
                 r.checkpoint, *r.mountpoint, kind, c.files().tag, c.params().size(),
                 c.world_size(), ms, mounted->index_note);
  };
  const int status = fuse::Serve(std::move(fs), serve);
  if (*counter) {
    spdlog::info("{}: source operations until unmounted: {}", r.checkpoint,
                 DescribeCounts((*counter)->counts()));
  }
  return status;
}

}  // namespace ucfs::cli
