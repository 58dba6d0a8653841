// The options of a mount, written once: each one's `ucfs mount` flag (and
// `ucfs export`'s, where it has one), its `-o` key for mount(8)'s helper
// and fstab, what it takes, its help, and how it lands in MountArgs. The
// CLI's flags (AddMountOptions), the helper's parser and usage
// (mount_helper.cc) and the `ucfs mount` line the helper shows are all made
// from this table; man_pages_test.py holds both man pages to the --help
// texts made from it.
#ifndef UCFS_CLI_MOUNT_OPTIONS_H_
#define UCFS_CLI_MOUNT_OPTIONS_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/mount_args.h"
#include "ucfs/base/status.h"
#include "ucfs/mount/mount_plan.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ucfs::cli {

struct MountOption {
  std::string_view flags;  // CLI11 names ("--world-size", "-f,--foreground"); "" none
  std::string_view key;    // its `-o` key for mount(8) and fstab ("world_size"); "" none
  std::string_view value;  // what it takes ("N", "DIR"); "" a flag
  std::string_view help;
  bool repeatable = false;  // given again, adds (--layer)
  bool for_export = false;  // `ucfs export` takes it too
  // Takes `value` ("" for a flag) into `args`; InvalidArgument saying what
  // is wrong with it.
  Status (*take)(MountArgs& args, const std::string& value) = nullptr;
  // The values `args` holds of it, each as its flag's value ("" for a flag
  // that is set): the `ucfs mount` line a helper invocation stands for.
  std::vector<std::string> (*given)(const MountArgs& args) = nullptr;
};

std::span<const MountOption> MountOptions();

// Adds every option with flags to `app`, those `for_export` only when
// `for_export`, each taken into `*args` as it is parsed (a bad value is
// CLI11's ValidationError, naming the flag).
void AddMountOptions(CLI::App& app, MountArgs* args, bool for_export);

// What `args` asks for, as the mount plan takes it: every path absolute (a
// daemon works from "/").
Result<MountRequest> RequestOf(const MountArgs& args);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_MOUNT_OPTIONS_H_
