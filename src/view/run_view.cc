#include "ucfs/view/run_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "ucfs/checkpoint/batch_size.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/view/consolidated_view.h"
#include "ucfs/view/hf_weights.h"
#include "ucfs/view/rank_file_extras.h"

namespace ucfs {
namespace {

// One tag's views, built the first time a directory of theirs is looked
// into: the checkpoint once, then its universal view (with the
// consolidated weights) or its reshard view, each once.
class TagViews {
 public:
  TagViews(Env& env, std::string root, std::string tag, const RunViewOptions& options)
      : env_(env), root_(std::move(root)), tag_(std::move(tag)), options_(options) {}

  Result<View::GraftTarget> Universal() { return Directory(universal_, UniversalTag(tag_)); }
  Result<View::GraftTarget> Consolidated() {
    return Directory(universal_, ConsolidatedDirName(tag_));
  }
  Result<View::GraftTarget> Resharded() { return Directory(resharded_, tag_); }
  // The tag's checkpoint, opened once for all its views.
  Result<std::shared_ptr<const Checkpoint>> Opened() {
    std::call_once(opened_, [this] { opened_status_ = Open(); });
    UCFS_RETURN_IF_ERROR(opened_status_);
    return checkpoint_;
  }

 private:
  struct Built {
    explicit Built(bool at_n) : reshard(at_n) {}
    const bool reshard;  // the reshard view at N, else the universal view
    std::once_flag once;
    Status status;
    std::shared_ptr<View> view;  // set in once
  };

  Result<View::GraftTarget> Directory(Built& built, const std::string& name) {
    std::call_once(built.once, [&] { built.status = Build(built); });
    UCFS_RETURN_IF_ERROR(built.status);
    auto dir = built.view->Lookup(kRootInode, name);
    if (!dir.ok()) {
      return Status::NotFound(JoinPath(root_, tag_) + ": no " + name +
                              " could be made for this tag (see the warning before)");
    }
    return View::GraftTarget{built.view, *dir};
  }

  Status Build(Built& built) {
    UCFS_RETURN_IF_ERROR(Opened().status());
    std::unique_ptr<View> view;
    if (built.reshard) {
      UCFS_ASSIGN_OR_RETURN(view, BuildReshardView(env_, checkpoint_, *options_.reshard));
    } else {
      UCFS_ASSIGN_OR_RETURN(view, BuildUniversalView(env_, checkpoint_, options_.universal));
    }
    built.view = std::move(view);
    return Status::OK();
  }

  Status Open() {
    CheckpointOptions open;
    open.tag = tag_;
    open.source = options_.source;
    UCFS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(env_, root_, open));
    checkpoint_ = std::make_shared<const Checkpoint>(std::move(ckpt));
    spdlog::info("{}: tag {} opened ({} params, world size {})", root_, tag_,
                 checkpoint_->params().size(), checkpoint_->world_size());
    if (options_.reshard) {
      std::string advice = BatchAdvice(checkpoint_->batch(), checkpoint_->world_size(),
                                       options_.reshard->world_size);
      if (!advice.empty()) spdlog::warn("{}/{}: {}", root_, tag_, advice);
    }
    return Status::OK();
  }

