// The shared index of a checkpoint tag (src/design/shared-index.md): made
// once by `ucfs index` and kept beside the tag, as <root>/<tag>.ucfs-index,
// where every node's mount finds it and reads it instead of asking the
// shared file system about every rank file.
#ifndef UCFS_MOUNT_SHARED_INDEX_H_
#define UCFS_MOUNT_SHARED_INDEX_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/tag_snapshot.h"
#include "ucfs/views/run_view.h"

namespace ucfs {

// A tag, and where its index lies beside it.
struct TagLocation {
  std::string root;
  std::string tag;
  std::string tag_dir;     // root/tag
  std::string index_file;  // root/tag.ucfs-index
};
// Tag `tag` of root `root`.
TagLocation TagAt(std::string root, std::string tag);
// The tag a mount of `path` (a checkpoint root or a tag directory, as
// `env` names it) serves: `tag` when given, else what the root's `latest`
// names.
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

// Where a mount looks for a tag's index, and what it found.
struct FoundIndex {
  std::shared_ptr<const TagSnapshot> snapshot;  // null where none is current
  std::string index_file;                       // where it was read
};
// In `index_dir` first (`--index-dir`, read through `index_env`), then,
// where `beside`, beside the tag (through `source`). Says at -v why an
// index that is there is not used.
FoundIndex FindSharedIndex(Env* index_env, const std::optional<std::string>& index_dir, Env& source,
                           const TagLocation& where, bool beside);

// For the tags of a run directory, and a root's other tags (RunViewOptions::
// shared_index): the index FindSharedIndex finds, each found one served
// through a SnapshotEnv over `source`. `index_env` may be null where there
// is no `index_dir`.
std::function<std::optional<IndexedTag>(const std::string& root, const std::string& tag)>
SharedIndexFinder(std::shared_ptr<Env> source, std::shared_ptr<Env> index_env,
                  std::optional<std::string> index_dir);

// What `ucfs index` did with one tag of a run.
struct TagIndexed {
  std::string tag_dir;
  std::string index_file;  // written, or found current
  bool written = false;    // else it was current already, or `error` says why not
  Status error;
};

// `ucfs index RUN`: every complete tag of every root of the run directory
// `run` (run_layout.h's FindRoots), each as WriteSharedIndex writes it, but
// a tag whose index is current is left as it is: run after each save, it
// writes the new tags' indexes only. One tag's failure is reported in its
// TagIndexed and the others go on; an error only where `run` holds no root.
Result<std::vector<TagIndexed>> WriteRunIndexes(
    Env& host, const std::string& run, const std::optional<std::string>& index_dir = std::nullopt);

}  // namespace ucfs

#endif  // UCFS_MOUNT_SHARED_INDEX_H_
