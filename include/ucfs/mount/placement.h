// Where a path may stand to a checkpoint: ucfs never writes into one, and a
// mount never waits on itself.
#ifndef UCFS_MOUNT_PLACEMENT_H_
#define UCFS_MOUNT_PLACEMENT_H_

#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"

namespace ucfs {

// How `path` must stand to the checkpoint's directories (its root and tag
// directory, symlinks resolved).
enum class Placement {
  kApart,    // neither inside the other, nor the same (--upper; a mountpoint)
  kOutside,  // not the same and not inside them; it may contain them (export)
};
// InvalidArgument naming `what` ("--upper", "the mountpoint") when `path`
// breaks the rule. Paths are resolved through `host` as far as they exist.
Status CheckPlacement(Env& host, const std::vector<std::string>& source_dirs,
                      const std::string& what, const std::string& path, Placement placement);

// A mountpoint must be an existing, empty directory: mounting over files
// hides them, and over another mount stacks two.
Status CheckMountpoint(Env& host, const std::string& path);

}  // namespace ucfs

#endif  // UCFS_MOUNT_PLACEMENT_H_
