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

// `ucfs index`: runs the universal view's discovery of `checkpoint` (as
// the user named it) through a RecordingEnv over `host`, and writes its
// snapshot to the tag's index file atomically (a temporary file beside it,
// fsync, rename, fsync of the directory) through host.Writer(). Returns the
// index file's path.
Result<std::string> WriteSharedIndex(Env& host, const std::string& checkpoint,
                                     const std::optional<std::string>& tag);

// At mount: the snapshot of `where`, read through `env`, if there is one
// and it still describes the tag directory (it decodes, it is of this tag,
// and the directory's identity is the one recorded); nullopt otherwise,
// with the reason in `note` ("" where there is no index file).
std::shared_ptr<const TagSnapshot> ReadSharedIndex(Env& env, const TagLocation& where,
                                                   std::string* note);

}  // namespace ucfs

#endif  // UCFS_MOUNT_SHARED_INDEX_H_
