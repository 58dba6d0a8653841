#include "cli/inspect_command.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/inspect_report.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/mount/source_env.h"

namespace ucfs::cli {
namespace {

using json = nlohmann::ordered_json;

void PrintError(const Status& s) {
  std::fprintf(stderr, "ucfs inspect: %s\n", TerminalSafe(s.message()).c_str());
}

// The checkpoint at `path` as the grid it is: a tensor- or pipeline-
// parallel one with its shard groups, a data-parallel one as 1 x 1 x D
// (with the name table of a Megatron-DeepSpeed run saved at T = 1).
Result<ParallelCheckpoint> OpenGrid(Env& env, const std::string& path,
                                    const CheckpointOptions& options) {
  if (auto grid = ListParallelCheckpointFiles(env, path, options.tag);
      grid.ok() && grid->degrees.mp() > 1) {
    return ParallelCheckpoint::OpenListed(env, std::move(grid).value(), options);
  }
  UCFS_ASSIGN_OR_RETURN(Checkpoint opened, Checkpoint::Open(env, path, options));
  return ParallelCheckpoint::OfDataParallel(std::make_shared<const Checkpoint>(std::move(opened)));
}

std::string Dump(const json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

// inspect of a run directory: every tag of every root, one report each.
int RunInspectRun(Env& env, const std::string& path, const InspectArgs& a,
                  const CheckpointOptions& base) {
  auto roots = FindRoots(env, path);
  if (!roots.ok()) {
    PrintError(roots.status());
    return 1;
  }
  auto reports = json::array();
  int status = 0;
  for (const RootListing& root : *roots) {
    for (const TagListing& tag : root.tags) {
      CheckpointOptions options = base;
      options.tag = tag.name;
      auto grid = OpenGrid(env, root.dir, options);
      if (!grid.ok()) {
        status = 1;
        PrintError(grid.status());
        reports.push_back(
            {{"root", root.dir}, {"tag", tag.name}, {"error", grid.status().message()}});
        continue;
      }
      if (a.json) {
        reports.push_back({{"root", root.dir}, {"tag", tag.name}, {"report", InspectJson(*grid)}});
      } else {
        std::cout << "== " << TerminalSafe(root.dir) << "  (tag " << TerminalSafe(tag.name) << ")\n"
                  << InspectText(*grid) << "\n";
      }
    }
  }
  if (a.json) std::cout << Dump({{"run", path}, {"checkpoints", std::move(reports)}}) << "\n";
  return status;
}

}  // namespace

int RunInspect(const InspectArgs& a) {
  CheckpointOptions options;
  options.tag = a.tag;
  auto supplied = ReadSuppliedUniversalInfo(*Env::Posix(), a.universal_info);
  if (!supplied.ok()) {
    PrintError(supplied.status());
    return 1;
  }
  options.universal_info = *supplied;
  auto source = OpenCheckpointEnv(*Env::Posix(), a.path);
  if (!source.ok()) {
    PrintError(source.status());
    return 1;
  }
  if (!a.tag && !IsCheckpointDirectory(*source->env, source->path) &&
      source->env->IsDirectory(source->path)) {
    return RunInspectRun(*source->env, source->path, a, options);
  }
  auto grid = OpenGrid(*source->env, source->path, options);
  if (!grid.ok()) {
    PrintError(grid.status());
    return 1;
  }
  std::cout << (a.json ? Dump(InspectJson(*grid)) + "\n" : InspectText(*grid));
  return 0;
}

}  // namespace ucfs::cli
