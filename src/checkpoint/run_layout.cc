#include "ucfs/checkpoint/run_layout.h"

#include <algorithm>
#include <cstdint>

namespace ucfs {

std::optional<RootListing> ListRoot(Env& env, const std::string& dir,
                                    const std::vector<DirEntry>& entries) {
  const auto has_latest = std::find_if(entries.begin(), entries.end(), [](const DirEntry& e) {
    return e.name == "latest" && !e.is_dir;
  });
  if (has_latest == entries.end()) return std::nullopt;
  RootListing root;
  root.dir = dir;
  for (const DirEntry& e : entries) {
    // A link to a tag is shown as a link: the tag is served under its own name.
    if (!e.is_dir || e.is_symlink) continue;
    // A directory of optimizer rank files is a tag, complete or not; a
    // tensor- and pipeline-parallel one too (its grid of files).
    auto grid = ListParallelCheckpointFiles(env, dir, e.name);
    // A tag ucfs does not serve (a layer file beside ZeRO-3 files): said.
    const bool unserved = !grid.ok() && grid.status().code() == Status::Code::kNotSupported;
    if (!grid.ok() && !unserved) continue;
    TagListing tag;
    tag.name = e.name;
    tag.dir = JoinPath(dir, e.name);
    if (auto st = env.Stat(tag.dir); st.ok()) {
      tag.mtime_ns = st->identity.mtime_ns;
      tag.access = st->access;
    }
    if (unserved) {
      tag.problem = grid.status().message();
    } else {
      Status complete = CheckNoParallelFileMissing(*grid);
      tag.complete = complete.ok();
      tag.problem = complete.ok() ? "" : complete.message();
      tag.grid = std::move(grid).value();
    }
    root.tags.push_back(std::move(tag));
  }
  if (root.tags.empty()) return std::nullopt;
  std::sort(root.tags.begin(), root.tags.end(),
            [](const TagListing& a, const TagListing& b) { return a.name < b.name; });
  if (auto latest = ReadLatestTag(env, JoinPath(dir, "latest")); latest.ok()) {
    for (const TagListing& t : root.tags) {
      if (t.name == *latest) root.latest = t.name;
    }
  }
  return root;
}

namespace {

constexpr const char* kWhatARootIs =
    "a checkpoint root is a directory with a `latest` file and tag directories of "
    "*_optim_states.pt files";

// Breadth first from `dir`, roots in the order met; stops after `limit`
// roots, or with an error past `max_directories` listings.
Result<std::vector<RootListing>> WalkRoots(Env& env, const std::string& dir, size_t max_directories,
                                           size_t limit) {
  std::vector<RootListing> found;
  std::vector<std::string> level = {dir};
  size_t listed = 0;
  for (int depth = 0; !level.empty(); ++depth) {
    std::vector<std::string> next;
    for (const std::string& d : level) {
      if (listed == max_directories) {
        return Status::NotFound(
            dir + ": stopped looking for DeepSpeed checkpoints after listing " +
            std::to_string(listed) + " directories below it, " + std::to_string(depth) +
            " levels down" + (found.empty() ? ", having found none" : "") +
            ": name a run or checkpoint directory further down (" + kWhatARootIs + ")");
      }
      ++listed;
      auto entries = env.ListDir(d);
      if (!entries.ok()) {
        if (depth == 0) return entries.status();
        continue;
      }
      if (auto root = ListRoot(env, d, *entries)) {
        found.push_back(std::move(*root));
        if (found.size() >= limit) return found;
        continue;
      }
      std::vector<std::string> subdirs;
      for (const DirEntry& e : *entries) {
        // Not through links (Lightning's last.ckpt): each root once, by its own name.
        if (e.is_dir && !e.is_symlink) subdirs.push_back(JoinPath(d, e.name));
      }
      std::sort(subdirs.begin(), subdirs.end());
      next.insert(next.end(), subdirs.begin(), subdirs.end());
    }
    level = std::move(next);
  }
  if (found.empty()) {
    return Status::NotFound(dir + ": no DeepSpeed checkpoint in it or below (" + kWhatARootIs +
                            ")");
  }
  return found;
}

}  // namespace

Result<RootListing> FindFirstRoot(Env& env, const std::string& dir, size_t max_directories) {
  UCFS_ASSIGN_OR_RETURN(std::vector<RootListing> roots, WalkRoots(env, dir, max_directories, 1));
  return std::move(roots.front());
}

Result<std::vector<RootListing>> FindRoots(Env& env, const std::string& dir,
                                           size_t max_directories) {
  return WalkRoots(env, dir, max_directories, SIZE_MAX);
}

}  // namespace ucfs
