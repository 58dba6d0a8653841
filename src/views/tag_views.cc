#include "views/tag_views.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "ucfs/checkpoint/batch_size.h"
#include "ucfs/checkpoint/snapshot_env.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {

Result<View::GraftTarget> TagViews::Directory(Built& built, const std::string& name) {
  std::call_once(built.once, [&] { built.status = Build(built); });
  UCFS_RETURN_IF_ERROR(built.status);
  auto dir = built.view->Lookup(kRootInode, name);
  if (!dir.ok()) {
    return Status::NotFound(JoinPath(root_, tag_) + ": no " + name +
                            " could be made for this tag (see the warning before)");
  }
  return View::GraftTarget{built.view, *dir};
}

Status TagViews::Build(Built& built) {
  UCFS_RETURN_IF_ERROR(OpenOnce());
  std::unique_ptr<View> view;
  if (built.reshard) {
    UCFS_ASSIGN_OR_RETURN(view, BuildReshardView(env(), grid_, *options_.reshard));
  } else {
    UCFS_ASSIGN_OR_RETURN(view, BuildUniversalView(env(), grid_, options_.universal));
  }
  // The graft drops its builder, and with it these TagViews, once built:
  // the view keeps the Env it reads through.
  if (opened_with_index_) view->OwnEnv(found_index_->env);
  built.view = std::move(view);
  return Status::OK();
}

Status TagViews::Open() {
  if (const IndexedTag* indexed = SharedIndex()) {
    // Summaries from the index; a rank file it does not hold, as without.
    DirectTorchFileSource direct(*indexed->env);
    SummarySource summaries(JoinPath(root_, tag_), indexed->snapshot,
                            options_.source ? *options_.source : direct);
    Status with = OpenThrough(*indexed->env, &summaries);
    if (with.ok()) {
      opened_with_index_ = true;
      return Status::OK();
    }
    // One that decodes and is current but says what the tag's files do
    // not must not make a good tag unservable, nor blame a rank file.
    spdlog::warn(
        "{}: tag {} could not be opened with its shared index {} ({}); reading the tag itself "
        "(run `ucfs index` again)",
        TerminalSafe(root_), TerminalSafe(tag_), TerminalSafe(indexed->index_file),
        TerminalSafe(with.message()));
    grid_.reset();
    checkpoint_.reset();
  }
  return OpenThrough(env_, options_.source);
}

Status TagViews::OpenThrough(Env& env, TorchFileSource* source) {
  CheckpointOptions open;
  open.tag = tag_;
  open.source = source;
  open.universal_info = options_.universal_info;
  const char* from = source != options_.source ? ", from its shared index" : "";
  if (auto files = ListParallelCheckpointFiles(env, root_, tag_);
      files.ok() && files->degrees.mp() > 1) {
    UCFS_ASSIGN_OR_RETURN(ParallelCheckpoint grid,
                          ParallelCheckpoint::OpenListed(env, std::move(files).value(), open));
    grid_ = std::make_shared<const ParallelCheckpoint>(std::move(grid));
    spdlog::info("{}: tag {} opened ({}{})", root_, tag_, DescribeDegrees(grid_->degrees()), from);
    return Status::OK();
  }
  UCFS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(env, root_, open));
  checkpoint_ = std::make_shared<const Checkpoint>(std::move(ckpt));
  grid_ = ParallelCheckpoint::SharedOfDataParallel(checkpoint_);
  spdlog::info("{}: tag {} opened ({} params, world size {}{})", root_, tag_,
               checkpoint_->params().size(), checkpoint_->world_size(), from);
  if (options_.reshard) {
    std::string advice =
        BatchAdvice(checkpoint_->batch(), checkpoint_->world_size(), options_.reshard->world_size);
    if (!advice.empty()) WarnOnce(env.Where(JoinPath(root_, tag_)), advice);
  }
  return Status::OK();
}

