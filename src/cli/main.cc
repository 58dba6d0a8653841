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

#include "cli/export_command.h"
#include "cli/inspect_command.h"
#include "cli/mount_args.h"
#include "cli/mount_helper.h"
#include "cli/verify_command.h"
#include "cli/view_setup.h"
#include "fuse/fuse_server.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/codec/describe.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/overlay/overlay_fs.h"
#include "ucfs/view/consolidated_view.h"

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
  std::fprintf(stderr, "ucfs %s: %s\n", command, ucfs::TerminalSafe(s.message()).c_str());
  return kExitCheckpointError;
}

// Prints a torch.save file's pickle without executing it.
int RunShow(const std::string& path) {
  auto summary = ucfs::SummarizeTorchFile(*ucfs::Env::Posix(), path);
  if (!summary.ok()) return Fail("show", summary.status());
  auto doc = ucfs::pickle::Parse(summary->pickle);
  if (!doc.ok()) return Fail("show", doc.status().Annotate(path + ": data.pkl"));
  auto shown = ucfs::Describe(*doc, doc->root());
  if (!shown.ok()) return Fail("show", shown.status().Annotate(path + ": data.pkl"));
  std::cout << *shown;
  return 0;
}

using ucfs::cli::MountArgs;

// Checkpoints a trainer saved into DIR through an earlier mount are shown as
// they were saved: at another --world-size they are not resharded (the run
// view serves the source's roots), which a resume from them would trip on.
void WarnOfUpperRootsAtOtherSizes(const std::string& upper, uint32_t world_size) {
  auto roots = ucfs::FindRoots(*ucfs::Env::Posix(), upper);
  if (!roots.ok()) return;  // none, or no DIR yet
  for (const ucfs::RootListing& root : *roots) {
    for (const ucfs::TagListing& tag : root.tags) {
      if (tag.complete && tag.files().world_size != world_size) {
        spdlog::warn(
            "{}: saved into --upper at {} ranks, shown as saved (not at {}): to resume from it "
            "at {}, mount with --layer {} and a new --upper",
            ucfs::TerminalSafe(tag.dir), tag.files().world_size, world_size, world_size,
            ucfs::TerminalSafe(upper));
      }
    }
  }
}

