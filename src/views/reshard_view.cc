#include "ucfs/views/reshard_view.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include "ucfs/checkpoint/expert_topology.h"
#include "ucfs/checkpoint/partition.h"
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

Result<ReshardLayout> PlanReshard(const Checkpoint& c, const ReshardOptions& options) {
  if (options.world_size == 0) return Status::InvalidArgument("world size must be at least 1");
  ReshardLayout layout;
  layout.world_size = options.world_size;
  layout.sub_group_size =
      c.configured_sub_group_size().value_or(options.sub_group_size.value_or(kDefaultSubGroupSize));
  layout.sub_group_of.resize(c.params().size());
  layout.offset_of.resize(c.params().size());
  if (c.partitioning() == Partitioning::kFlatGroup) {
    if (c.round_robin_gradients() && options.world_size != c.world_size()) {
      // DeepSpeed would flatten each group in another order at N
      // (stage_1_and_2.py _round_robin_reorder), which the files do not
      // record: refused rather than guessed.
      return Status::NotSupported(
          c.files().model_files[0] +
          ": trained with zero_optimization.round_robin_gradients, which orders each param "
          "group's flat buffer by the world size; the reshard view cannot show it at another "
          "world size (the universal view and the consolidated weights can)");
    }
    // ZeRO-1/2: the same param groups, in the same order, each cut into N
    // partitions of its own; an expert group's buffer of each EP rank into
    // N / EP, over that EP rank's EDP group at N (expert_topology.h).
    for (uint32_t k = 0; k < c.sub_groups().size(); ++k) {
      SubGroupInfo sg = c.sub_groups()[k];
      if (options.world_size % sg.expert_parallel != 0) {
        return Status::NotSupported(
            c.files().model_files[0] + ": param group " + std::to_string(sg.param_group) +
            " holds experts over " + std::to_string(sg.expert_parallel) +
            " expert-parallel ranks, which DeepSpeed keeps at any world size: N must be a "
            "multiple of " +
            std::to_string(sg.expert_parallel) + ", not " + std::to_string(options.world_size));
      }
      sg.members =
          ExpertTopology{options.world_size, sg.expert_parallel, c.data_before_expert_parallelism()}
              .Members(sg.family);
      sg.partition_numel = FlatPartitionNumel(sg.numel, sg.partition_world());
      for (uint32_t p : sg.params) {
        layout.sub_group_of[p] = k;
        layout.offset_of[p] = c.params()[p].offset;
      }
      layout.sub_groups.push_back(std::move(sg));
      layout.old_sub_group.push_back(k);
    }
    return layout;
  }
  if (c.expert_parallel() > 1) {
    // Each rank's file would need its own ds_zero_partition_groups and
    // ds_autoep_layers (EP rank, EDP rank, experts) at N: not built yet.
    return Status::NotSupported(
        c.files().model_files[0] +
        ": AutoEP experts at ZeRO-3 (ds_zero_partition_groups): the reshard view does not yet "
        "write each rank's expert partition groups at another world size; the universal view "
        "serves the checkpoint, and DeepSpeed's universal loader resumes it at any EP and D");
  }
  // Each param group's params, in order: its old sub-groups concatenated.
  for (uint32_t g = 0; g < c.param_group_count(); ++g) {
    std::vector<uint32_t> params;
    std::vector<uint32_t> old_of;  // the old sub-group of each
    for (uint32_t k = 0; k < c.sub_groups().size(); ++k) {
      if (c.sub_groups()[k].param_group != g) continue;
      for (uint32_t p : c.sub_groups()[k].params) {
        params.push_back(p);
        old_of.push_back(k);
      }
    }
    std::vector<uint64_t> parts;
    for (uint32_t p : params)
      parts.push_back(PartitionNumel(c.params()[p].numel, options.world_size));
    size_t next = 0;
    for (uint32_t count : SplitSubGroups(parts, layout.sub_group_size)) {
      SubGroupInfo sg;
      sg.param_group = g;
      const auto index = static_cast<uint32_t>(layout.sub_groups.size());
      layout.old_sub_group.push_back(old_of[next]);
      for (uint32_t i = 0; i < count; ++i, ++next) {
        const uint32_t p = params[next];
        layout.sub_group_of[p] = index;
        layout.offset_of[p] = sg.partition_numel;
        sg.partition_numel += parts[next];
        sg.params.push_back(p);
      }
      layout.sub_groups.push_back(std::move(sg));
    }
  }
  return layout;
}

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
