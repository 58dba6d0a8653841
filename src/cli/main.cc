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
#include <optional>
#include <string>

#include "cli/export_command.h"
#include "cli/inspect_command.h"
#include "cli/logging.h"
#include "cli/mount_args.h"
#include "cli/mount_command.h"
#include "cli/mount_helper.h"
#include "cli/mount_options.h"
#include "cli/verify_command.h"
#include "ucfs/base/path.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/codec/describe.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/mount/shared_index.h"

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

// `ucfs index`: the tag's shared index written beside it (mount/shared_index.h).
struct IndexArgs {
  std::string checkpoint;
  std::optional<std::string> tag;
  std::optional<std::string> index_dir;
};

int RunIndex(const IndexArgs& a) {
  auto path = ucfs::RealPath(a.checkpoint);
  if (!path.ok()) return Fail("index", path.status());
  std::optional<std::string> index_dir;
  if (a.index_dir) {
    auto dir = ucfs::RealPath(*a.index_dir);
    if (!dir.ok()) return Fail("index", dir.status());
    index_dir = *dir;
  }
  ucfs::Env& host = *ucfs::Env::Posix();
  if (!ucfs::IsCheckpointDirectory(host, *path) && host.IsDirectory(*path)) {
    // A run directory: every tag of every root, the current ones left be.
    if (a.tag) {
      return Fail("index", ucfs::Status::InvalidArgument(
                               *path + " is a run directory: --tag takes one of its roots; "
                                       "without it every tag of every root is indexed"));
    }
    auto tags = ucfs::WriteRunIndexes(host, *path, index_dir);
    if (!tags.ok()) return Fail("index", tags.status());
    int failed = 0;
    for (const ucfs::TagIndexed& t : *tags) {
      if (!t.error.ok()) {
        ++failed;
        Fail("index", t.error.Annotate(t.tag_dir));
      } else {
        std::cout << (t.written ? "written " : "current ") << t.index_file << "\n";
      }
    }
    return failed == 0 ? 0 : kExitCheckpointError;
  }
  auto written = ucfs::WriteSharedIndex(host, *path, a.tag, index_dir);
  if (!written.ok()) return Fail("index", written.status());
  std::cout << *written << "\n";
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

CLI::App* AddMountCommand(CLI::App& app, MountArgs* a) {
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
  ucfs::cli::AddMountOptions(*mount, a, /*for_export=*/false);
  return mount;
}

CLI::App* AddExportCommand(CLI::App& app, ucfs::cli::ExportArgs* a) {
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
  ucfs::cli::AddMountOptions(*export_cmd, &a->view, /*for_export=*/true);
  export_cmd->add_flag("--fp32", a->fp32,
                       "Export the consolidated fp32 weights (<tag>_fp32: pytorch_model.bin, "
                       "model.safetensors) instead");
  export_cmd->add_option("-j,--threads", a->threads,
                         "Copy threads (default: one per CPU, at least 4)");
  export_cmd->add_flag("--no-sync", a->no_sync,
                       "Do not fsync each file before renaming it into place");
  return export_cmd;
}

CLI::App* AddIndexCommand(CLI::App& app, IndexArgs* a, int* verbosity) {
  CLI::App* index = app.add_subcommand(
      "index",
      "Write a checkpoint tag's shared index beside it (<root>/<tag>.ucfs-index): what every "
      "node's mount would otherwise ask the file system about each rank file, read once. Run it "
      "after a save; a mount that finds a current one opens no rank file until bytes are read. "
      "Of a run directory: every tag of every root, those with a current index left as they are");
  index
      ->add_option("CKPT", a->checkpoint,
                   "Checkpoint root (with `latest`), tag directory or run directory")
      ->required();
  index->add_option("--tag", a->tag, "Tag to index instead of the one `latest` names");
  index->add_option("--index-dir", a->index_dir,
                    "Write it into DIR (as <tag>-<hash>.ucfs-index) instead of beside the tag, "
                    "for a checkpoint you cannot write into; mount with the same --index-dir");
  index->add_flag("-v,--verbose", *verbosity, "More log output (repeat for more)");
  return index;
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
  CLI::App* mount = AddMountCommand(app, &m);
  ucfs::cli::ExportArgs x;
  CLI::App* export_cmd = AddExportCommand(app, &x);
  std::string umount_path;
  CLI::App* umount = AddUmountCommand(app, &umount_path);
  IndexArgs ix;
  CLI::App* index = AddIndexCommand(app, &ix, &verbosity);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (*mount) {
    if (m.fuse_debug) m.foreground = true;
    m.verbosity += verbosity;
    return ucfs::cli::RunMount(std::move(m));
  }
  x.view.verbosity += verbosity;
  ucfs::cli::SetUpLogging(*export_cmd ? x.view.verbosity : verbosity, "", false);
  if (*inspect) return ucfs::cli::RunInspect(in);
  if (*verify) return ucfs::cli::RunVerify(va);
  if (*show) return RunShow(show_path);
  if (*umount) return RunUmount(umount_path);
  if (*index) return RunIndex(ix);
  if (*export_cmd) return ucfs::cli::RunExport(x);
  return kExitUsage;
}