  Env& env_;
  const std::string root_;
  const std::string tag_;
  const RunViewOptions options_;
  std::once_flag opened_;
  Status opened_status_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // set in opened_
  Built universal_{false};
  Built resharded_{true};
};

// The views of `root`'s complete tags (but `skip`): grafts, and
// latest_universal.
void AddTagViews(Env& env, const RunViewOptions& options, const RootListing& root,
                 const std::vector<DirEntry>& entries, std::string_view skip,
                 View::SourceDirExtras* extras, std::shared_ptr<TagViews>* latest = nullptr) {
  auto on_disk = [&entries](const std::string& name) {
    return std::any_of(entries.begin(), entries.end(),
                       [&name](const DirEntry& e) { return e.name == name; });
  };
  for (const TagListing& tag : root.tags) {
    if (!tag.complete && tag.name != skip) {
      spdlog::warn("{}: tag {} is not served{}: {}", TerminalSafe(root.dir), TerminalSafe(tag.name),
                   options.reshard ? " at the new world size" : "", TerminalSafe(tag.problem));
      continue;
    }
    if (tag.name == skip) continue;
    auto views = std::make_shared<TagViews>(env, root.dir, tag.name, options);
    if (latest != nullptr && root.latest && tag.name == *root.latest) *latest = views;
    if (options.reshard) {
      extras->grafts.push_back(
          {tag.name, [views] { return views->Resharded(); }, tag.mtime_ns, tag.access});
    }
    if (!options.extra_views) continue;
    // Built from the tag: its time, and its owner's access without write.
    const FileAccess access{tag.access.mode & 0555, tag.access.uid, tag.access.gid};
    if (!on_disk(UniversalTag(tag.name))) {
      extras->grafts.push_back(
          {UniversalTag(tag.name), [views] { return views->Universal(); }, tag.mtime_ns, access});
    }
    if (!on_disk(ConsolidatedDirName(tag.name))) {
      extras->grafts.push_back({ConsolidatedDirName(tag.name),
                                [views] { return views->Consolidated(); }, tag.mtime_ns, access});
    }
  }
  if (options.extra_views && skip.empty() && root.latest && !on_disk("latest_universal")) {
    if (auto st = env.Stat(JoinPath(root.dir, "latest")); st.ok()) {
      extras->files.push_back(
          {"latest_universal", std::make_shared<InlineContent>(UniversalTag(*root.latest)),
           st->identity.mtime_ns,
           FileAccess{st->access.mode & 0444, st->access.uid, st->access.gid}, nullptr});
    }
  }
}

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
      AddHfWeights(*root, *latest, &extras);
    }
    return extras;
  }

 private:
  // The data-parallel size the root's per-rank files were saved at:
  // latest's tag's, or the first complete tag's.
  static uint32_t SavedWorldSize(const RootListing& root) {
    uint32_t saved = 0;
    for (const TagListing& tag : root.tags) {
      if (!tag.complete) continue;
      if (saved == 0 || (root.latest && tag.name == *root.latest)) saved = tag.files.world_size;
    }
    return saved;
  }

  // model.safetensors beside config.json, of latest's tag: its names
  // depend on its size, so the tag is opened now (its summaries only; the
  // index makes that instant the second time).
  void AddHfWeights(const RootListing& root, TagViews& latest, View::SourceDirExtras* extras) {
    const TagListing* tag = nullptr;
    for (const TagListing& t : root.tags) {
      if (t.name == *root.latest) tag = &t;
    }
    auto opened = latest.Opened();
    auto files = opened.ok() ? HfWeightsFiles(env_, *opened, *options_.hf_weights)
                             : Result<std::vector<NamedContent>>(opened.status());
    if (!files.ok()) {
      spdlog::warn("{}: no Hugging Face weights beside config.json: {}", TerminalSafe(root.dir),
                   TerminalSafe(files.status().message()));
      return;
    }
    // Made of the rank files: readable only by whom all of them are (the
    // kernel's default_permissions checks this), and never writable.
    std::vector<FileAccess> of_sources;
    for (const SourceFile& s : (*opened)->sources()) {
      if (!s.path.empty()) of_sources.push_back(s.access);
    }
    FileAccess access = StrictestAccess(of_sources, tag->access);
    access.mode &= 0444;
    auto sources = std::make_shared<const std::vector<SourceFile>>((*opened)->sources());
    for (NamedContent& f : *files) {
      extras->files.push_back({f.name, std::move(f.content), tag->mtime_ns, access, sources});
    }
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
      for (std::string up = dir; saved == 0;) {
        const size_t slash = up.rfind('/');
        if (slash == std::string::npos || slash == 0) break;
        up.resize(slash);
        if (auto it = roots_.find(up); it != roots_.end()) saved = it->second;
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
    UCFS_RETURN_IF_ERROR(
        view.AddGraft(kRootInode, g.name, std::move(g.build), g.mtime_ns, g.access).status());
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
