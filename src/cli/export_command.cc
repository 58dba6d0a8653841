#include "cli/export_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/progress.h"
#include "cli/view_setup.h"
#include "ucfs/tools/export.h"

namespace ucfs::cli {

int RunExport(const ExportArgs& a) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  ViewRequest request = a.view;
  request.checkpoint = fs::absolute(a.view.checkpoint, ec).lexically_normal().string();
  const std::string out = fs::absolute(a.out, ec).lexically_normal().string();
  if (a.fp32 && request.world_size) {
    std::fprintf(stderr,
                 "ucfs export: --fp32 exports the consolidated weights, which are the same at "
                 "every world size: drop --world-size\n");
    return 2;
  }
  auto opened = OpenView(request);
  if (!opened.ok()) {
    std::fprintf(stderr, "ucfs export: %s\n",
                 ucfs::TerminalSafe(opened.status().message()).c_str());
    return 1;
  }
  if (opened->checkpoint == nullptr) {
    std::fprintf(stderr,
                 "ucfs export: %s is a run directory: export one of its checkpoint roots for "
                 "now\n",
                 ucfs::TerminalSafe(request.checkpoint).c_str());
    return 2;
  }
  const std::vector<std::string> roots =
      a.fp32 ? std::vector<std::string>{opened->consolidated_root} : opened->layout_roots;
  // The source is never written: neither OUT nor anything written below it
  // may be, or hold, the checkpoint's root or tag directory (a tag
  // directory given as CKPT has its root beside it).
  std::vector<std::pair<std::string, Placement>> targets = {{out, Placement::kOutside}};
  for (const std::string& root : roots) targets.emplace_back(out + "/" + root, Placement::kApart);
  for (const auto& [path, placement] : targets) {
    Status s = CheckPlacement(opened->source_dirs, "the output", path, placement);
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
