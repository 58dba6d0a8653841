// ucfs: the command-line tool. A thin layer over the core library: parse
// arguments, call it, print its answer or its error.
//
// Exit codes: 0 success; 1 the checkpoint could not be read or mounted
// (the message names the file and the problem); 2 bad usage.
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/export_command.h"
#include "cli/inspect_command.h"
#include "cli/logging.h"
#include "cli/mount_args.h"
#include "cli/mount_command.h"
#include "cli/mount_helper.h"
#include "cli/verify_command.h"
#include "ucfs/codec/describe.h"
#include "ucfs/codec/torch_file.h"

#ifndef UCFS_VERSION
#define UCFS_VERSION "unknown"
#endif

namespace {

constexpr int kExitCheckpointError = 1;
constexpr int kExitUsage = 2;

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
    return ucfs::cli::MountHelperMain(argc, argv, ucfs::cli::RunMount);
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
    return ucfs::cli::RunMount(std::move(m), verbosity);
  }
  ucfs::cli::SetUpLogging(verbosity, "", false);
  if (*inspect) return ucfs::cli::RunInspect(in);
  if (*verify) return ucfs::cli::RunVerify(va);
  if (*show) return RunShow(show_path);
  if (*umount) return RunUmount(umount_path);
  if (*export_cmd) return ucfs::cli::RunExport(x);
  return kExitUsage;
}
