#include "ucfs/mount/mount_plan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "mount/lazy_index.h"
#include "mount/plan_memo_env.h"
#include "ucfs/checkpoint/batch_size.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/index.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/checkpoint/snapshot_env.h"
#include "ucfs/mount/placement.h"
#include "ucfs/mount/shared_index.h"
#include "ucfs/mount/source_env.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/hf_weights.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/run_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

// <tag>_fp32/ is an extra view: none in a writable mount without --views.
std::optional<ConsolidatedOptions> ConsolidatedOf(const MountRequest& r) {
  if (!r.extra_views) return std::nullopt;
  ConsolidatedOptions consolidated;
  consolidated.compute_crc = r.crc;
  return consolidated;
}

ReshardOptions ReshardOf(const MountRequest& r) {
  ReshardOptions reshard;
  reshard.world_size = r.world_size.value_or(0);
  reshard.sub_group_size = r.sub_group_size;
  reshard.copy_rank_files = r.copy_rank_files;
  reshard.consolidated = ConsolidatedOf(r);
  return reshard;
}

UniversalViewOptions UniversalOf(const MountRequest& r) {
  UniversalViewOptions universal;
  universal.compute_crc = r.crc;
  universal.consolidated = ConsolidatedOf(r);
  return universal;
}

// The options of the run view, and of a root's other tags; `source` is
// what they are read through.
Result<RunViewOptions> RunOptions(Env& host, const MountRequest& r,
                                  const std::shared_ptr<Env>& source, TorchFileSource* index) {
  RunViewOptions options;
  // Each tag's shared index, looked for as the tag is opened; --index-dir
  // is read through the host, confined to it.
  std::shared_ptr<Env> index_env;
  std::optional<std::string> index_dir;
  if (r.index_dir) {
    auto real = host.RealPath(*r.index_dir);
    auto confined = real.ok() ? host.Confine(*real) : Result<std::shared_ptr<Env>>(real.status());
    if (confined.ok()) {
      index_dir = *real;
      index_env = std::move(confined).value();
    } else {
      spdlog::warn("--index-dir {}: {} (going on without it)", TerminalSafe(*r.index_dir),
                   TerminalSafe(confined.status().message()));
    }
  }
  options.shared_index = SharedIndexFinder(source, std::move(index_env), std::move(index_dir));
  UCFS_ASSIGN_OR_RETURN(options.universal_info, ReadSuppliedUniversalInfo(host, r.universal_info));
  options.hf_weights->dtype = r.weights_dtype;
  options.source = index;
  options.universal = UniversalOf(r);
  options.extra_views = r.extra_views;
  if (r.world_size) {
    // A tag's view at N shows only its tag directory: no <tag>_fp32 to make.
    options.reshard = ReshardOf(r);
    options.reshard->consolidated.reset();
  }
  return options;
}

// Checkpoints a trainer saved into --upper through an earlier mount are
// shown as they were saved: at another --world-size they are not resharded
// (the run view serves the source's roots), which a resume from them would
// trip on.
void WarnOfUpperRootsAtOtherSizes(Env& host, const std::string& upper, uint32_t world_size) {
  auto roots = FindRoots(host, upper);
  if (!roots.ok()) return;  // none, or no DIR yet
  for (const RootListing& root : *roots) {
    for (const TagListing& tag : root.tags) {
      if (tag.complete && tag.files().world_size != world_size) {
        spdlog::warn(
            "{}: saved into --upper at {} ranks, shown as saved (not at {}): to resume from it "
            "at {}, mount with --layer {} and a new --upper",
            TerminalSafe(tag.dir), tag.files().world_size, world_size, world_size,
            TerminalSafe(upper));
      }
    }
  }
}

// A run directory (no root or tag itself): its roots, served as they are
// found (src/design/run-directories.md); with --upper, the checkpoints
// saved into it are roots like the source's.
Result<MountPlan> PlanRun(Env& host, const MountRequest& r, MountPlan out, const std::string& path,
                          const std::string& lmdb_dir) {
  // Say now, not at the first ls, when there is nothing to serve.
  UCFS_ASSIGN_OR_RETURN(RootListing first, FindFirstRoot(*out.env, path));
  if (r.tag) {
    return Status::NotSupported(path +
                                " is a run directory, not a checkpoint root or tag directory: "
                                "--tag takes one of its roots (such as " +
                                first.dir + "); every tag of a run is served");
  }
  std::string upper;
  if (r.upper) {
    upper = *r.upper;
    UCFS_ASSIGN_OR_RETURN(out.env, RouteUpper(host, std::move(out.env), path, &upper));
  }
  if (!r.no_cache) out.index = std::make_shared<LazyIndex>(*out.env, lmdb_dir);
  UCFS_ASSIGN_OR_RETURN(RunViewOptions options, RunOptions(host, r, out.env, out.index.get()));
  UCFS_ASSIGN_OR_RETURN(out.view, BuildRunView(*out.env, path, options));
  out.source_dirs = {path};
  out.description =
      std::string("run directory (every root's ") +
      (r.world_size ? "tags at world size " + std::to_string(*r.world_size) : "views") +
      (r.extra_views ? (r.world_size ? " and views" : "") : ", no extra views") +
      ", opened as they are looked into)";
  RunDirectoryMount run;
  if (r.upper) {
    if (r.world_size) WarnOfUpperRootsAtOtherSizes(host, upper, *r.world_size);
    run.views = std::make_shared<UpperRootViews>(out.view, *out.env, std::move(options));
    WritablePlan writable;
    writable.upper_dir = upper;
    writable.options.might_show = &UpperRootViews::MightShow;
    writable.options.on_upper_dir = [views = run.views](const std::string& shown,
                                                        const std::string& dir) {
      return views->Update(shown, dir);
    };
    out.writable = std::move(writable);
  }
  out.kind = std::move(run);
  return out;
}

