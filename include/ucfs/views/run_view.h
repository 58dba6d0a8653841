// The run view: a training run's directory as it is, every DeepSpeed root
// in it serving its views in place (src/design/run-directories.md).
//
//   RUN/...                          the run's files and directories, as they are
//   ROOT/latest_universal            "<latest's tag>_universal", in every root
//                                    whose `latest` names one of its tags
//   ROOT/<tag>_universal/            the universal view of each complete tag
//   ROOT/<tag>_fp32/                 its consolidated weights
//   ROOT/model.safetensors           beside a config.json with no weights:
//                                    latest's in the training dtype
//                                    (hf_weights.h)
//
// With `reshard`, each complete tag directory is instead the reshard view's
// at N (its other files passed through), and the frameworks' per-rank files
// of each root and the directories below it are shown at N
// (rank_file_extras.h). `extra_views` off shows no `_universal`, `_fp32` or
// `latest_universal` at all: trainers that count and sum a root's entries
// (OpenRLHF) or parse `global_step*` names (open-instruct) see the run as
// saved.
//
// ROOT is any directory of the run with a `latest` file and tag
// directories below it (ListRoot): HF Trainer's checkpoint-N/, OpenRLHF's
// _actor/, Lightning's epoch=E-step=S.ckpt/, accelerate's root, the run
// directory itself. Roots are found as directories are listed, and a tag's
// rank files are first read when its directory is looked into: a run of
// hundreds of checkpoints mounts as fast as one. A name the view would make
// that the root already holds (a real ds_to_universal output) is left to
// the file on disk. An incomplete tag is not served, with a warning naming
// the missing file.
#ifndef UCFS_VIEWS_RUN_VIEW_H_
#define UCFS_VIEWS_RUN_VIEW_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/checkpoint/tag_snapshot.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/hf_weights.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {

// A tag's shared index (`ucfs index`, mount/shared_index.h) found current:
// the tag is opened and read through `env`, which answers what discovery
// asks of the tag directory from `snapshot`.
struct IndexedTag {
  std::shared_ptr<Env> env;  // a SnapshotEnv over the run's Env
  std::shared_ptr<const TagSnapshot> snapshot;
  std::string index_file;  // where it was read, for messages
};

struct RunViewOptions {
  // Where rank files are summarised from (the index), for every tag at
  // once, from FUSE's threads: it must be thread-safe. Null reads them
  // directly.
  TorchFileSource* source = nullptr;
  UniversalViewOptions universal;
  // universal_checkpoint_info keys laid over every tag's saved ones
  // (--universal-info).
  std::shared_ptr<const SuppliedUniversalInfo> universal_info;
  // Every complete tag at this world size.
  std::optional<ReshardOptions> reshard;
  bool extra_views = true;
  // The shared index of tag `tag` of root `root`, where it has a current
  // one (nullopt where not, or null: none is looked for). Called once per
  // tag, when the tag is first opened, from FUSE's threads. An index the
  // tag then fails to open with is passed over, with a warning.
  std::function<std::optional<IndexedTag>(const std::string& root, const std::string& tag)>
      shared_index;
  // model.safetensors beside a root's config.json, of latest's tag
  // (hf_weights.h); nullopt shows none.
  std::optional<HfWeightsOptions> hf_weights = HfWeightsOptions{};
};

// `env` must outlive the view.
Result<std::shared_ptr<View>> BuildRunView(Env& env, const std::string& run_dir,
                                           const RunViewOptions& options = {});

// A root mounted alone serves its other tags too: adds to `view`'s root
// (which shows `root_dir`) the views of every complete tag of `root_dir`
// but `skip_tag`, the one `view` was built for. The tags open as they are
// looked into, as in the run view.
Status AddOtherTagViews(View& view, Env& env, const std::string& root_dir,
                        const std::string& skip_tag, const RunViewOptions& options);

}  // namespace ucfs

#endif  // UCFS_VIEWS_RUN_VIEW_H_
