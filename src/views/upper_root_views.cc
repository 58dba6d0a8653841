#include "ucfs/views/upper_root_views.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/views/hf_weights.h"
#include "ucfs/views/universal_view.h"
#include "views/tag_views.h"

namespace ucfs {
namespace {

// A tag's rank files as they are now: what a view of it was made from.
std::string Identities(Env& env, const TagListing& tag) {
  std::string out;
  auto add = [&](const std::string& path) {
    if (path.empty()) return;
    auto st = env.Stat(path);
    if (!st.ok()) {
      out += path + ":gone;";
      return;
    }
    out += fmt::format("{}:{}:{}:{}:{};", path, st->identity.size, st->identity.mtime_ns,
                       st->identity.ctime_ns, st->identity.inode);
  };
  for (const CheckpointFiles& shard : tag.grid.shards) {
    for (const std::string& p : shard.optim_files) add(p);
    for (const std::string& p : shard.model_files) add(p);
  }
  for (const auto& [key, p] : tag.grid.layer_files) add(p);
  return out;
}

RunViewOptions WithoutReshard(RunViewOptions options) {
  options.reshard.reset();
  return options;
}

}  // namespace

UpperRootViews::UpperRootViews(std::shared_ptr<View> view, Env& env, RunViewOptions options)
    : view_(std::move(view)), env_(env), options_(WithoutReshard(std::move(options))) {}

bool UpperRootViews::MightShow(std::string_view name) {
  return name.ends_with("_universal") || name.ends_with("_fp32") || name == "model.safetensors" ||
         name == "model.safetensors.index.json" ||
         (name.starts_with("model-") && name.ends_with(".safetensors"));
}

bool UpperRootViews::Update(const std::string& path, const std::string& dir) {
  auto entries = env_.ListDir(dir);
  if (!entries.ok()) return false;
  std::optional<RootListing> root = ListRoot(env_, dir, *entries);
  if (!root) return false;
  std::lock_guard<std::mutex> lock(mu_);
  Served& served = served_[dir];
  Served now = served;
  // The complete tags whose files changed since their views were made (a
  // tag still being written is not complete, and says nothing yet).
  RootListing changed = *root;
  changed.tags.clear();
  for (const TagListing& tag : root->tags) {
    if (!tag.complete) continue;
    std::string ids = Identities(env_, tag);
    if (served.tags[tag.name] != ids) changed.tags.push_back(tag);
    now.tags[tag.name] = std::move(ids);
  }
  View::SourceDirExtras extras;
  if (options_.extra_views) {
    AddTagViews(env_, options_, changed, *entries, {}, &extras);
    // latest_universal when latest names another complete tag than before.
    std::erase_if(extras.files, [](const auto& f) { return f.name == "latest_universal"; });
    const bool on_disk = std::any_of(entries->begin(), entries->end(), [](const DirEntry& e) {
      return e.name == "latest_universal";
    });
    auto st = env_.Stat(JoinPath(dir, "latest"));
    if (root->latest && now.tags.contains(*root->latest) && *root->latest != served.latest &&
        !on_disk && st.ok()) {
      extras.files.push_back(
          {"latest_universal", std::make_shared<InlineContent>(UniversalTag(*root->latest)),
           st->identity.mtime_ns,
           FileAccess{st->access.mode & 0444, st->access.uid, st->access.gid}, nullptr});
    }
  }
  if (root->latest && now.tags.contains(*root->latest)) now.latest = *root->latest;
  if (options_.hf_weights && root->latest && now.tags.contains(*root->latest) &&
      WantsHfWeights(*entries) && now.tags[*root->latest] != served.weights) {
    // Tried once for each state of latest's files: a half-written one
    // fails (and says so), the whole one then succeeds.
    now.weights = now.tags[*root->latest];
    TagViews latest(env_, dir, *root->latest, options_);
    AddHfWeights(env_, *options_.hf_weights, *root, latest, &extras);
  }
  served = std::move(now);
  if (extras.grafts.empty() && extras.files.empty()) return false;
  auto at = view_->MakeDirectories(path);
  Status put = at.ok() ? view_->PutExtras(*at, std::move(extras)) : at.status();
  if (!put.ok()) {
    spdlog::warn("{}: its views are not shown: {}", TerminalSafe(dir), TerminalSafe(put.message()));
    return false;
  }
  spdlog::info("{}: views of the checkpoint saved there, at {}", TerminalSafe(dir),
               TerminalSafe(path.empty() ? "/" : path));
  return true;
}

}  // namespace ucfs
