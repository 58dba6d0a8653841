// `ucfs export`: a view written out as real files (include/ucfs/tools/export.h).
#ifndef UCFS_CLI_EXPORT_COMMAND_H_
#define UCFS_CLI_EXPORT_COMMAND_H_

#include <string>

#include "cli/mount_args.h"

namespace ucfs::cli {

struct ExportArgs {
  MountArgs view;  // what to export from (the mount options export takes)
  std::string out;
  bool fp32 = false;  // the consolidated weights instead of the layout
  unsigned threads = 0;
  bool no_sync = false;
};

// Returns the process exit status (0, 1 on a checkpoint or I/O error, 2 on
// bad usage); messages go to stderr.
int RunExport(const ExportArgs& args);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_EXPORT_COMMAND_H_
