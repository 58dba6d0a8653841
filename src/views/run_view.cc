#include "ucfs/views/run_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "ucfs/checkpoint/batch_size.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/hf_weights.h"
#include "ucfs/views/rank_file_extras.h"
#include "views/tag_views.h"

namespace ucfs {
namespace {

// What the run view makes of the directories it lists. Roots are recorded
// as they are found, so that a directory below one (LLaMA-Factory's
// dataloader/) shows its per-rank files at N: a root is always listed
// before anything below it is looked up.
class RunDecorator {
 public:
  RunDecorator(Env& env, RunViewOptions options) : env_(env), options_(std::move(options)) {}

  View::SourceDirExtras operator()(const std::string& dir, const std::vector<DirEntry>& entries) {
    std::optional<RootListing> root = ListRoot(env_, dir, entries);
    if (!root) return BelowRoot(dir, entries);
    if (!root->latest) {
      // DeepSpeed's load_checkpoint(ROOT) with no tag would fail on it.
      auto named = ReadLatestTag(env_, JoinPath(dir, "latest"));
      spdlog::warn("{}/latest {}: a load without a tag fails; its tags are served",
                   TerminalSafe(dir),
                   named.ok() ? "names " + TerminalSafe(*named) + ", which is not a tag here"
                              : "names no tag (" + TerminalSafe(named.status().message()) + ")");
    }
    View::SourceDirExtras extras;
    if (options_.reshard) {
      const uint32_t saved = SavedWorldSize(*root);
      {
        std::lock_guard<std::mutex> lock(mu_);
        roots_[dir] = saved;
      }
      extras = RankFileExtras(dir, entries, RankFiles(saved));
    }
    std::shared_ptr<TagViews> latest;
    AddTagViews(env_, options_, *root, entries, {}, &extras, &latest);
    if (options_.hf_weights && latest && WantsHfWeights(entries)) {
      AddHfWeights(env_, *options_.hf_weights, *root, *latest, &extras);
    }
    return extras;
  }

 private:
  // The data-parallel size the root's per-rank files were saved at:
  // latest's tag's, or the first complete tag's. A tensor- or pipeline-
  // parallel tag's frameworks number their per-rank files by global rank
  // over P x T x D, which no data-parallel copy maps: they are shown as
  // saved.
  static uint32_t SavedWorldSize(const RootListing& root) {
    uint32_t saved = 0;
    for (const TagListing& tag : root.tags) {
      if (!tag.complete || tag.grid.degrees.mp() > 1) continue;
      if (saved == 0 || (root.latest && tag.name == *root.latest)) saved = tag.files().world_size;
    }
    return saved;
  }

  RankFileOptions RankFiles(uint32_t saved) const {
    return {saved, options_.reshard->world_size, options_.reshard->copy_rank_files};
  }

  View::SourceDirExtras BelowRoot(const std::string& dir, const std::vector<DirEntry>& entries) {
    if (!options_.reshard) return {};
    uint32_t saved = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The nearest root above `dir`.
      for (std::string_view up = SplitLast(dir).first; saved == 0 && up.size() > 1;
           up = SplitLast(up).first) {
        if (auto it = roots_.find(std::string(up)); it != roots_.end()) saved = it->second;
      }
    }
    if (saved == 0) return {};
    return RankFileExtras(dir, entries, RankFiles(saved));
  }

  Env& env_;
  const RunViewOptions options_;
  std::mutex mu_;                          // a leaf
  std::map<std::string, uint32_t> roots_;  // root directory → its saved world size
};

}  // namespace

Status AddOtherTagViews(View& view, Env& env, const std::string& root_dir,
                        const std::string& skip_tag, const RunViewOptions& options) {
  UCFS_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env.ListDir(root_dir));
  std::optional<RootListing> root = ListRoot(env, root_dir, entries);
  if (!root) return Status::OK();
  View::SourceDirExtras extras;
  AddTagViews(env, options, *root, entries, skip_tag, &extras);
  for (auto& g : extras.grafts) {
    UCFS_RETURN_IF_ERROR(view.AddGraft(kRootInode, g.name, std::move(g.build), g.mtime_ns, g.access,
                                       std::move(g.mtime_later))
                             .status());
  }
  return Status::OK();
}

Result<std::shared_ptr<View>> BuildRunView(Env& env, const std::string& run_dir,
                                           const RunViewOptions& options) {
  UCFS_ASSIGN_OR_RETURN(FileStat st, env.Stat(run_dir));
  if (!st.is_dir) return Status::InvalidArgument(run_dir + ": not a directory");
  auto view = std::make_shared<View>(env, st.identity.mtime_ns);
  view->BackRootBy(run_dir);
  auto decorator = std::make_shared<RunDecorator>(env, options);
  view->DecorateSourceDirectories(
      [decorator](const std::string& dir, const std::vector<DirEntry>& entries) {
        return (*decorator)(dir, entries);
      });
  return view;
}

}  // namespace ucfs