// The tag's shared index (`ucfs index`), where there is one that still
// describes it: `out.env` then answers from it, and discovery asks the
// source nothing of the tag.
struct SharedTag {
  std::shared_ptr<const TagSnapshot> snapshot;  // null where there is none
  std::string tag_dir;
  std::string index_file;  // where it was read
};
SharedTag ReadSharedTag(Env& host, const MountRequest& r, MountPlan& out,
                        const CheckpointEnv& source) {
  SharedTag shared;
  auto where = LocateTag(*out.env, source.path, r.tag);
  if (!where.ok()) return shared;
  // --index-dir first (outside the checkpoint: read through the host),
  // then beside the tag, where a run directory or a tag without a root
  // has none within reach.
  FoundIndex found =
      FindSharedIndex(&host, r.index_dir, *out.env, *where, IsAtOrBelow(where->root, source.root));
  shared.snapshot = std::move(found.snapshot);
  shared.index_file = std::move(found.index_file);
  if (shared.snapshot) {
    shared.tag_dir = where->tag_dir;
    out.env = std::make_shared<SnapshotEnv>(out.env, shared.tag_dir, shared.snapshot);
  }
  return shared;
}

// A tensor- and pipeline-parallel checkpoint: its universal view, or the
// view at a new D (src/design/model-parallelism.md); both with <tag>_fp32.
Result<MountPlan> PlanGrid(Env& host, const MountRequest& r, MountPlan out,
                           ParallelCheckpointFiles files, const SharedTag& shared) {
  CheckpointOptions options;
  UCFS_ASSIGN_OR_RETURN(options.universal_info, ReadSuppliedUniversalInfo(host, r.universal_info));
  // The rank files' summaries from the shared index, where there is one.
  DirectTorchFileSource direct(*out.env);
  std::optional<SummarySource> from_shared;
  if (shared.snapshot) {
    from_shared.emplace(shared.tag_dir, shared.snapshot, direct);
    options.source = &*from_shared;
  }
  UCFS_ASSIGN_OR_RETURN(ParallelCheckpoint opened,
                        ParallelCheckpoint::OpenListed(*out.env, std::move(files), options));
  GridMount grid{std::make_shared<const ParallelCheckpoint>(std::move(opened))};
  const CheckpointFiles& shard = grid.checkpoint->shard(0).files();
  if (r.world_size) {
    // Pipeline stages and tensor-parallel ranks as saved, D ranks anew.
    UCFS_ASSIGN_OR_RETURN(out.view, BuildReshardView(*out.env, grid.checkpoint, ReshardOf(r)));
    out.layout_roots = {"latest", shard.tag};
  } else {
    UCFS_ASSIGN_OR_RETURN(out.view, BuildUniversalView(*out.env, grid.checkpoint, UniversalOf(r)));
    out.layout_roots = {"latest_universal", UniversalTag(shard.tag)};
  }
  out.consolidated_root = ConsolidatedDirName(shard.tag);
  for (const std::string& dir : {shard.root, shard.tag_dir}) {
    if (!dir.empty()) out.source_dirs.push_back(dir);
  }
  out.description =
      (r.world_size ? "view at " + std::to_string(*r.world_size) + " data-parallel ranks"
                    : std::string("universal view")) +
      " of a tensor- and pipeline-parallel checkpoint (" +
      DescribeDegrees(grid.checkpoint->degrees()) + ")";
  out.kind = std::move(grid);
  return out;
}