int RunMount(MountArgs a, int verbosity) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  // Absolute paths: a daemon works from "/".
  std::error_code ec;
  const std::string checkpoint = fs::absolute(a.checkpoint, ec).lexically_normal().string();
  const std::string mountpoint = fs::absolute(a.mountpoint, ec).lexically_normal().string();
  SetUpLogging(verbosity, a.log_file, false);

  ucfs::cli::ViewRequest request;
  request.checkpoint = checkpoint;
  request.tag = a.tag;
  request.cache_dir = a.cache_dir;
  request.no_cache = a.no_cache;
  request.crc = a.crc;
  request.world_size = a.world_size;
  request.sub_group_size = a.sub_group_size;
  if (a.universal_info) request.universal_info = fs::absolute(*a.universal_info, ec).string();
  request.copy_rank_files = !a.no_rank_file_copies;
  for (const std::string& layer : a.layers) {
    request.layers.push_back(fs::absolute(layer, ec).lexically_normal().string());
  }
  if (a.weights_dtype) {
    auto dtype = ucfs::cli::ParseWeightsDtype(*a.weights_dtype);
    if (!dtype.ok()) {
      std::fprintf(stderr, "ucfs mount: %s\n",
                   ucfs::TerminalSafe(dtype.status().message()).c_str());
      return kExitUsage;
    }
    request.weights_dtype = *dtype;
  }
  // Trainers count, sum and parse what a writable mount shows.
  request.extra_views = !a.upper || a.views;
  if (a.upper) request.upper = fs::absolute(*a.upper, ec).lexically_normal().string();
  auto opened_view = ucfs::cli::OpenView(request);
  if (!opened_view.ok()) return Fail("mount", opened_view.status());
  const std::shared_ptr<const ucfs::Checkpoint> shared = opened_view->checkpoint;
  const std::shared_ptr<ucfs::View> shown = opened_view->view;
  const std::vector<std::string>& source_dirs = opened_view->source_dirs;
  // A mount over the checkpoint would wait on itself for its own shards.
  for (ucfs::Status s : {ucfs::cli::CheckMountpoint(mountpoint),
                         ucfs::cli::CheckPlacement(source_dirs, "the mountpoint", mountpoint,
                                                   ucfs::cli::Placement::kApart)}) {
    if (!s.ok()) {
      std::fprintf(stderr, "ucfs mount: %s\n", ucfs::TerminalSafe(s.message()).c_str());
      return kExitUsage;
    }
  }
  std::unique_ptr<ucfs::OverlayFs> overlay;
  std::string upper;
  if (a.upper) {
    upper = fs::absolute(*a.upper, ec).lexically_normal().string();
    for (const std::string& layer : request.layers) {
      if (ucfs::cli::CheckPlacement({layer}, "--upper", upper, ucfs::cli::Placement::kApart).ok()) {
        continue;
      }
      std::fprintf(stderr,
                   "ucfs mount: --upper %s and --layer %s overlap: a layer is only read; write "
                   "into a new directory\n",
                   ucfs::TerminalSafe(upper).c_str(), ucfs::TerminalSafe(layer).c_str());
      return kExitUsage;
    }
    ucfs::Status placed =
        ucfs::cli::CheckPlacement(source_dirs, "--upper", upper, ucfs::cli::Placement::kApart);
    if (!placed.ok()) {
      std::fprintf(stderr, "ucfs mount: %s\n", ucfs::TerminalSafe(placed.message()).c_str());
      return kExitUsage;
    }
    if (opened_view->is_run() && a.world_size) WarnOfUpperRootsAtOtherSizes(upper, *a.world_size);
    // The consolidated weights are shown read-only, --upper or not.
    ucfs::Overlay::Options overlay_options;
    if (shared) overlay_options.read_only.push_back(ucfs::ConsolidatedDirName(shared->files().tag));
    if (std::shared_ptr<ucfs::UpperRootViews> views = opened_view->upper_views) {
      // Checkpoints saved through the mount are roots like the source's.
      upper = opened_view->upper_dir;
      overlay_options.might_show = &ucfs::UpperRootViews::MightShow;
      overlay_options.on_upper_dir = [views](const std::string& path, const std::string& dir) {
        return views->Update(path, dir);
      };
    }
    auto opened =
        ucfs::Overlay::Open(upper, shown, *ucfs::Env::Posix(), std::move(overlay_options));
    if (!opened.ok()) return Fail("mount", opened.status());
    overlay = std::make_unique<ucfs::OverlayFs>(std::move(opened).value(), shown);
  }
  const std::string kind = opened_view->description + (a.upper ? ", writable into " + upper : "");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  ucfs::fuse::ServeOptions serve;
  serve.mountpoint = mountpoint;
  serve.foreground = a.foreground;
  serve.fuse_debug = a.fuse_debug;
  serve.fuse_options = a.options;
  serve.prefetch = !a.no_prefetch;
  serve.splice = !a.no_splice;
  serve.drop_source_pages = a.drop_source_pages;
  serve.direct_writes = !a.no_direct_writes;
  // Like a network file system's host:path, the source shows in mount(8).
  serve.fsname = checkpoint;
  serve.statfs_path = source_dirs.front();
  // A writable mount changes under the kernel's caches only through
  // itself, but DIR may also be touched directly: keep them short.
  if (overlay) serve.cache_timeout_s = 1.0;
  serve.on_mounted = [&] {
    if (!a.foreground) SetUpLogging(verbosity, a.log_file, true);
    if (shared == nullptr) {  // a run, or a tensor- and pipeline-parallel checkpoint
      spdlog::info("{} mounted on {}: {} ({:.1f} ms)", checkpoint, mountpoint, kind, ms);
      return;
    }
    spdlog::info("{} mounted on {}: {} of tag {}, {} params, world size {} ({:.1f} ms, {})",
                 checkpoint, mountpoint, kind, shared->files().tag, shared->params().size(),
                 shared->world_size(), ms, opened_view->index_note);
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
  // umount2 says EINVAL for "not a mount point".
  std::fprintf(stderr, "ucfs umount: cannot unmount %s: %s\n", mountpoint.c_str(),
               errno == EINVAL ? "it is not a mount point" : std::strerror(errno));
  return kExitCheckpointError;
}

