// ucfs as mount(8)'s helper: `mount -t fuse.ucfs CKPT MNT -o world_size=4`
// and fstab lines of type fuse.ucfs run /sbin/mount.fuse.ucfs (a link to the
// ucfs binary), which lands here. The helper's argv becomes the MountArgs
// `ucfs mount` would build, so both run one mount path.
//
// What mount(8) passes (mount(8), "External helpers"; seen from
// util-linux 2.38): CKPT MNT [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE], with
// -o holding every option merged, `rw` or `ro` first, the fstab-only ones
// (x-*, comment=, noauto) already removed and `user` expanded into
// noexec,nosuid,nodev. Invoked by hand, the helper sees all of them.
#ifndef UCFS_CLI_MOUNT_HELPER_H_
#define UCFS_CLI_MOUNT_HELPER_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/mount_args.h"
#include "ucfs/base/status.h"

namespace ucfs::cli {

// True when argv[0]'s base name is mount.fuse.ucfs (what mount(8) runs for
// type fuse.ucfs) or mount.ucfs (type ucfs).
bool IsMountHelper(std::string_view argv0);

struct HelperRequest {
  MountArgs mount;
  // mount -f ("fake"): check the arguments, mount nothing.
  bool fake = false;
  bool help = false;
};

// Parses the helper's arguments (argv without argv[0]). Errors name the
// offending argument or option.
Result<HelperRequest> ParseMountHelperArgs(const std::vector<std::string>& args);

// The `ucfs mount` command line that does the same (shown with -v).
std::string EquivalentCommand(const HelperRequest& request);

// The helper's usage text, listing every option it maps onto `ucfs mount`.
std::string MountHelperUsage(std::string_view program);

// What `ucfs mount` runs; returns its exit status (0, 1 unreadable or not
// mounted, 2 bad usage).
using RunMountFn = std::function<int(MountArgs)>;

// The helper's main(): parses, then mounts through `run_mount`, which
// returns once the mount is ready (it daemonises after mounting). Returns
// mount(8)'s exit statuses: 0, 1 bad usage, 32 mount failure.
int MountHelperMain(int argc, char** argv, const RunMountFn& run_mount);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_MOUNT_HELPER_H_
