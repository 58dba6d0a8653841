// A tag's views for the run view and the upper directory's roots: the
// tag opened once when first needed, its universal view (with the
// consolidated weights) or its reshard view built once each, and what a
// root's listing gains from them (grafts, latest_universal, the Hugging
// Face weights). Private to src/view/.
#ifndef UCFS_VIEWS_TAG_VIEWS_H_
#define UCFS_VIEWS_TAG_VIEWS_H_

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/hf_weights.h"
#include "ucfs/views/run_view.h"

namespace ucfs {

// One tag's views, built the first time a directory of theirs is looked
// into: the checkpoint once, then its universal view (with the
// consolidated weights) or its reshard view, each once. A tensor- and
// pipeline-parallel tag opens as its grid, with the grid's views (its
// per-rank files are shown as saved: run_view.cc).
class TagViews {
 public:
  TagViews(Env& env, std::string root, std::string tag, const RunViewOptions& options)
      : env_(env), root_(std::move(root)), tag_(std::move(tag)), options_(options) {}

  Result<View::GraftTarget> Universal() { return Directory(universal_, UniversalTag(tag_)); }
  Result<View::GraftTarget> Consolidated() {
    return Directory(universal_, ConsolidatedDirName(tag_));
  }
  Result<View::GraftTarget> Resharded() { return Directory(resharded_, tag_); }
  // The tag's checkpoint, opened once for all its views; NotSupported for
  // a tensor- or pipeline-parallel one (its views are the grid's).
  Result<std::shared_ptr<const Checkpoint>> Opened() {
    UCFS_RETURN_IF_ERROR(OpenOnce());
    if (!checkpoint_) {
      return Status::NotSupported(JoinPath(root_, tag_) +
                                  ": a tensor- or pipeline-parallel checkpoint (" +
                                  DescribeDegrees(grid_->degrees()) + "): its merged weights are " +
                                  ConsolidatedDirName(tag_) + "/");
    }
    return checkpoint_;
  }
  // What the tag's views read through, once it is opened: its shared
  // index's Env where it was opened with one, else the run's.
  Env& env() const { return opened_with_index_ ? *found_index_->env : env_; }
  // What the tag's files are asked about before it is opened (the time of
  // its views): its shared index's Env where it has a current one.
  Env& MetadataEnv() {
    const IndexedTag* indexed = SharedIndex();
    return indexed ? *indexed->env : env_;
  }

 private:
  struct Built {
    explicit Built(bool at_n) : reshard(at_n) {}
    const bool reshard;  // the reshard view at N, else the universal view
    std::once_flag once;
    Status status;
    std::shared_ptr<View> view;  // set in once
  };

  Result<View::GraftTarget> Directory(Built& built, const std::string& name);
  Status Build(Built& built);
  Status OpenOnce() {
    std::call_once(opened_, [this] { opened_status_ = Open(); });
    return opened_status_;
  }
  Status Open();
  // The tag's shared index, looked for once; null where it has none.
  const IndexedTag* SharedIndex() {
    std::call_once(index_looked_for_, [this] {
      if (options_.shared_index) found_index_ = options_.shared_index(root_, tag_);
    });
    return found_index_ ? &*found_index_ : nullptr;
  }
  // Opens the tag through `env`, its rank files summarised by `source`
  // (null: read directly).
  Status OpenThrough(Env& env, TorchFileSource* source);
  // Logs the batch advice for `tag_dir` once per process.
  static void WarnOnce(const std::string& tag_dir, const std::string& advice);

  Env& env_;
  const std::string root_;
  const std::string tag_;
  const RunViewOptions options_;
  std::once_flag opened_;
  Status opened_status_;
  // Set in opened_: the grid (a data-parallel checkpoint's is 1 x 1 x D),
  // and the data-parallel checkpoint (null for a tensor- or
  // pipeline-parallel one).
  std::shared_ptr<const ParallelCheckpoint> grid_;
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::once_flag index_looked_for_;
  std::optional<IndexedTag> found_index_;  // set in index_looked_for_
  // Set in opened_ where the tag was opened with its shared index: its
  // views read through the index's Env.
  bool opened_with_index_ = false;
  Built universal_{false};
  Built resharded_{true};
};

// The views of `root`'s complete tags (but `skip`) added to `extras`:
// grafts, and latest_universal; `latest` set to latest's tag's views.
// `entries` is the root's listing: a name it holds is left to the file on
// disk.
void AddTagViews(Env& env, const RunViewOptions& options, const RootListing& root,
                 const std::vector<DirEntry>& entries, std::string_view skip,
                 View::SourceDirExtras* extras, std::shared_ptr<TagViews>* latest = nullptr);

// model.safetensors beside config.json, of latest's tag (`latest`), added
// to `extras`; a warning naming the root when none can be made. Read
// through `env`, the run's, not latest.env(): the weights outlive a
// TagViews made for one listing (their identities, a shared index's, carry
// no device, which SourceFiles allows). Its names depend on its size, so
// the tag is opened now (its summaries only).
void AddHfWeights(Env& env, const HfWeightsOptions& options, const RootListing& root,
                  TagViews& latest, View::SourceDirExtras* extras);

}  // namespace ucfs

#endif  // UCFS_VIEWS_TAG_VIEWS_H_
