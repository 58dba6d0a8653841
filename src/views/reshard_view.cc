#include "ucfs/views/reshard_view.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include "ucfs/vfs/lazy_content.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/rank_file_extras.h"
#include "ucfs/views/torch_pickle_builder.h"
#include "views/reshard_rank_files.h"
#include "views/universal_files.h"

namespace ucfs {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

namespace {

// The rank files of checkpoint `ckpt` (a shard group: their names carry its
// mp rank) at the layout's world size, each given to `add`: built on first
// use (LazyContent); rank 0's and rank N-1's at once, so that a checkpoint
// the view cannot serve fails the mount, not a read.
Status ForEachRankFile(
    std::shared_ptr<const Checkpoint> ckpt, std::shared_ptr<const ReshardLayout> shared_layout,
    std::shared_ptr<ContentCache> cache,
    const std::function<Status(const std::string&, std::shared_ptr<const FileContent>)>& add) {
  const CheckpointFiles& files = ckpt->files();
  const uint32_t mp = files.mp_rank;
  const bool flat_groups = ckpt->partitioning() == Partitioning::kFlatGroup;
  auto templates = NewRankFileTemplates();
  if (flat_groups) {
    UCFS_ASSIGN_OR_RETURN(auto model, SharedModelFile(ckpt, *shared_layout));
    UCFS_RETURN_IF_ERROR(add(SharedModelFileName(mp), std::move(model)));
  }
  for (uint32_t s = 0; s < shared_layout->world_size; ++s) {
    auto optim = std::make_shared<LazyContent>(
        [ckpt, shared_layout, s, flat_groups,
         templates]() -> Result<std::shared_ptr<const FileContent>> {
          UCFS_ASSIGN_OR_RETURN(auto built,
                                flat_groups ? FlatGroupOptimizerFile(ckpt, *shared_layout, s)
                                            : OptimizerFile(ckpt, *shared_layout, s, *templates));
          return std::shared_ptr<const FileContent>(std::move(built));
        },
        cache);
    const std::string optim_name =
        RankFileNameFor(RankFileName::Kind::kOptim, files.optim_prefix, s, mp);
    if (flat_groups) {
      if (s == 0 || s + 1 == shared_layout->world_size) {
        std::vector<ReadPiece> probe;
        UCFS_RETURN_IF_ERROR(optim->Plan(0, 1, &probe));
      }
      UCFS_RETURN_IF_ERROR(add(optim_name, std::move(optim)));
      continue;
    }
    auto model = std::make_shared<LazyContent>(
        [ckpt, shared_layout, s, templates]() -> Result<std::shared_ptr<const FileContent>> {
          UCFS_ASSIGN_OR_RETURN(auto built, ModelFile(ckpt, *shared_layout, s, *templates));
          return std::shared_ptr<const FileContent>(std::move(built));
        },
        cache);
    if (s == 0 || s + 1 == shared_layout->world_size) {
      std::vector<ReadPiece> probe;
      UCFS_RETURN_IF_ERROR(optim->Plan(0, 1, &probe));
      UCFS_RETURN_IF_ERROR(model->Plan(0, 1, &probe));
    }
    UCFS_RETURN_IF_ERROR(add(optim_name, std::move(optim)));
    UCFS_RETURN_IF_ERROR(
        add(RankFileNameFor(RankFileName::Kind::kModel, "", s, mp), std::move(model)));
  }
  return Status::OK();
}

// The root (passed through, `latest` naming the tag) and the tag
// directory, which passes its other files through (OpenRLHF's metric.json)
// and hides its saved rank files: the ones built here take their names, and
// ranks beyond N are gone. The frameworks' per-rank files are shown at N.
Result<InodeId> AddRootAndTag(Env& env, View& view, const CheckpointFiles& files,
                              uint32_t saved_world_size, const ReshardOptions& options) {
  if (!files.root.empty()) view.BackRootBy(files.root);
  UCFS_RETURN_IF_ERROR(AddLatestFile(env, view, files, "latest", files.tag));
  UCFS_ASSIGN_OR_RETURN(InodeId tag_dir,
                        files.tag_dir.empty()
                            ? view.AddDirectory(kRootInode, files.tag)
                            : view.AddSourceDirectory(kRootInode, files.tag, files.tag_dir));
  RankFileOptions rank_files;
  rank_files.saved_world_size = saved_world_size;
  rank_files.world_size = options.world_size;
  rank_files.copy_new_ranks = options.copy_rank_files;
  view.DecorateSourceDirectories([tag_dir = files.tag_dir, rank_files](
                                     const std::string& dir, const std::vector<DirEntry>& entries) {
    View::SourceDirExtras extras = RankFileExtras(dir, entries, rank_files);
    if (dir == tag_dir) {
      for (const DirEntry& e : entries) {
        if (!e.is_dir && ParseRankFileName(e.name)) extras.hidden.push_back(e.name);
      }
    }
    return extras;
  });
  return tag_dir;
}

}  // namespace

Result<std::unique_ptr<View>> BuildReshardView(Env& env,
                                               std::shared_ptr<const ParallelCheckpoint> pc,
                                               const ReshardOptions& options) {
  int64_t mtime = 0;
  for (const auto& s : pc->sources()) mtime = std::max(mtime, s.identity.mtime_ns);
  auto view = std::make_unique<View>(env, mtime);
  // The grid's sources, shard group 0's first: its files and <tag>_fp32
  // name them as they are.
  for (const auto& s : pc->sources()) view->AddSource(s);
  // Every (mp, dp) rank file is built anew (the mp_rank_NN model states
  // too, put in place of the saved ones); layer files pass through.
  UCFS_ASSIGN_OR_RETURN(InodeId tag_dir,
                        AddRootAndTag(env, *view, pc->shard(0).files(), pc->degrees().dp, options));
  auto cache = std::make_shared<ContentCache>(options.cached_bytes);
  View::SourceDirExtras built;
  for (uint32_t m = 0; m < pc->degrees().mp(); ++m) {
    std::shared_ptr<const Checkpoint> shard(pc, &pc->shard(m));
    UCFS_ASSIGN_OR_RETURN(ReshardLayout layout, PlanReshard(*shard, options));
    auto shared_layout = std::make_shared<const ReshardLayout>(std::move(layout));
    if (m == 0) {
      UCFS_RETURN_IF_ERROR(
          ForEachRankFile(shard, shared_layout, cache,
                          [&](const std::string& name, std::shared_ptr<const FileContent> content) {
                            return view->AddFile(tag_dir, name, std::move(content)).status();
                          }));
      continue;
    }
    // Later shard groups' files name their own sources: a table of them.
    auto table = std::make_shared<const std::vector<SourceFile>>(shard->sources());
    std::vector<FileAccess> accesses;
    for (const SourceFile& f : *table) {
      if (!f.path.empty()) accesses.push_back(f.access);
    }
    const FileAccess access = StrictestAccess(accesses, FileAccess{0444, 0, 0});
    UCFS_RETURN_IF_ERROR(ForEachRankFile(
        shard, shared_layout, cache,
        [&](const std::string& name, std::shared_ptr<const FileContent> content) {
          built.files.push_back({name, std::move(content), mtime,
                                 FileAccess{access.mode & 0666, access.uid, access.gid}, table});
          return Status::OK();
        }));
  }
  if (!built.files.empty()) {
    UCFS_RETURN_IF_ERROR(view->PutExtras(tag_dir, std::move(built)));
  }
  if (options.consolidated) AddConsolidatedDirOrWarn(env, *view, pc, *options.consolidated);
  return view;
}

Result<std::unique_ptr<View>> BuildReshardView(Env& env,
                                               std::shared_ptr<const Checkpoint> checkpoint,
                                               const ReshardOptions& options) {
  return BuildReshardView(env, ParallelCheckpoint::SharedOfDataParallel(std::move(checkpoint)),
                          options);
}

}  // namespace ucfs
