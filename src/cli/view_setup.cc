#include "cli/view_setup.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "ucfs/checkpoint/batch_size.h"
#include "ucfs/checkpoint/index.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/overlay/layered_env.h"
#include "ucfs/view/consolidated_view.h"
#include "ucfs/view/hf_weights.h"
#include "ucfs/view/parallel_universal_view.h"
#include "ucfs/view/reshard_view.h"
#include "ucfs/view/run_view.h"
#include "ucfs/view/universal_view.h"
#include "ucfs/view/upper_root_views.h"

namespace ucfs::cli {

Result<std::shared_ptr<const SuppliedUniversalInfo>> ReadSuppliedUniversalInfo(
    const std::optional<std::string>& path) {
  if (!path) return std::shared_ptr<const SuppliedUniversalInfo>();
  std::ifstream in(*path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument("--universal-info " + *path + ": cannot be read")
        .WithFile(*path);
  }
  auto info = std::make_shared<SuppliedUniversalInfo>();
  info->path = *path;
  info->json.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return std::shared_ptr<const SuppliedUniversalInfo>(std::move(info));
}

Result<CheckpointEnv> OpenCheckpointEnv(const std::string& path) {
  CheckpointEnv out;
  UCFS_ASSIGN_OR_RETURN(std::string root, ResolveCheckpointRoot(path));
  UCFS_ASSIGN_OR_RETURN(out.env, NewConfinedPosixEnv(root));
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return Status::FromErrno(path, errno);
  out.path = resolved;
  std::free(resolved);
  return out;
}

namespace {

// The checkpoint directory with `layers` laid over it: the Env every view
// of it reads through.
Status LayOver(const std::vector<std::string>& layers, CheckpointEnv& source) {
  UCFS_ASSIGN_OR_RETURN(std::string root, ResolveCheckpointRoot(source.path));
  if (root != source.path) {
    return Status::InvalidArgument(
        "--layer: " + source.path +
        " is a tag directory; a layer lies over what a mount's root showed, so mount its "
        "root (" +
        root + ") or the run directory holding it");
  }
  std::vector<EnvLayer> stack;
  for (const std::string& layer : layers) {
    char* resolved = ::realpath(layer.c_str(), nullptr);
    if (resolved == nullptr) return Status::FromErrno("--layer " + layer, errno);
    std::string dir(resolved);
    std::free(resolved);
    if (!Env::Posix()->IsDirectory(dir)) {
      return Status::InvalidArgument("--layer " + layer + ": not a directory");
    }
    UCFS_RETURN_IF_ERROR(CheckPlacement({source.path}, "--layer", dir, Placement::kApart));
    auto env = NewConfinedPosixEnv(dir);
    if (!env.ok()) return env.status().Annotate("--layer " + layer);
    stack.push_back({std::shared_ptr<Env>(std::move(env).value()), dir});
  }
  source.env = NewLayeredEnv(std::move(source.env), source.path, std::move(stack));
  return Status::OK();
}

// A run's writable mount serves the checkpoints saved into its upper
// directory with views too (upper_root_views.h): the view reads them
// through an Env confined to that directory, made now (as the overlay
// would make it) where it lies apart from the checkpoint. Elsewhere the
// mount refuses it, saying so.
Status RouteUpper(const std::string& upper, const std::vector<std::string>& source_dirs,
                  OpenedView& out) {
  if (!CheckPlacement(source_dirs, "--upper", upper, Placement::kApart).ok()) return Status::OK();
  if (::mkdir(upper.c_str(), 0755) == 0) {
    // The mount's root, shared with its users: 0755 whatever the umask took.
    ::chmod(upper.c_str(), 0755);
    // Made now: the run directory's time, as the overlay gives a root it makes.
    struct stat source {};
    if (::stat(source_dirs.front().c_str(), &source) == 0) {
      const timespec times[2] = {source.st_mtim, source.st_mtim};
      ::utimensat(AT_FDCWD, upper.c_str(), times, 0);
    }
  } else if (errno != EEXIST) {
    return Status::FromErrno("--upper " + upper, errno);
  }
  char* resolved = ::realpath(upper.c_str(), nullptr);
  if (resolved == nullptr) return Status::FromErrno("--upper " + upper, errno);
  out.upper_dir = resolved;
  std::free(resolved);
  auto confined = NewConfinedPosixEnv(out.upper_dir);
  if (!confined.ok()) return confined.status().Annotate("--upper " + upper);
  out.env = NewRoutedEnv(std::move(out.env), out.upper_dir,
                         std::shared_ptr<Env>(std::move(confined).value()));
  return Status::OK();
}

// The index, opened on first use: a run view's tags open in the mount's
// daemon, after it forked, and LMDB's environment must be used by the
// process that opened it. Thread-safe: FUSE's threads open tags at once.
class LazyIndex final : public TorchFileSource {
 public:
  LazyIndex(Env& env, std::string dir) : env_(env), direct_(env), dir_(std::move(dir)) {}

