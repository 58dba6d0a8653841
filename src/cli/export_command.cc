#include "cli/export_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <variant>

#include "cli/mount_options.h"
#include "cli/progress.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/mount/placement.h"
#include "ucfs/tools/export.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs::cli {

namespace {

// What exporting a run directory writes: at N the whole run as the mount
// shows it (a run to resume from at N, its trainers' files included);
// else what ds_to_universal (or, with --fp32, zero_to_fp32) would have
// written into each root: its <tag>_universal/ and latest_universal (or
// <tag>_fp32/), at the same paths.
Result<std::vector<std::string>> RunExportRoots(const MountPlan& opened,
                                                const MountRequest& request, bool fp32) {
  std::vector<std::string> roots;
  if (request.world_size) {
    UCFS_ASSIGN_OR_RETURN(auto entries, opened.view->ReadDir(kRootInode));
    for (const auto& [name, attr] : entries) roots.push_back(name);
    return roots;
  }
  const std::string& run = opened.source_dirs.front();
  UCFS_ASSIGN_OR_RETURN(std::vector<RootListing> found, FindRoots(*opened.env, run));
  for (const RootListing& root : found) {
    std::string rel = root.dir.size() > run.size() ? root.dir.substr(run.size() + 1) : "";
    if (!rel.empty()) rel += "/";
    for (const TagListing& tag : root.tags) {
      if (!tag.complete) continue;
      roots.push_back(rel + (fp32 ? ConsolidatedDirName(tag.name) : UniversalTag(tag.name)));
    }
    if (!fp32 && root.latest) roots.push_back(rel + "latest_universal");
  }
  return roots;
}

}  // namespace

int RunExport(const ExportArgs& a) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  auto requested = RequestOf(a.view);
  if (!requested.ok()) {
    std::fprintf(stderr, "ucfs export: %s\n", TerminalSafe(requested.status().message()).c_str());
    return 2;
  }
  MountRequest request = std::move(requested).value();
  // A run exported at N is a run to resume from: no views in it.
  request.extra_views = !request.world_size;
  const std::string out = fs::absolute(a.out, ec).lexically_normal().string();
  if (a.fp32 && request.world_size) {
    std::fprintf(stderr,
                 "ucfs export: --fp32 exports the consolidated weights, which are the same at "
                 "every world size: drop --world-size\n");
    return 2;
  }
  auto opened = PlanMount(*Env::Posix(), request);
  if (!opened.ok()) {
    std::fprintf(stderr, "ucfs export: %s\n",
                 ucfs::TerminalSafe(opened.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> roots =
      a.fp32 ? std::vector<std::string>{opened->consolidated_root} : opened->layout_roots;
  if (std::holds_alternative<RunDirectoryMount>(opened->kind)) {
    auto run_roots = RunExportRoots(*opened, request, a.fp32);
    if (!run_roots.ok()) {
      std::fprintf(stderr, "ucfs export: %s\n",
                   ucfs::TerminalSafe(run_roots.status().message()).c_str());
      return 1;
    }
    roots = std::move(run_roots).value();
  }
  // The source is never written: neither OUT nor anything written below it
  // may be, or hold, the checkpoint's root or tag directory (a tag
  // directory given as CKPT has its root beside it).
  std::vector<std::pair<std::string, Placement>> targets = {{out, Placement::kOutside}};
  for (const std::string& root : roots) targets.emplace_back(out + "/" + root, Placement::kApart);
  for (const auto& [path, placement] : targets) {
    Status s = CheckPlacement(*Env::Posix(), opened->source_dirs, "the output", path, placement);
    if (!s.ok()) {
      std::fprintf(stderr, "ucfs export: %s\n", ucfs::TerminalSafe(s.message()).c_str());
      return 2;
    }
  }
  auto files = ListExport(*opened->view, roots);
  if (!files.ok()) {
    std::fprintf(stderr, "ucfs export: %s\n", ucfs::TerminalSafe(files.status().message()).c_str());
    return 1;
  }
  uint64_t total = 0;
  for (const ExportFile& f : *files) total += f.size;
  Progress progress("exporting", total);
  ExportOptions options;
  options.threads = a.threads;
  options.sync = !a.no_sync;
  options.on_bytes = [&](uint64_t n) { progress.Add(n); };
  auto stats = Export(*opened->view, out, *files, options);
  if (!stats.ok()) {
    progress.Finish("ucfs export: " + ucfs::TerminalSafe(stats.status().message()) +
                    " (files already written stay; run it again to go on)");
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string summary = "exported " + std::to_string(stats->files_written) + " files (" +
                        Progress::Bytes(static_cast<double>(stats->bytes_written)) + ") to " + out +
                        " in " + Progress::Duration(s);
  if (stats->files_skipped > 0) {
    summary += "; " + std::to_string(stats->files_skipped) + " were already there";
  }
  progress.Finish(summary);
  return 0;
}

}  // namespace ucfs::cli
