// Paths as strings: '/'-separated, taken apart by components, never looked
// up on the file system.
//
// Every confinement in ucfs ("does this path lie in the checkpoint root, the
// upper directory, this layer?") asks RelativeBelow, so that one rule holds
// everywhere: a component matches whole ("/a/bc" is not below "/a/b"),
// trailing and doubled slashes do not count, and a path that climbs out
// with ".." is below nothing (the string alone cannot say where it leads;
// the Envs open with RESOLVE_BENEATH besides, which settles symlinks).
#ifndef UCFS_BASE_PATH_H_
#define UCFS_BASE_PATH_H_

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/status.h"

namespace ucfs {

// `path` relative to `dir` ("" when they name the same directory), or
// nullopt when `path` is not at or below `dir`. Both absolute, or both
// relative; the relative "" is the top of a relative tree (an overlay's
// root), at or above every relative path. The result is a view of `path`.
std::optional<std::string_view> RelativeBelow(std::string_view path, std::string_view dir);
inline bool IsAtOrBelow(std::string_view path, std::string_view dir) {
  return RelativeBelow(path, dir).has_value();
}

// The non-empty components of `path`, in order ("/a//b/" -> {"a", "b"}).
std::vector<std::string_view> Components(std::string_view path);
// "dir/name" without doubling slashes; `name` alone where `dir` is "".
std::string JoinPath(std::string_view dir, std::string_view name);
// The last component and what leads to it: "a/b/c" -> {"a/b", "c"},
// "c" -> {"", "c"}, "/c" -> {"/", "c"}; trailing slashes first dropped.
std::pair<std::string_view, std::string_view> SplitLast(std::string_view path);
// The last path component ("a/b/c.pt" -> "c.pt").
inline std::string_view BaseName(std::string_view path) { return SplitLast(path).second; }

// realpath(3): the absolute path without symlinks, or the errno naming `path`.
Result<std::string> RealPath(const std::string& path);

// File times as the kernel keeps them and as ucfs carries them (ns since the epoch).
inline int64_t NanosOf(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}
inline struct timespec TimespecOf(int64_t ns) {
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

}  // namespace ucfs

#endif  // UCFS_BASE_PATH_H_
