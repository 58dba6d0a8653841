#include "ucfs/mount/placement.h"

#include <cerrno>
#include <filesystem>

#include "ucfs/base/path.h"

namespace ucfs {
namespace {

// `path` (absolute) with symlinks resolved as far as it exists, the rest
// taken as written: where an --upper or an export not yet made would be.
std::string Resolved(Env& host, const std::string& path) {
  std::string normal = std::filesystem::path(path).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  std::string rest;
  for (std::string at = normal;;) {
    if (auto real = host.RealPath(at); real.ok())
      return rest.empty() ? *real : JoinPath(*real, rest);
    const auto [parent, name] = SplitLast(at);
    if (parent.empty() || at == "/") return normal;
    rest = rest.empty() ? std::string(name) : JoinPath(name, rest);
    at = std::string(parent);
  }
}

}  // namespace

Status CheckPlacement(Env& host, const std::vector<std::string>& source_dirs,
                      const std::string& what, const std::string& path, Placement placement) {
  const std::string p = Resolved(host, path);
  for (const std::string& dir : source_dirs) {
    if (dir.empty()) continue;
    const std::string d = Resolved(host, dir);
    if (IsAtOrBelow(p, d)) {
      return Status::InvalidArgument(what + " " + path + " is inside the checkpoint (" + d +
                                     "): ucfs never writes there");
    }
    if (placement == Placement::kApart && IsAtOrBelow(d, p)) {
      return Status::InvalidArgument(what + " " + path + " holds the checkpoint (" + d +
                                     "): it must lie apart from it");
    }
  }
  return Status::OK();
}

Status CheckMountpoint(Env& host, const std::string& path) {
  auto entries = host.ListDir(path);
  if (!entries.ok()) {
    const int err = entries.status().posix_errno();
    return Status::FromErrno(path + ": the mountpoint must be an existing, empty directory",
                             err != 0 ? err : ENOENT);
  }
  if (!entries->empty()) {
    return Status::InvalidArgument(path +
                                   ": the mountpoint is not empty (or is mounted already); "
                                   "mounting would hide what is there");
  }
  return Status::OK();
}

}  // namespace ucfs
