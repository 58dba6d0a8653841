#include "ucfs/view/run_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/view/consolidated_view.h"

namespace ucfs {
namespace {

// One tag's universal view (with its consolidated weights), built the
// first time either of its directories is looked into.
class TagViews {
 public:
  TagViews(Env& env, std::string root, std::string tag, const RunViewOptions& options)
      : env_(env), root_(std::move(root)), tag_(std::move(tag)), options_(options) {}

  Result<View::GraftTarget> Universal() { return Directory(UniversalTag(tag_)); }
  Result<View::GraftTarget> Consolidated() { return Directory(ConsolidatedDirName(tag_)); }

 private:
  Result<View::GraftTarget> Directory(const std::string& name) {
    std::call_once(built_, [this] { status_ = Build(); });
    UCFS_RETURN_IF_ERROR(status_);
    auto dir = view_->Lookup(kRootInode, name);
    if (!dir.ok()) {
      return Status::NotFound(JoinPath(root_, tag_) + ": no " + name +
                              " could be made for this tag (see the warning before)");
    }
    return View::GraftTarget{view_, *dir};
  }

  Status Build() {
    CheckpointOptions open;
    open.tag = tag_;
    open.source = options_.source;
    UCFS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(env_, root_, open));
    auto shared = std::make_shared<const Checkpoint>(std::move(ckpt));
    UCFS_ASSIGN_OR_RETURN(std::unique_ptr<View> view,
                          BuildUniversalView(env_, shared, options_.universal));
    view_ = std::move(view);
    spdlog::info("{}: tag {} opened ({} params, world size {})", root_, tag_,
                 shared->params().size(), shared->world_size());
    return Status::OK();
  }

  Env& env_;
  const std::string root_;
  const std::string tag_;
  const RunViewOptions options_;
  std::once_flag built_;
  Status status_;
  std::shared_ptr<View> view_;  // set in built_
};

// What the view makes of a directory it lists: nothing, or a root's views.
View::SourceDirExtras RootViews(Env& env, const RunViewOptions& options, const std::string& dir,
                                const std::vector<DirEntry>& entries) {
  View::SourceDirExtras extras;
  std::optional<RootListing> root = ListRoot(env, dir, entries);
  if (!root) return extras;
  auto on_disk = [&entries](const std::string& name) {
    return std::any_of(entries.begin(), entries.end(),
                       [&name](const DirEntry& e) { return e.name == name; });
  };
  for (const TagListing& tag : root->tags) {
    if (!tag.complete) {
      spdlog::warn("{}: tag {} is not served: {}", TerminalSafe(dir), TerminalSafe(tag.name),
                   TerminalSafe(tag.problem));
      continue;
    }
    auto views = std::make_shared<TagViews>(env, root->dir, tag.name, options);
    // Built from the tag: its time, and its owner's access without write.
    const FileAccess access{tag.access.mode & 0555, tag.access.uid, tag.access.gid};
    for (const std::string& name : {UniversalTag(tag.name), ConsolidatedDirName(tag.name)}) {
      if (on_disk(name)) continue;
      const bool universal = name == UniversalTag(tag.name);
      extras.grafts.push_back(
          {name,
           [views, universal] { return universal ? views->Universal() : views->Consolidated(); },
           tag.mtime_ns, access});
    }
  }
  if (root->latest && !on_disk("latest_universal")) {
    if (auto st = env.Stat(JoinPath(dir, "latest")); st.ok()) {
      extras.files.push_back({"latest_universal",
                              std::make_shared<InlineContent>(UniversalTag(*root->latest)),
                              st->identity.mtime_ns,
                              FileAccess{st->access.mode & 0444, st->access.uid, st->access.gid}});
    }
  }
  return extras;
}

}  // namespace

Result<std::shared_ptr<View>> BuildRunView(Env& env, const std::string& run_dir,
                                           const RunViewOptions& options) {
  UCFS_ASSIGN_OR_RETURN(FileStat st, env.Stat(run_dir));
  if (!st.is_dir) return Status::InvalidArgument(run_dir + ": not a directory");
  auto view = std::make_shared<View>(env, st.identity.mtime_ns);
  view->BackRootBy(run_dir);
  view->DecorateSourceDirectories(
      [&env, options](const std::string& dir, const std::vector<DirEntry>& entries) {
        return RootViews(env, options, dir, entries);
      });
  return view;
}

}  // namespace ucfs