// Each subcommand and its options; `verbosity` counts every -v of any of them.
CLI::App* AddInspectCommand(CLI::App& app, ucfs::cli::InspectArgs* a, int* verbosity) {
  CLI::App* inspect = app.add_subcommand("inspect",
                                         "Describe a DeepSpeed checkpoint (ZeRO 1-3, a TP/PP "
                                         "grid, or every tag of a run directory): degrees, "
                                         "dtype, step, groups, and every parameter");
  inspect
      ->add_option("CKPT", a->path,
                   "Checkpoint root (with `latest`), tag directory, or a run directory (every "
                   "tag of every root below it)")
      ->required();
  inspect->add_option("--tag", a->tag, "Tag directory to read instead of the one `latest` names");
  inspect->add_flag("--json", a->json, "Print JSON for scripts");
  inspect->add_option("--universal-info", a->universal_info,
                      "A JSON file of universal_checkpoint_info keys laid over the saved ones "
                      "(how the name table would merge with them)");
  inspect->add_flag("-v,--verbose", *verbosity, "More log output (repeat for more)");
  return inspect;
}

CLI::App* AddVerifyCommand(CLI::App& app, ucfs::cli::VerifyArgs* a, int* verbosity) {
  CLI::App* verify = app.add_subcommand(
      "verify",
      "Check a checkpoint before trusting it: every rank file present and readable, world "
      "sizes and steps agreeing, tensors inside their records, no NaN/Inf in weights or "
      "optimizer states");
  verify
      ->add_option("CKPT", a->checkpoint,
                   "Checkpoint root (with `latest`), tag directory, or a run directory (every "
                   "tag of every root below it)")
      ->required();
  verify->add_option("--tag", a->tag, "Tag directory to check instead of the one `latest` names");
  verify->add_flag("--json", a->json, "Print JSON for scripts");
  verify->add_option("--universal-info", a->universal_info,
                     "A JSON file of universal_checkpoint_info keys laid over the saved ones");
  verify->add_option("-j,--threads", a->threads, "Scan threads (default: one per CPU)")
      ->check(CLI::Range(1u, 1024u));
  verify->add_flag("-v,--verbose", *verbosity, "More log output (repeat for more)");
  return verify;
}

CLI::App* AddShowCommand(CLI::App& app, std::string* path) {
  CLI::App* show = app.add_subcommand("show",
                                      "Print the pickled structure of a torch.save file "
                                      "(tensors summarised; nothing is executed)");
  show->add_option("FILE", *path, "A .pt file")->required();
  return show;
}