// A root mounted alone: model.safetensors beside its config.json, of the
// tag mounted.
Status AddRootHfWeights(const MountRequest& r, Env& env,
                        const std::shared_ptr<const Checkpoint>& checkpoint, View& view) {
  const std::string& root = checkpoint->files().root;
  UCFS_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env.ListDir(root));
  if (!WantsHfWeights(entries)) return Status::OK();
  HfWeightsOptions options;
  options.dtype = r.weights_dtype;
  auto files = HfWeightsFiles(env, checkpoint, options);
  if (!files.ok()) {
    spdlog::warn("{}: no Hugging Face weights beside config.json: {}", TerminalSafe(root),
                 TerminalSafe(files.status().message()));
    return Status::OK();
  }
  for (NamedContent& f : *files) {
    UCFS_RETURN_IF_ERROR(view.AddFile(kRootInode, f.name, std::move(f.content)).status());
  }
  return Status::OK();
}

// A checkpoint root or tag of data-parallel ranks: its universal view, or
// the view at N; the root's other tags and Hugging Face weights beside.
Result<MountPlan> PlanCheckpoint(Env& host, const MountRequest& r, MountPlan out,
                                 const std::string& path, const std::string& lmdb_dir,
                                 const SharedTag& shared) {
  Env& env = *out.env;
  std::unique_ptr<SummaryIndex> index;
  if (!r.no_cache) {
    auto opened = SummaryIndex::Open(env, lmdb_dir);
    if (opened.ok()) {
      index = std::move(opened).value();
    } else {
      spdlog::warn("{} (going on without the index)", TerminalSafe(opened.status().message()));
    }
  }
  DirectTorchFileSource direct(env);
  TorchFileSource& per_node = index ? static_cast<TorchFileSource&>(*index) : direct;
  std::optional<SummarySource> from_shared;
  if (shared.snapshot) from_shared.emplace(shared.tag_dir, shared.snapshot, per_node);
  CheckpointOptions options;
  options.tag = r.tag;
  options.source = from_shared ? static_cast<TorchFileSource*>(&*from_shared) : index.get();
  UCFS_ASSIGN_OR_RETURN(options.universal_info, ReadSuppliedUniversalInfo(host, r.universal_info));
  UCFS_ASSIGN_OR_RETURN(Checkpoint opened, Checkpoint::Open(env, path, options));
  std::string index_note = index ? fmt::format("{} rank files from the index, {} read",
                                               index->cache_hits(), index->cache_misses())
                                 : "no index";
  if (from_shared) {
    index_note = fmt::format("{} rank files from the shared index; ", from_shared->cache_hits()) +
                 index_note;
  }
  CheckpointMount mounted{std::make_shared<const Checkpoint>(std::move(opened)), index_note};
  const std::shared_ptr<const Checkpoint>& checkpoint = mounted.checkpoint;
  const CheckpointFiles& files = checkpoint->files();
  const std::string& tag = files.tag;
  if (r.world_size) {
    if (std::string advice =
            BatchAdvice(checkpoint->batch(), checkpoint->world_size(), *r.world_size);
        !advice.empty()) {
      spdlog::warn("{}: {}", TerminalSafe(files.tag_dir.empty() ? tag : env.Where(files.tag_dir)),
                   advice);
    }
    UCFS_ASSIGN_OR_RETURN(out.view, BuildReshardView(env, checkpoint, ReshardOf(r)));
    out.layout_roots = {"latest", tag};
  } else {
    UCFS_ASSIGN_OR_RETURN(out.view, BuildUniversalView(env, checkpoint, UniversalOf(r)));
    out.layout_roots = {"latest_universal", UniversalTag(tag)};
  }
  out.consolidated_root = ConsolidatedDirName(tag);
  // The root's other tags, opened as they are looked into (in the daemon:
  // the index opens again there), and the Hugging Face weights beside its
  // config.json.
  if (!files.root.empty()) {
    UCFS_RETURN_IF_ERROR(AddRootHfWeights(r, env, checkpoint, *out.view));
    if (!r.no_cache) out.index = std::make_shared<LazyIndex>(env, lmdb_dir);
    UCFS_ASSIGN_OR_RETURN(RunViewOptions run_options,
                          RunOptions(host, r, out.env, out.index.get()));
    UCFS_RETURN_IF_ERROR(AddOtherTagViews(*out.view, env, files.root, tag, run_options));
  }
  for (const std::string& dir : {files.root, files.tag_dir}) {
    if (!dir.empty()) out.source_dirs.push_back(dir);
  }
  out.description =
      r.world_size ? "view at world size " + std::to_string(*r.world_size) : "universal view";
  out.kind = std::move(mounted);
  return out;
}