void TagViews::WarnOnce(const std::string& tag_dir, const std::string& advice) {
  // A tag's views are made anew when its root is listed again (a writable
  // mount's upper roots): its advice is said once.
  static std::mutex mu;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert(tag_dir).second) return;
  }
  spdlog::warn("{}: {}", TerminalSafe(tag_dir), TerminalSafe(advice));
}

namespace {

// The newest of a tag's rank and layer files: what its universal view and
// consolidated weights are built from, so their time (the tag directory's
// lies after them when a file was created or renamed there last). A stat
// per file, made when the root is first listed, and only for these views.
int64_t NewestFileMtime(Env& env, const TagListing& tag) {
  int64_t newest = 0;
  auto take = [&](const std::string& path) {
    if (path.empty()) return;
    if (auto st = env.Stat(path); st.ok()) newest = std::max(newest, st->identity.mtime_ns);
  };
  for (const CheckpointFiles& shard : tag.grid.shards) {
    for (const std::string& f : shard.optim_files) take(f);
    for (const std::string& f : shard.model_files) take(f);
  }
  for (const auto& [at, f] : tag.grid.layer_files) take(f);
  return newest != 0 ? newest : tag.mtime_ns;
}

}  // namespace

void AddTagViews(Env& env, const RunViewOptions& options, const RootListing& root,
                 const std::vector<DirEntry>& entries, std::string_view skip,
                 View::SourceDirExtras* extras, std::shared_ptr<TagViews>* latest) {
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
          {tag.name, [views] { return views->Resharded(); }, tag.mtime_ns, tag.access, nullptr});
    }
    if (!options.extra_views) continue;
    // Built from the tag's files: their time, and the tag's owner's access
    // without write.
    const FileAccess access{tag.access.mode & 0555, tag.access.uid, tag.access.gid};
    // Stat'ed when first shown, not when the root is listed: a mount of a
    // root of many tags of thousands of ranks stats none of them.
    // Asked of the tag's shared index where it has one.
    auto built = std::make_shared<const View::LazyTime>(
        [views, listing = std::make_shared<const TagListing>(tag)] {
          return NewestFileMtime(views->MetadataEnv(), *listing);
        });
    if (!on_disk(UniversalTag(tag.name))) {
      extras->grafts.push_back(
          {UniversalTag(tag.name), [views] { return views->Universal(); }, 0, access, built});
    }
    if (!on_disk(ConsolidatedDirName(tag.name))) {
      extras->grafts.push_back({ConsolidatedDirName(tag.name),
                                [views] { return views->Consolidated(); }, 0, access, built});
    }
  }
  // Naming a view that exists: latest's tag complete.
  const bool latest_served =
      root.latest && std::any_of(root.tags.begin(), root.tags.end(), [&root](const TagListing& t) {
        return t.name == *root.latest && t.complete;
      });
  if (options.extra_views && skip.empty() && latest_served && !on_disk("latest_universal")) {
    if (auto st = env.Stat(JoinPath(root.dir, "latest")); st.ok()) {
      extras->files.push_back(
          {"latest_universal", std::make_shared<InlineContent>(UniversalTag(*root.latest)),
           st->identity.mtime_ns,
           FileAccess{st->access.mode & 0444, st->access.uid, st->access.gid}, nullptr});
    }
  }
}

void AddHfWeights(Env& env, const HfWeightsOptions& options, const RootListing& root,
                  TagViews& latest, View::SourceDirExtras* extras) {
  const TagListing* tag = nullptr;
  for (const TagListing& t : root.tags) {
    if (t.name == *root.latest) tag = &t;
  }
  auto opened = latest.Opened();
  auto files = opened.ok() ? HfWeightsFiles(env, *opened, options)
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
  // Built from the rank files: the newest one's time.
  int64_t built = 0;
  for (const SourceFile& s : *sources) built = std::max(built, s.identity.mtime_ns);
  for (NamedContent& f : *files) {
    extras->files.push_back({f.name, std::move(f.content), built, access, sources});
  }
}

}  // namespace ucfs
