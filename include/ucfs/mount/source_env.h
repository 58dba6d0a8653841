// The Envs a checkpoint is read through: confined to it, with earlier
// mounts' upper directories laid over it, and a writable mount's upper
// directory routed to an Env confined there.
#ifndef UCFS_MOUNT_SOURCE_ENV_H_
#define UCFS_MOUNT_SOURCE_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"

namespace ucfs {

// A checkpoint's files, read only through an Env confined to its root
// (Env::Confine of `host`): every command that reads a checkpoint opens it
// so, and a symlink in it never leads the daemon out of it.
struct CheckpointEnv {
  std::shared_ptr<Env> env;
  std::string path;  // the checkpoint's path, resolved (what the Env accepts)
  std::string root;  // the directory `env` is confined to: `path` or its parent
};
Result<CheckpointEnv> OpenCheckpointEnv(Env& host, const std::string& path);

// `layers` (each an earlier mount's upper directory, oldest first) laid over
// the checkpoint in `source`: what a trainer saved through them shows as
// the source does. `source` must be a root, not a tag directory.
Status LayOver(Env& host, const std::vector<std::string>& layers, CheckpointEnv& source);

// `env`, but with the paths below `upper` (made where missing, with the
// time of `source_dir`, 0755 whatever the umask: a shared mount's root) read
// through an Env confined there; `upper` comes back resolved.
Result<std::shared_ptr<Env>> RouteUpper(Env& host, std::shared_ptr<Env> env,
                                        const std::string& source_dir, std::string* upper);

}  // namespace ucfs

#endif  // UCFS_MOUNT_SOURCE_ENV_H_