  Result<TorchFileSummary> Summarize(const std::string& path) override {
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

 private:
  Env& env_;
  DirectTorchFileSource direct_;
  const std::string dir_;
  std::once_flag opened_;
  std::unique_ptr<SummaryIndex> index_;  // set in opened_
};

// Where the index lives, said at -v when it is not where it was asked to
// be (off a network file system).
std::string IndexDir(const ViewRequest& r) {
  IndexPlacement placed = PlaceIndex(r.cache_dir);
  if (!placed.note.empty()) spdlog::info("{}", TerminalSafe(placed.note));
  spdlog::debug("index: {}", TerminalSafe(placed.dir));
  return placed.dir;
}

// <tag>_fp32/ is an extra view: none in a writable mount without --views.
std::optional<ConsolidatedOptions> ConsolidatedOf(const ViewRequest& r) {
  if (!r.extra_views) return std::nullopt;
  ConsolidatedOptions consolidated;
  consolidated.compute_crc = r.crc;
  return consolidated;
}

ReshardOptions ReshardOf(const ViewRequest& r) {
  ReshardOptions reshard;
  reshard.world_size = r.world_size.value_or(0);
  reshard.sub_group_size = r.sub_group_size;
  reshard.copy_rank_files = r.copy_rank_files;
  reshard.consolidated = ConsolidatedOf(r);
  return reshard;
}

UniversalViewOptions UniversalOf(const ViewRequest& r) {
  UniversalViewOptions universal;
  universal.compute_crc = r.crc;
  universal.consolidated = ConsolidatedOf(r);
  return universal;
}

Result<RunViewOptions> RunOptions(const ViewRequest& r, TorchFileSource* index) {
  RunViewOptions options;
  UCFS_ASSIGN_OR_RETURN(options.universal_info, ReadSuppliedUniversalInfo(r.universal_info));
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

// A run directory (no root or tag itself): its roots, served as they are
// found (src/design/run-directories.md).
Result<OpenedView> OpenRunView(const ViewRequest& r, OpenedView out, const std::string& path) {
  // Say now, not at the first ls, when there is nothing to serve.
  UCFS_ASSIGN_OR_RETURN(RootListing first, FindFirstRoot(*out.env, path));
  if (r.tag) {
    return Status::NotSupported(path +
                                " is a run directory, not a checkpoint root or tag directory: "
                                "--tag takes one of its roots (such as " +
                                first.dir + "); every tag of a run is served");
  }
  UCFS_ASSIGN_OR_RETURN(RunViewOptions options, RunOptions(r, out.index.get()));
  UCFS_ASSIGN_OR_RETURN(out.view, BuildRunView(*out.env, path, options));
  out.source_dirs = {path};
  out.description =
      std::string("run directory (every root's ") +
      (r.world_size ? "tags at world size " + std::to_string(*r.world_size) : "views") +
      (r.extra_views ? (r.world_size ? " and views" : "") : ", no extra views") +
      ", opened as they are looked into)";
  return out;
}

// A tensor- and pipeline-parallel checkpoint: its universal view, or the
// view at a new D (src/design/model-parallelism.md); both with <tag>_fp32.
Result<OpenedView> OpenParallelView(const ViewRequest& r, OpenedView out,
                                    ParallelCheckpointFiles grid) {
  CheckpointOptions options;
  UCFS_ASSIGN_OR_RETURN(options.universal_info, ReadSuppliedUniversalInfo(r.universal_info));
  UCFS_ASSIGN_OR_RETURN(ParallelCheckpoint opened,
                        ParallelCheckpoint::OpenListed(*out.env, std::move(grid), options));
  out.parallel = std::make_shared<const ParallelCheckpoint>(std::move(opened));
  const CheckpointFiles& files = out.parallel->shard(0).files();
  if (r.world_size) {
    // Pipeline stages and tensor-parallel ranks as saved, D ranks anew.
    UCFS_ASSIGN_OR_RETURN(out.view, BuildParallelReshardView(*out.env, out.parallel, ReshardOf(r)));
    out.layout_roots = {"latest", files.tag};
  } else {
    UCFS_ASSIGN_OR_RETURN(out.view,
                          BuildParallelUniversalView(*out.env, out.parallel, UniversalOf(r)));
    out.layout_roots = {"latest_universal", UniversalTag(files.tag)};
  }
  out.consolidated_root = ConsolidatedDirName(files.tag);
  for (const std::string& dir : {files.root, files.tag_dir}) {
    if (!dir.empty()) out.source_dirs.push_back(dir);
  }
  out.source_dirs.insert(out.source_dirs.end(), r.layers.begin(), r.layers.end());
  out.description =
      (r.world_size ? "view at " + std::to_string(*r.world_size) + " data-parallel ranks"
                    : std::string("universal view")) +
      " of a tensor- and pipeline-parallel checkpoint (" +
      DescribeDegrees(out.parallel->degrees()) + ")";
  return out;
}

// A root mounted alone: model.safetensors beside its config.json, of the
// tag mounted.
Status AddRootHfWeights(const ViewRequest& r, Env& env, OpenedView& out) {
  const std::string& root = out.checkpoint->files().root;
  UCFS_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env.ListDir(root));
  if (!WantsHfWeights(entries)) return Status::OK();
  HfWeightsOptions options;
  options.dtype = r.weights_dtype;
  auto files = HfWeightsFiles(env, out.checkpoint, options);
  if (!files.ok()) {
    spdlog::warn("{}: no Hugging Face weights beside config.json: {}", TerminalSafe(root),
                 TerminalSafe(files.status().message()));
    return Status::OK();
  }
  for (NamedContent& f : *files) {
    UCFS_RETURN_IF_ERROR(out.view->AddFile(kRootInode, f.name, std::move(f.content)).status());
  }
  return Status::OK();
}

}  // namespace

Result<DType> ParseWeightsDtype(const std::string& text) {
  if (text == "bf16" || text == "bfloat16") return DType::kBFloat16;
  if (text == "fp16" || text == "float16" || text == "half") return DType::kFloat16;
  if (text == "fp32" || text == "float32" || text == "float") return DType::kFloat32;
  return Status::InvalidArgument("--weights-dtype " + text + ": bf16, fp16 or fp32");
}

Result<OpenedView> OpenView(const ViewRequest& r) {
  OpenedView out;
  UCFS_ASSIGN_OR_RETURN(CheckpointEnv source, OpenCheckpointEnv(r.checkpoint));
  if (!r.layers.empty()) UCFS_RETURN_IF_ERROR(LayOver(r.layers, source));
  out.env = source.env;
  Env& env = *out.env;
  const std::string index_dir = r.no_cache ? "" : IndexDir(r);
  if (!IsCheckpointDirectory(env, source.path) && env.IsDirectory(source.path)) {
    std::vector<std::string> below = {source.path};
    below.insert(below.end(), r.layers.begin(), r.layers.end());
    if (r.upper) UCFS_RETURN_IF_ERROR(RouteUpper(*r.upper, below, out));
    if (!r.no_cache) {
      out.index = std::make_shared<LazyIndex>(*out.env, index_dir);
    }
    UCFS_ASSIGN_OR_RETURN(out, OpenRunView(r, std::move(out), source.path));
    out.source_dirs.insert(out.source_dirs.end(), r.layers.begin(), r.layers.end());
    if (!out.upper_dir.empty()) {
      UCFS_ASSIGN_OR_RETURN(RunViewOptions run_options, RunOptions(r, out.index.get()));
      out.upper_views =
          std::make_shared<UpperRootViews>(out.view, *out.env, std::move(run_options));
    }
    return out;
  }
  std::unique_ptr<SummaryIndex> index;
  // Read on the way to the index: a TP/PP grid is its own view.
  if (auto grid = ListParallelCheckpointFiles(env, source.path, r.tag);
      grid.ok() && grid->degrees.mp() > 1) {
    return OpenParallelView(r, std::move(out), std::move(grid).value());
  }
  if (!r.no_cache) {
    auto opened = SummaryIndex::Open(env, index_dir);
    if (opened.ok()) {
      index = std::move(opened).value();
    } else {
      spdlog::warn("{} (going on without the index)", TerminalSafe(opened.status().message()));
    }
  }
  CheckpointOptions options;
  options.tag = r.tag;
  options.source = index.get();
  UCFS_ASSIGN_OR_RETURN(options.universal_info, ReadSuppliedUniversalInfo(r.universal_info));
  UCFS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(env, source.path, options));
  out.checkpoint = std::make_shared<const Checkpoint>(std::move(ckpt));
  out.index_note = index ? fmt::format("{} rank files from the index, {} read", index->cache_hits(),
                                       index->cache_misses())
                         : "no index";
  const CheckpointFiles& files = out.checkpoint->files();
  const std::string& tag = files.tag;
  if (r.world_size) {
    if (std::string advice =
            BatchAdvice(out.checkpoint->batch(), out.checkpoint->world_size(), *r.world_size);
        !advice.empty()) {
      spdlog::warn("{}: {}", TerminalSafe(files.tag_dir.empty() ? tag : env.Where(files.tag_dir)),
                   advice);
    }
    UCFS_ASSIGN_OR_RETURN(out.view, BuildReshardView(env, out.checkpoint, ReshardOf(r)));
    out.layout_roots = {"latest", tag};
  } else {
    UCFS_ASSIGN_OR_RETURN(out.view, BuildUniversalView(env, out.checkpoint, UniversalOf(r)));
    out.layout_roots = {"latest_universal", UniversalTag(tag)};
  }
  out.consolidated_root = ConsolidatedDirName(tag);
  // The root's other tags, opened as they are looked into (in the daemon:
  // the index opens again there), and the Hugging Face weights beside its
  // config.json.
  if (!files.root.empty()) {
    UCFS_RETURN_IF_ERROR(AddRootHfWeights(r, env, out));
    if (!r.no_cache) {
      out.index = std::make_shared<LazyIndex>(env, index_dir);
    }
    UCFS_ASSIGN_OR_RETURN(RunViewOptions run_options, RunOptions(r, out.index.get()));
    UCFS_RETURN_IF_ERROR(AddOtherTagViews(*out.view, env, files.root, tag, run_options));
  }
  for (const std::string& dir : {files.root, files.tag_dir}) {
    if (!dir.empty()) out.source_dirs.push_back(dir);
  }
  out.source_dirs.insert(out.source_dirs.end(), r.layers.begin(), r.layers.end());
  out.description =
      r.world_size ? "view at world size " + std::to_string(*r.world_size) : "universal view";
  return out;
}

namespace {

namespace fs = std::filesystem;

std::string Resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal().string() : p.string();
}

bool Within(const std::string& inner, const std::string& outer) {
  return inner == outer || inner.starts_with(outer == "/" ? outer : outer + "/");
}

}  // namespace

Status CheckPlacement(const std::vector<std::string>& source_dirs, const std::string& what,
                      const std::string& path, Placement placement) {
  const std::string p = Resolved(path);
  for (const std::string& dir : source_dirs) {
    if (dir.empty()) continue;
    const std::string d = Resolved(dir);
    if (Within(p, d)) {
      return Status::InvalidArgument(what + " " + path + " is inside the checkpoint (" + d +
                                     "): ucfs never writes there");
    }
    if (placement == Placement::kApart && Within(d, p)) {
      return Status::InvalidArgument(what + " " + path + " holds the checkpoint (" + d +
                                     "): it must lie apart from it");
    }
  }
  return Status::OK();
}

Status CheckMountpoint(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    return Status::FromErrno(path + ": the mountpoint must be an existing, empty directory", errno);
  }
  bool empty = true;
  while (dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(dir);
  if (!empty) {
    return Status::InvalidArgument(path +
                                   ": the mountpoint is not empty (or is mounted already); "
                                   "mounting would hide what is there");
  }
  return Status::OK();
}

}  // namespace ucfs::cli
