#include "ucfs/base/path.h"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace ucfs {
namespace {

std::string_view WithoutTrailingSlashes(std::string_view p) {
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  return p;
}

}  // namespace

std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view c = path.substr(0, slash);
    if (!c.empty()) out.push_back(c);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

std::optional<std::string_view> RelativeBelow(std::string_view path, std::string_view dir) {
  path = WithoutTrailingSlashes(path);
  dir = WithoutTrailingSlashes(dir);
  const bool absolute = path.starts_with('/');
  if (absolute != dir.starts_with('/') && !(dir.empty() && !absolute)) return std::nullopt;
  std::string_view rel;
  if (dir.empty() || dir == "/") {
    rel = path;
  } else if (path.starts_with(dir) && (path.size() == dir.size() || path[dir.size()] == '/')) {
    rel = path.substr(dir.size());
  } else {
    return std::nullopt;
  }
  while (rel.starts_with('/')) rel.remove_prefix(1);
  for (std::string_view c : Components(rel)) {
    if (c == "..") return std::nullopt;  // climbs out
  }
  return rel;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

std::pair<std::string_view, std::string_view> SplitLast(std::string_view path) {
  path = WithoutTrailingSlashes(path);
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {"", path};
  if (slash == 0) return {path.substr(0, 1), path.substr(1)};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

Result<std::string> RealPath(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return Status::FromErrno(path, errno);
  std::string out(resolved);
  std::free(resolved);
  return out;
}

}  // namespace ucfs
