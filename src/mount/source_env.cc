#include "ucfs/mount/source_env.h"

#include <utility>

#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/mount/placement.h"
#include "ucfs/overlay/layered_env.h"

namespace ucfs {

Result<CheckpointEnv> OpenCheckpointEnv(Env& host, const std::string& path) {
  CheckpointEnv out;
  UCFS_ASSIGN_OR_RETURN(std::string root, ResolveCheckpointRoot(host, path));
  UCFS_ASSIGN_OR_RETURN(out.env, host.Confine(root));
  UCFS_ASSIGN_OR_RETURN(out.path, host.RealPath(path));
  out.root = std::move(root);
  return out;
}

Status LayOver(Env& host, const std::vector<std::string>& layers, CheckpointEnv& source) {
  UCFS_ASSIGN_OR_RETURN(std::string root, ResolveCheckpointRoot(host, source.path));
  if (root != source.path) {
    return Status::InvalidArgument(
        "--layer: " + source.path +
        " is a tag directory; a layer lies over what a mount's root showed, so mount its "
        "root (" +
        root + ") or the run directory holding it");
  }
  std::vector<EnvLayer> stack;
  for (const std::string& layer : layers) {
    auto resolved = host.RealPath(layer);
    if (!resolved.ok()) {
      return Status::FromErrno("--layer " + layer, resolved.status().posix_errno());
    }
    const std::string dir = std::move(resolved).value();
    if (!host.IsDirectory(dir)) {
      return Status::InvalidArgument("--layer " + layer + ": not a directory");
    }
    UCFS_RETURN_IF_ERROR(CheckPlacement(host, {source.path}, "--layer", dir, Placement::kApart));
    auto env = host.Confine(dir);
    if (!env.ok()) return env.status().Annotate("--layer " + layer);
    stack.push_back({std::move(env).value(), dir});
  }
  source.env = NewLayeredEnv(std::move(source.env), source.path, std::move(stack));
  return Status::OK();
}

Result<std::shared_ptr<Env>> RouteUpper(Env& host, std::shared_ptr<Env> env,
                                        const std::string& source_dir, std::string* upper) {
  // Made now, as the overlay would make it: the run directory's time, as
  // the overlay gives a root it makes.
  auto source = host.Stat(source_dir);
  auto made = host.MakeDir(*upper, 0755, source.ok() ? source->identity.mtime_ns : 0);
  if (!made.ok()) return made.status().Annotate("--upper");
  auto resolved = host.RealPath(*upper);
  if (!resolved.ok())
    return Status::FromErrno("--upper " + *upper, resolved.status().posix_errno());
  *upper = std::move(resolved).value();
  auto confined = host.Confine(*upper);
  if (!confined.ok()) return confined.status().Annotate("--upper " + *upper);
  return std::shared_ptr<Env>(NewRoutedEnv(std::move(env), *upper, std::move(confined).value()));
}

}  // namespace ucfs