// The plan of whichever kind the path is, with the tag's shared index
// where `shared_index` and there is a current one.
Result<MountPlan> PlanKindWith(Env& host, const MountRequest& r, const CheckpointEnv& source,
                               bool shared_index, std::string* index_used) {
  MountPlan out;
  out.env = source.env;
  const std::string lmdb_dir = r.no_cache ? "" : IndexDir(r.cache_dir);
  // The tag's shared index first: where it is current, the probes below
  // (a run? a grid?) list the tag from it, not from the source.
  const SharedTag shared = shared_index ? ReadSharedTag(host, r, out, source) : SharedTag{};
  if (shared.snapshot) *index_used = shared.index_file;
  if (!IsCheckpointDirectory(*out.env, source.path) && out.env->IsDirectory(source.path)) {
    return PlanRun(host, r, std::move(out), source.path, lmdb_dir);
  }
  // Read on the way to the index: a TP/PP grid is its own view.
  if (auto grid = ListParallelCheckpointFiles(*out.env, source.path, r.tag);
      grid.ok() && grid->degrees.mp() > 1) {
    return PlanGrid(host, r, std::move(out), std::move(grid).value(), shared);
  }
  return PlanCheckpoint(host, r, std::move(out), source.path, lmdb_dir, shared);
}

// The plan of whichever kind the path is.
Result<MountPlan> PlanKind(Env& host, const MountRequest& r) {
  UCFS_ASSIGN_OR_RETURN(CheckpointEnv source, OpenCheckpointEnv(host, r.checkpoint));
  if (!r.layers.empty()) UCFS_RETURN_IF_ERROR(LayOver(host, r.layers, source));
  std::string index_used;
  auto plan = PlanKindWith(host, r, source, /*shared_index=*/true, &index_used);
  if (plan.ok() || index_used.empty()) return plan;
  // An index that decodes and is current but says what the tag's files do
  // not (written by hand, or by a broken writer) must not make a good
  // checkpoint unmountable, nor blame a rank file for it: the tag is read
  // as if there were none.
  spdlog::warn(
      "{}: the mount failed with this shared index ({}); reading the tag itself (run "
      "`ucfs index` again)",
      TerminalSafe(index_used), TerminalSafe(plan.status().message()));
  return PlanKindWith(host, r, source, /*shared_index=*/false, &index_used);
}

}  // namespace

Status CheckRequest(Env& host, const MountRequest& r) {
  // What the checkpoint's directories will be: its root and the path
  // itself (a tag directory lies inside its root), and the layers.
  std::vector<std::string> source_dirs = {r.checkpoint};
  if (auto root = ResolveCheckpointRoot(host, r.checkpoint); root.ok()) {
    source_dirs.push_back(*root);
  }
  source_dirs.insert(source_dirs.end(), r.layers.begin(), r.layers.end());
  if (r.mountpoint) {
    // A mount over the checkpoint would wait on itself for its own shards.
    UCFS_RETURN_IF_ERROR(CheckMountpoint(host, *r.mountpoint));
    UCFS_RETURN_IF_ERROR(
        CheckPlacement(host, source_dirs, "the mountpoint", *r.mountpoint, Placement::kApart));
  }
  if (r.upper) {
    for (const std::string& layer : r.layers) {
      if (!CheckPlacement(host, {layer}, "--upper", *r.upper, Placement::kApart).ok()) {
        return Status::InvalidArgument("--upper " + *r.upper + " and --layer " + layer +
                                       " overlap: a layer is only read; write into a new "
                                       "directory");
      }
    }
    UCFS_RETURN_IF_ERROR(CheckPlacement(host, source_dirs, "--upper", *r.upper, Placement::kApart));
  }
  return Status::OK();
}

Result<MountPlan> PlanMount(Env& host, const MountRequest& r, bool* request_fault) {
  // The plan's questions to the file system, each asked once
  // (plan_memo_env.h); the daemon then asks them afresh.
  PlanMemoEnv memo(EnvWrapper::NotOwned(&host));
  struct ForgetAtEnd {
    PlanMemoEnv& memo;
    ~ForgetAtEnd() { memo.Forget(); }
  } forget{memo};
  if (Status s = CheckRequest(memo, r); !s.ok()) {
    if (request_fault != nullptr) *request_fault = true;
    return s;
  }
  UCFS_ASSIGN_OR_RETURN(MountPlan plan, PlanKind(memo, r));
  plan.source_dirs.insert(plan.source_dirs.end(), r.layers.begin(), r.layers.end());
  if (r.upper && !plan.writable) {
    // The consolidated weights are shown read-only, --upper or not.
    WritablePlan writable;
    writable.upper_dir = *r.upper;
    writable.options.read_only.push_back(plan.consolidated_root);
    plan.writable = std::move(writable);
  }
  return plan;
}

Result<DType> ParseWeightsDtype(const std::string& text) {
  if (text == "bf16" || text == "bfloat16") return DType::kBFloat16;
  if (text == "fp16" || text == "float16" || text == "half") return DType::kFloat16;
  if (text == "fp32" || text == "float32" || text == "float") return DType::kFloat32;
  return Status::InvalidArgument("--weights-dtype " + text + ": bf16, fp16 or fp32");
}

}  // namespace ucfs
