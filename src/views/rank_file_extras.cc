#include "ucfs/views/rank_file_extras.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "ucfs/checkpoint/rank_families.h"

namespace ucfs {

View::SourceDirExtras RankFileExtras(const std::string& dir, const std::vector<DirEntry>& entries,
                                     const RankFileOptions& options) {
  View::SourceDirExtras extras;
  const uint32_t saved = options.saved_world_size;
  const uint32_t n = options.world_size;
  if (saved == 0 || n == 0) return extras;
  std::vector<std::string> files;
  for (const DirEntry& e : entries) {
    if (!e.is_dir) files.push_back(e.name);
  }
  RankFamilies families = FindRankFamilies(files, saved);
  for (const std::string& problem : families.problems) {
    spdlog::warn("{}: {}", TerminalSafe(dir), TerminalSafe(problem));
  }
  for (const RankFamily& family : families.complete) {
    for (uint32_t r = n; r < saved; ++r) extras.hidden.push_back(family.NameFor(r));
    if (options.copy_new_ranks) {
      for (uint32_t r = saved; r < n; ++r) {
        extras.copies.push_back({family.NameFor(r), family.NameFor(r % saved)});
      }
    }
    const std::string single = SingleRankName(family);
    const bool on_disk = std::find(files.begin(), files.end(), single) != files.end();
    if (n == 1 && !single.empty() && !on_disk) {
      extras.copies.push_back({single, family.NameFor(0)});
    }
  }
  return extras;
}

}  // namespace ucfs
