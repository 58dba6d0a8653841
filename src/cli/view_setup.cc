#include "cli/view_setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ucfs/consolidated_view.h"
#include "ucfs/index.h"
#include "ucfs/reshard_view.h"
#include "ucfs/universal_view.h"

namespace ucfs::cli {

Result<OpenedView> OpenView(const ViewRequest& r) {
  std::unique_ptr<SummaryIndex> index;
  if (!r.no_cache) {
    auto opened = SummaryIndex::Open(*Env::Posix(), r.cache_dir.value_or(DefaultIndexDir()));
    if (opened.ok()) {
      index = std::move(opened).value();
    } else {
      spdlog::warn("{} (going on without the index)", opened.status().message());
    }
  }
  CheckpointOptions options;
  options.tag = r.tag;
  options.source = index.get();
  UCFS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(*Env::Posix(), r.checkpoint, options));
  OpenedView out;
  out.checkpoint = std::make_shared<const Checkpoint>(std::move(ckpt));
  out.index_note = index ? fmt::format("{} rank files from the index, {} read", index->cache_hits(),
                                       index->cache_misses())
                         : "no index";
  const std::string& tag = out.checkpoint->files().tag;
  if (r.world_size) {
    UCFS_ASSIGN_OR_RETURN(out.view, BuildReshardView(*Env::Posix(), out.checkpoint,
                                                     {*r.world_size, r.sub_group_size}));
    out.layout_roots = {"latest", tag};
  } else {
    UniversalViewOptions view_options;
    view_options.compute_crc = r.crc;
    UCFS_ASSIGN_OR_RETURN(out.view,
                          BuildUniversalView(*Env::Posix(), out.checkpoint, view_options));
    out.layout_roots = {"latest_universal", UniversalTag(tag)};
  }
  out.consolidated_root = ConsolidatedDirName(tag);
  return out;
}

}  // namespace ucfs::cli