CLI::App* AddMountCommand(CLI::App& app, MountArgs* a, int* verbosity) {
  CLI::App* mount = app.add_subcommand(
      "mount",
      "Mount a DeepSpeed checkpoint (ZeRO 1-3, a TP/PP grid, or a training run's directory) "
      "as the universal checkpoint ds_to_universal.py would write, or with --world-size as "
      "DeepSpeed would have saved it at N ranks; assembled on read");
  mount
      ->add_option("CKPT", a->checkpoint,
                   "Checkpoint root (with `latest`), tag directory, or a run directory (every "
                   "tag of every root below it)")
      ->required();
  mount->add_option("MNT", a->mountpoint, "An empty directory to mount on")->required();
  mount->add_option("--tag", a->tag, "Tag to show instead of the one `latest` names");
  mount->add_flag("-f,--foreground", a->foreground, "Stay in the foreground (logs to stderr)");
  mount->add_flag("-d,--fuse-debug", a->fuse_debug, "Log every FUSE request (implies -f)");
  mount->add_option("-o", a->options, "Mount options for libfuse and the kernel (allow_other, ...)")
      ->delimiter(',');
  mount->add_option("--cache-dir", a->cache_dir,
                    "Where the index of parsed rank files lives (default $XDG_CACHE_HOME/ucfs)");
  mount->add_flag("--no-cache", a->no_cache, "Neither read nor write the index");
  mount->add_flag("--crc", a->crc,
                  "Write real CRC-32s into the zip records (reads every byte at mount time; "
                  "only Python's zipfile checks them)");
  mount->add_option("--log-file", a->log_file, "Log to this file instead of syslog/stderr");
  mount
      ->add_option("--world-size", a->world_size,
                   "Show the checkpoint as DeepSpeed would have saved it with N ranks")
      ->check(CLI::Range(1u, ucfs::cli::kMaxWorldSize));
  mount->add_option("--sub-group-size", a->sub_group_size,
                    "The run's zero_optimization.sub_group_size, when its ds_config has none "
                    "(default 1000000000)");
  mount->add_option(
      "--universal-info", a->universal_info,
      "A JSON file of universal_checkpoint_info keys (the pattern lists, "
      "original_vocab_size, ...) laid over the saved ones, for a checkpoint saved "
      "without them (a TP run without it, a T = 1 run without row-parallel patterns)");
  mount->add_option("--upper", a->upper,
                    "Make the mount writable: whatever is written (new checkpoints, a rewritten "
                    "`latest`) lands in this directory (created if missing); the source is never "
                    "written");
  mount
      ->add_option("--layer", a->layers,
                   "An earlier mount's --upper directory, laid over CKPT read-only (repeat, oldest "
                   "first): the checkpoints a trainer saved into it are served like CKPT's own, "
                   "resharded at --world-size and with their views")
      ->type_size(1)
      ->allow_extra_args(false);
  mount->add_flag("--views", a->views,
                  "With --upper, a run directory's roots still show <tag>_universal/, "
                  "latest_universal and <tag>_fp32/ (hidden by default: trainers count, sum and "
                  "parse what they find there)");
  mount->add_flag("--no-rank-file-copies", a->no_rank_file_copies,
                  "With --world-size, give new ranks no copy of the frameworks' per-rank files "
                  "(rng_state_{r}.pth, random_states_{r}.pkl, ...): a copy repeats another "
                  "rank's random streams");
  mount->add_option("--weights-dtype", a->weights_dtype,
                    "The dtype of the Hugging Face weights shown beside a root's config.json: "
                    "bf16, fp16 or fp32 (default: the training dtype)");
  mount->add_flag("--no-prefetch", a->no_prefetch,
                  "Tuning: don't read ahead in the source files (to measure what it buys)");
  mount->add_flag("--no-splice", a->no_splice,
                  "Tuning: copy source bytes to the kernel instead of splicing them");
  mount->add_flag("--drop-source-pages", a->drop_source_pages,
                  "Tuning: drop the source files' pages from the page cache once served (half "
                  "the page cache a cold read fills, for a fifth less throughput)");
  mount->add_flag("--no-direct-writes", a->no_direct_writes,
                  "Tuning: with --upper, write through the mount's page cache instead of "
                  "handing write-only opens' bytes to the daemon directly");
  mount->add_flag("-v,--verbose", *verbosity, "More log output (repeat for more)");
  return mount;
}

