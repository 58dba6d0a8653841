// The shared index of a checkpoint tag (src/design/shared-index.md): made
// once by `ucfs index` and kept beside the tag, as <root>/<tag>.ucfs-index,
// where every node's mount finds it and reads it instead of asking the
// shared file system about every rank file.
#ifndef UCFS_MOUNT_SHARED_INDEX_H_
#define UCFS_MOUNT_SHARED_INDEX_H_

#include <memory>
#include <optional>
#include <string>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/tag_snapshot.h"

namespace ucfs {

// The tag a mount of `path` (a checkpoint root or a tag directory, as
// `env` names it) serves: `tag` when given, else what the root's `latest`
// names.
struct TagLocation {
  std::string root;
  std::string tag;
  std::string tag_dir;     // root/tag
  std::string index_file;  // root/tag.ucfs-index
};
Result<TagLocation> LocateTag(Env& env, const std::string& path,
                              const std::optional<std::string>& tag);

// The tag's index file in `index_dir` (`--index-dir`: where the checkpoint's
// directory is not writable by whoever indexes it): <tag>-<hash>.ucfs-index,
// the hash (FNV-1a, 64 bits) of the tag directory's absolute real path, so
// that the tags of many runs share one directory.
std::string IndexFileIn(const std::string& index_dir, const TagLocation& where);

// `ucfs index`: runs the universal view's discovery of `checkpoint` (as
// the user named it) through a RecordingEnv over `host`, and writes its
// snapshot atomically (a temporary file beside it, fsync, rename, fsync of
// the directory) through host.Writer(), to the tag's index file beside it
// or, given `index_dir`, to IndexFileIn(index_dir). Returns the file's path.
Result<std::string> WriteSharedIndex(Env& host, const std::string& checkpoint,
                                     const std::optional<std::string>& tag,
                                     const std::optional<std::string>& index_dir = std::nullopt);

// At mount: the snapshot in `index_file`, read through `index_env`, if there
// is one and it still describes `where`'s tag directory as `source` sees it
// (it decodes, it is of this tag, and the directory's identity is the one
// recorded); null otherwise, with the reason in `note` ("" where there is no
// index file).
std::shared_ptr<const TagSnapshot> ReadSharedIndex(Env& index_env, const std::string& index_file,
                                                   Env& source, const TagLocation& where,
                                                   std::string* note);

}  // namespace ucfs

#endif  // UCFS_MOUNT_SHARED_INDEX_H_
