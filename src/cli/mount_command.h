// `ucfs mount`: a plan (mount/mount_plan.h) served through FUSE.
#ifndef UCFS_CLI_MOUNT_COMMAND_H_
#define UCFS_CLI_MOUNT_COMMAND_H_

#include "cli/mount_args.h"

namespace ucfs::cli {

// Returns the process exit status (0; 1 when the checkpoint cannot be read
// or mounted; 2 on bad usage); messages go to stderr. Daemonises unless
// args.foreground.
int RunMount(MountArgs args);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_MOUNT_COMMAND_H_
