#include "cli/view_setup.h"

#include <dirent.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "ucfs/checkpoint/index.h"
#include "ucfs/view/consolidated_view.h"
#include "ucfs/view/reshard_view.h"
#include "ucfs/view/universal_view.h"

namespace ucfs::cli {

Result<CheckpointEnv> OpenCheckpointEnv(const std::string& path) {
  CheckpointEnv out;
  UCFS_ASSIGN_OR_RETURN(std::string root, ResolveCheckpointRoot(path));
  UCFS_ASSIGN_OR_RETURN(out.env, NewConfinedPosixEnv(root));
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return Status::FromErrno(path, errno);
  out.path = resolved;
  std::free(resolved);
  return out;
}

Result<OpenedView> OpenView(const ViewRequest& r) {
  OpenedView out;
  UCFS_ASSIGN_OR_RETURN(CheckpointEnv source, OpenCheckpointEnv(r.checkpoint));
  out.env = source.env;
  Env& env = *out.env;
  std::unique_ptr<SummaryIndex> index;
  if (!r.no_cache) {
    auto opened = SummaryIndex::Open(env, r.cache_dir.value_or(DefaultIndexDir()));
    if (opened.ok()) {
      index = std::move(opened).value();
    } else {
      spdlog::warn("{} (going on without the index)", TerminalSafe(opened.status().message()));
    }
  }
  CheckpointOptions options;
  options.tag = r.tag;
  options.source = index.get();
  UCFS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(env, source.path, options));
  out.checkpoint = std::make_shared<const Checkpoint>(std::move(ckpt));
  out.index_note = index ? fmt::format("{} rank files from the index, {} read", index->cache_hits(),
                                       index->cache_misses())
                         : "no index";
  const std::string& tag = out.checkpoint->files().tag;
  if (r.world_size) {
    UCFS_ASSIGN_OR_RETURN(out.view,
                          BuildReshardView(env, out.checkpoint, {*r.world_size, r.sub_group_size}));
    out.layout_roots = {"latest", tag};
  } else {
    UniversalViewOptions view_options;
    view_options.compute_crc = r.crc;
    UCFS_ASSIGN_OR_RETURN(out.view, BuildUniversalView(env, out.checkpoint, view_options));
    out.layout_roots = {"latest_universal", UniversalTag(tag)};
  }
  out.consolidated_root = ConsolidatedDirName(tag);
  return out;
}

namespace {

namespace fs = std::filesystem;

std::string Resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal().string() : p.string();
}

bool Within(const std::string& inner, const std::string& outer) {
  return inner == outer || inner.starts_with(outer == "/" ? outer : outer + "/");
}

}  // namespace

Status CheckPlacement(const Checkpoint& checkpoint, const std::string& what,
                      const std::string& path, Placement placement) {
  const std::string p = Resolved(path);
  for (const std::string& dir : {checkpoint.files().root, checkpoint.files().tag_dir}) {
    if (dir.empty()) continue;
    const std::string d = Resolved(dir);
    if (Within(p, d)) {
      return Status::InvalidArgument(what + " " + path + " is inside the checkpoint (" + d +
                                     "): ucfs never writes there");
    }
    if (placement == Placement::kApart && Within(d, p)) {
      return Status::InvalidArgument(what + " " + path + " holds the checkpoint (" + d +
                                     "): it must lie apart from it");
    }
  }
  return Status::OK();
}

Status CheckMountpoint(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    return Status::FromErrno(path + ": the mountpoint must be an existing, empty directory", errno);
  }
  bool empty = true;
  while (dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(dir);
  if (!empty) {
    return Status::InvalidArgument(path +
                                   ": the mountpoint is not empty (or is mounted already); "
                                   "mounting would hide what is there");
  }
  return Status::OK();
}

}  // namespace ucfs::cli
