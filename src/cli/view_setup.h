// Opening a checkpoint and building the view a command asks for — shared by
// `ucfs mount` and `ucfs export`, so both show the same bytes.
#ifndef UCFS_CLI_VIEW_SETUP_H_
#define UCFS_CLI_VIEW_SETUP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/view/upper_root_views.h"
#include "ucfs/view/view.h"

namespace ucfs::cli {

// A checkpoint's files, read only through an Env confined to its root
// (NewConfinedPosixEnv): every command that reads a checkpoint opens it so.
struct CheckpointEnv {
  std::shared_ptr<Env> env;
  std::string path;  // the checkpoint's path, resolved (what the Env accepts)
};
Result<CheckpointEnv> OpenCheckpointEnv(const std::string& path);

struct ViewRequest {
  std::string checkpoint;  // absolute
  std::optional<std::string> tag;
  std::optional<std::string> cache_dir;  // default: DefaultIndexDir()
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
  // A run directory's roots show <tag>_universal/, latest_universal and
  // <tag>_fp32/ (a writable mount asks for them explicitly).
  bool extra_views = true;
  // The Hugging Face weights' dtype (view/hf_weights.h); default the
  // training dtype.
  std::optional<DType> weights_dtype;
  // Earlier mounts' upper directories, laid over the checkpoint read-only
  // in order, each over the ones before it (overlay/layered_env.h): what a
  // trainer saved through them is served like the source.
  std::vector<std::string> layers;
  // The writable mount's upper directory (absolute): a run's checkpoints
  // saved into it get views (OpenedView::upper_views).
  std::optional<std::string> upper;
};

// --universal-info FILE read (null without one); InvalidArgument naming the
// file where it cannot be read.
Result<std::shared_ptr<const SuppliedUniversalInfo>> ReadSuppliedUniversalInfo(
    const std::optional<std::string>& path);

// "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp32"/"float32" as a dtype;
// InvalidArgument naming what is accepted.
Result<DType> ParseWeightsDtype(const std::string& text);

struct OpenedView {
  // Declared first, destroyed last: the checkpoint, the index and the view
  // read through it.
  std::shared_ptr<Env> env;
  // Where rank files are summarised from, kept for a run view's tags,
  // which open as they are first looked into (in the daemon); null without
  // the index.
  std::shared_ptr<TorchFileSource> index;
  // Null for a run directory (the run view: src/design/run-directories.md)
  // and for a tensor- or pipeline-parallel checkpoint (`parallel`).
  std::shared_ptr<const Checkpoint> checkpoint;
  std::shared_ptr<const ParallelCheckpoint> parallel;
  std::shared_ptr<View> view;
  // The source directories the view shows: the checkpoint's root and tag
  // directory, or the run directory (what CheckPlacement keeps apart).
  std::vector<std::string> source_dirs;  // with the layers
  // What is mounted, for the log: "universal view", "view at world size 3",
  // "run directory (...)".
  std::string description;
  // "3 rank files from the index, 0 read", "no index"; empty for a run
  // directory, whose tags open later.
  std::string index_note;
  // The view's own top-level entries (not the source root's): what an
  // export writes. The consolidated weights' directory is separate.
  std::vector<std::string> layout_roots;
  std::string consolidated_root;
  // A run's writable mount: the upper directory, made and resolved, and the
  // views of the checkpoints saved into it, for the overlay to ask.
  std::string upper_dir;
  std::shared_ptr<UpperRootViews> upper_views;

  bool is_run() const { return checkpoint == nullptr && parallel == nullptr; }
};

Result<OpenedView> OpenView(const ViewRequest& request);

// How `path` must stand to the checkpoint's directories (its root and tag
// directory, symlinks resolved).
enum class Placement {
  kApart,    // neither inside the other, nor the same (--upper; a mountpoint)
  kOutside,  // not the same and not inside them; it may contain them (export)
};
// InvalidArgument naming `what` ("--upper", "the mountpoint") when `path`
// breaks the rule.
Status CheckPlacement(const std::vector<std::string>& source_dirs, const std::string& what,
                      const std::string& path, Placement placement);

// A mountpoint must be an existing, empty directory: mounting over files
// hides them, and over another mount stacks two.
Status CheckMountpoint(const std::string& path);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_VIEW_SETUP_H_
