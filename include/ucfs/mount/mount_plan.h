// MountPlan: what a mount serves for a path, decided in one place.
//
// `ucfs mount` and `ucfs export` both ask PlanMount: it finds what the path
// is (a checkpoint root or tag of data-parallel ranks, a tensor- and
// pipeline-parallel grid, or a training run's directory), opens the Envs
// it is read through (confined to it, with --layer directories laid over
// it and --upper routed), builds the view asked for (universal, or at a new
// world size; <tag>_fp32, Hugging Face weights, the root's other tags) and
// says how a writable mount's overlay is to be opened. The CLI parses
// arguments and serves the plan; nothing here knows FUSE, and everything
// here runs on a MemEnv in tests (mount_plan_test.cc).
#ifndef UCFS_MOUNT_MOUNT_PLAN_H_
#define UCFS_MOUNT_MOUNT_PLAN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/overlay/overlay.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/upper_root_views.h"

namespace ucfs {

struct MountRequest {
  std::string checkpoint;  // absolute
  std::optional<std::string> tag;
  std::optional<std::string> cache_dir;  // default: DefaultIndexDir()
  // Where `ucfs index --index-dir` put the tag's shared index, looked in
  // before the tag's side (mount/shared_index.h IndexFileIn).
  std::optional<std::string> index_dir;
  bool no_cache = false;
  bool crc = false;
  std::optional<uint32_t> world_size;  // the reshard view; else the universal view
  std::optional<uint64_t> sub_group_size;
  // A JSON file of universal_checkpoint_info keys laid over the saved ones
  // (--universal-info: merge_rules.h SuppliedUniversalInfo).
  std::optional<std::string> universal_info;
  // Copies of the frameworks' per-rank files for new ranks
  // (view/rank_file_extras.h).
  bool copy_rank_files = true;
  // <tag>_universal/, latest_universal and <tag>_fp32/ beside what
  // DeepSpeed wrote: a writable mount shows them only when asked (--views),
  // as trainers count, sum and parse what their output directory holds.
  bool extra_views = true;
  // The Hugging Face weights' dtype (view/hf_weights.h); default the
  // training dtype.
  std::optional<DType> weights_dtype;
  // Earlier mounts' upper directories (absolute), laid over the checkpoint
  // read-only in order, each over the ones before it
  // (overlay/layered_env.h): what a trainer saved through them is served
  // like the source.
  std::vector<std::string> layers;
  // The writable mount's upper directory (absolute).
  std::optional<std::string> upper;
  // The mountpoint (absolute), for `ucfs mount`: an existing, empty
  // directory apart from the checkpoint.
  std::optional<std::string> mountpoint;
};

// What a path turned out to be, with what only that kind has.
//
// A checkpoint of data-parallel ranks (ZeRO 1-3), at one tag.
struct CheckpointMount {
  std::shared_ptr<const Checkpoint> checkpoint;
  // "3 rank files from the index, 0 read", or "no index".
  std::string index_note;
};
// A tensor- and pipeline-parallel grid (src/design/model-parallelism.md).
struct GridMount {
  std::shared_ptr<const ParallelCheckpoint> checkpoint;
};
// A training run's directory: its roots served as they are looked into
// (src/design/run-directories.md); a writable mount's saved checkpoints get
// views too (`views`, which the overlay asks: Overlay::Options).
struct RunDirectoryMount {
  std::shared_ptr<UpperRootViews> views;  // null unless writable
};
using MountKind = std::variant<CheckpointMount, GridMount, RunDirectoryMount>;

// A writable mount's overlay: Overlay::Open(upper_dir, plan.view, ...).
struct WritablePlan {
  std::string upper_dir;  // absolute
  Overlay::Options options;
};

struct MountPlan {
  // Declared first, destroyed last: the checkpoint, the index and the view
  // read through it.
  std::shared_ptr<Env> env;
  // Where rank files are summarised from, kept for the tags that open as
  // they are first looked into (in the daemon); null without the index.
  std::shared_ptr<TorchFileSource> index;
  MountKind kind;
  std::shared_ptr<View> view;
  // The source directories the view shows (the checkpoint's root and tag
  // directory, or the run directory) and the layers: what nothing may be
  // written into.
  std::vector<std::string> source_dirs;
  // What is mounted, for the log: "universal view", "view at world size 3",
  // "run directory (...)".
  std::string description;
  // The view's own top-level entries (not the source root's): what an
  // export writes. The consolidated weights' directory is apart.
  std::vector<std::string> layout_roots;
  std::string consolidated_root;
  std::optional<WritablePlan> writable;
};

// The request's own faults, found before a checkpoint file is read: the
// mountpoint, --upper and --layer directories each where it may be (the
// caller's to fix: `ucfs mount` exits 2). `host` resolves paths
// (Env::Posix(), or a MemEnv in tests).
Status CheckRequest(Env& host, const MountRequest& request);

// The plan for `request` (CheckRequest first, its questions asked once
// for both: `request_fault`, where given, says whether an error is
// CheckRequest's). Makes --upper where the view reads from it (a run's),
// and nothing else.
Result<MountPlan> PlanMount(Env& host, const MountRequest& request, bool* request_fault = nullptr);

// "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp32"/"float32" as a dtype;
// InvalidArgument naming what is accepted.
Result<DType> ParseWeightsDtype(const std::string& text);

}  // namespace ucfs

#endif  // UCFS_MOUNT_MOUNT_PLAN_H_