CLI::App* AddExportCommand(CLI::App& app, ucfs::cli::ExportArgs* a, int* verbosity) {
  CLI::App* export_cmd = app.add_subcommand(
      "export",
      "Write a view out as real files: the universal checkpoint ds_to_universal.py would "
      "write, or with --world-size the checkpoint at N ranks, or with --fp32 the consolidated "
      "weights; byte-identical to the mount, resumable");
  export_cmd
      ->add_option("CKPT", a->view.checkpoint,
                   "Checkpoint root (with `latest`), tag directory, or a run directory")
      ->required();
  export_cmd->add_option("OUT", a->out, "Output directory (created; outside CKPT)")->required();
  export_cmd->add_option("--tag", a->view.tag, "Tag to export instead of the one `latest` names");
  export_cmd
      ->add_option("--world-size", a->view.world_size,
                   "Export the checkpoint as DeepSpeed would have saved it with N ranks")
      ->check(CLI::Range(1u, ucfs::cli::kMaxWorldSize));
  export_cmd->add_option("--sub-group-size", a->view.sub_group_size,
                         "The run's zero_optimization.sub_group_size, when its ds_config has none");
  export_cmd->add_option("--universal-info", a->view.universal_info,
                         "A JSON file of universal_checkpoint_info keys laid over the saved ones");
  export_cmd
      ->add_option("--layer", a->view.layers,
                   "An earlier mount's --upper directory, laid over CKPT (repeat, oldest first)")
      ->type_size(1)
      ->allow_extra_args(false);
  export_cmd->add_flag("--fp32", a->fp32,
                       "Export the consolidated fp32 weights (<tag>_fp32: pytorch_model.bin, "
                       "model.safetensors) instead");
  export_cmd->add_flag("--crc", a->view.crc,
                       "Write real CRC-32s into the zip records of the universal view's files and "
                       "of the consolidated weights");
  export_cmd->add_option("-j,--threads", a->threads,
                         "Copy threads (default: one per CPU, at least 4)");
  export_cmd->add_flag("--no-sync", a->no_sync,
                       "Do not fsync each file before renaming it into place");
  export_cmd->add_option("--cache-dir", a->view.cache_dir, "Where the index lives");
  export_cmd->add_flag("--no-cache", a->view.no_cache, "Neither read nor write the index");
  export_cmd->add_flag("-v,--verbose", *verbosity, "More log output (repeat for more)");
  return export_cmd;
}

CLI::App* AddUmountCommand(CLI::App& app, std::string* path) {
  CLI::App* umount = app.add_subcommand("umount", "Unmount a ucfs mount (fusermount3 -u)");
  umount->add_option("MNT", *path, "The mountpoint")->required();
  return umount;
}

}  // namespace

int main(int argc, char** argv) {
  // Run as /sbin/mount.fuse.ucfs by mount(8): the same mount, other argv.
  if (argc > 0 && ucfs::cli::IsMountHelper(argv[0])) {
    return ucfs::cli::MountHelperMain(argc, argv, RunMount);
  }
  CLI::App app{
      "ucfs: DeepSpeed checkpoints (ZeRO 1-3, tensor/pipeline-parallel grids, training runs), "
      "mounted as the layout you need"};
  app.set_version_flag("--version", std::string("ucfs ") + UCFS_VERSION);
  app.require_subcommand(1);
  int verbosity = 0;
  app.add_flag("-v,--verbose", verbosity, "More log output (repeat for more)");

  ucfs::cli::InspectArgs in;
  CLI::App* inspect = AddInspectCommand(app, &in, &verbosity);
  ucfs::cli::VerifyArgs va;
  CLI::App* verify = AddVerifyCommand(app, &va, &verbosity);
  std::string show_path;
  CLI::App* show = AddShowCommand(app, &show_path);
  MountArgs m;
  CLI::App* mount = AddMountCommand(app, &m, &verbosity);
  ucfs::cli::ExportArgs x;
  CLI::App* export_cmd = AddExportCommand(app, &x, &verbosity);
  std::string umount_path;
  CLI::App* umount = AddUmountCommand(app, &umount_path);

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
  if (*inspect) return ucfs::cli::RunInspect(in);
  if (*verify) return ucfs::cli::RunVerify(va);
  if (*show) return RunShow(show_path);
  if (*umount) return RunUmount(umount_path);
  if (*export_cmd) return ucfs::cli::RunExport(x);
  return kExitUsage;
}
