// The upper directory's bookkeeping, shared by the Overlay's operations:
// how a name is stored there (escaped names, whiteouts, the opaque marker,
// copy-up temporaries: overlay.h says why), and the calls relative to
// directory fds that every operation makes.
//
// Private to src/overlay/.
#ifndef UCFS_OVERLAY_UPPER_DIR_H_
#define UCFS_OVERLAY_UPPER_DIR_H_

#include <sys/stat.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/base/unique_fd.h"
#include "ucfs/base/write_env.h"

namespace ucfs {

inline constexpr std::string_view kWhiteoutPrefix = ".wh.";
inline constexpr std::string_view kOpaque = ".wh..opq";
// ".wh..wh." names are ucfs's own, never the whiteout of a user's entry.
inline constexpr std::string_view kPrivatePrefix = ".wh..wh.";
inline constexpr std::string_view kEscapedEntry = ".wh..wh.e.";
inline constexpr std::string_view kEscapedWhiteout = ".wh..wh.w.";
inline constexpr std::string_view kCopyUpPrefix = ".wh..wh.copyup.";

// Where an entry named `name` is stored in its upper directory.
std::string StoredName(std::string_view name);
// The whiteout hiding the view's entry `name`.
std::string WhiteoutName(std::string_view name);

enum class Stored { kEntry, kWhiteout, kInternal };
// What an upper directory's entry `stored` is, and the name it is about.
Stored Classify(std::string_view stored, std::string* name);

// ENAMETOOLONG for a name that is, or is stored as, longer than NAME_MAX.
Status CheckName(std::string_view path, std::string_view name);

// Whether `name` exists in `dir` (lstat), its stat in *st if asked.
bool StatAt(int dir, const std::string& name, struct stat* st = nullptr);
Status Fail(int err, std::string_view path, std::string_view what);
// An O_PATH fd of the directory `name` in `dir`, never through a symlink.
Result<UniqueFd> OpenDirAt(int dir, const std::string& name, std::string_view what);
UniqueFd Dup(int fd);

struct UpperName {
  std::string stored;
  bool is_dir;
};
// The entries of an upper directory (stored names), without "." and "..".
// `touch_atime`: read as the mount's user reads a directory, which may move
// its atime; otherwise with O_NOATIME (where the daemon may), as the
// overlay's own looks at a directory are no reading of it.
Result<std::vector<UpperName>> ListUpper(int dir, std::string_view what, bool touch_atime = false);
// Copy-up temporaries a crash left behind, anywhere in the upper tree.
void RemoveStaleCopyUps(WriteEnv& writer, int dir, int depth);
// Marks the directory `name` in `dir` opaque: the view's directory of the
// same name no longer shows through it; its times stay (the marker is
// bookkeeping, not a change of the directory).
Status MarkOpaque(WriteEnv& writer, int dir, const std::string& name);
// Makes the empty file `name` in `dir` (a whiteout, an opaque marker) if
// it is not there.
Status MakeMarker(WriteEnv& writer, int dir, const std::string& name);
// Whether the upper directory `name` in `dir` is opaque.
bool IsOpaque(int dir, const std::string& name);

// Puts the atime and mtime of `fd` (any fd, O_PATH ones too) back to
// `before`'s: the overlay's bookkeeping in a directory is no change of it.
// Best effort.
void RestoreTimes(WriteEnv& writer, int fd, const struct stat& before);

}  // namespace ucfs

#endif  // UCFS_OVERLAY_UPPER_DIR_H_
