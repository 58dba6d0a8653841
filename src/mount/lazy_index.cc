#include "mount/lazy_index.h"

#include <spdlog/spdlog.h>

#include "ucfs/base/status.h"

namespace ucfs {

Result<TorchFileSummary> LazyIndex::Summarize(const std::string& path) {
  std::call_once(opened_, [this] {
    auto opened = SummaryIndex::Open(env_, dir_);
    if (opened.ok()) {
      index_ = std::move(opened).value();
    } else {
      spdlog::warn("{} (going on without the index)", TerminalSafe(opened.status().message()));
    }
  });
  return index_ ? index_->Summarize(path) : direct_.Summarize(path);
}

std::string IndexDir(const std::optional<std::string>& cache_dir) {
  IndexPlacement placed = PlaceIndex(cache_dir);
  if (!placed.note.empty()) spdlog::info("{}", TerminalSafe(placed.note));
  spdlog::debug("index: {}", TerminalSafe(placed.dir));
  return placed.dir;
}

}  // namespace ucfs
