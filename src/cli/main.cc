// ucfs: the command-line tool. A thin layer over the core library: parse
// arguments, call it, print its answer or its error.
//
// Exit codes: 0 success; 1 the checkpoint could not be read (the message
// names the file and the problem); 2 bad usage.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "ucfs/checkpoint.h"
#include "ucfs/describe.h"
#include "ucfs/inspect.h"
#include "ucfs/zip.h"

#ifndef UCFS_VERSION
#define UCFS_VERSION "unknown"
#endif

namespace {

constexpr int kExitCheckpointError = 1;
constexpr int kExitUsage = 2;

void SetUpLogging(int verbosity) {
  // Logs go to stderr so that stdout stays clean for --json.
  auto logger = spdlog::stderr_color_mt("ucfs");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("ucfs: %^%l%$: %v");
  spdlog::set_level(verbosity >= 2   ? spdlog::level::trace
                    : verbosity == 1 ? spdlog::level::debug
                                     : spdlog::level::warn);
}

int RunInspect(const std::string& path, const std::optional<std::string>& tag, bool json) {
  ucfs::CheckpointOptions options;
  options.tag = tag;
  auto ckpt = ucfs::Checkpoint::Open(*ucfs::Env::Posix(), path, options);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "ucfs inspect: %s\n", ckpt.status().message().c_str());
    return kExitCheckpointError;
  }
  if (json) {
    std::cout << ucfs::InspectJson(*ckpt).dump(2) << "\n";
  } else {
    std::cout << ucfs::InspectText(*ckpt);
  }
  return 0;
}

// Prints a torch.save file's pickle without executing it.
int RunShow(const std::string& path) {
  auto fail = [&](const ucfs::Status& s) {
    std::fprintf(stderr, "ucfs show: %s\n", s.message().c_str());
    return kExitCheckpointError;
  };
  auto file = ucfs::Env::Posix()->Open(path);
  if (!file.ok()) return fail(file.status());
  auto archive = ucfs::ZipArchive::Open(**file);
  if (!archive.ok()) return fail(archive.status());
  const ucfs::ZipRecord* pkl = archive->Find("data.pkl");
  if (pkl == nullptr) return fail(ucfs::Status::Corruption(path + ": no data.pkl record"));
  auto bytes = ucfs::ZipArchive::ReadRecord(**file, *pkl);
  if (!bytes.ok()) return fail(bytes.status());
  auto doc = ucfs::pickle::Parse(*bytes);
  if (!doc.ok()) return fail(doc.status().Annotate(path + ": data.pkl"));
  std::cout << ucfs::Describe(*doc, doc->root());
  return 0;
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  SetUpLogging(verbosity);
  if (*inspect) return RunInspect(path, tag, json);
  if (*show) return RunShow(show_path);
  return kExitUsage;
}
