// `ucfs inspect`: what a checkpoint is, as text or JSON: a data-parallel
// checkpoint's params and partitions, a tensor- and pipeline-parallel
// grid's shard groups and universal name table (src/checkpoint/
// inspect_report.cc, parallel_inspect_report.cc), every tag of a run
// directory.
#ifndef UCFS_CLI_INSPECT_COMMAND_H_
#define UCFS_CLI_INSPECT_COMMAND_H_

#include <optional>
#include <string>

namespace ucfs::cli {

struct InspectArgs {
  std::string path;
  std::optional<std::string> tag;
  std::optional<std::string> universal_info;  // --universal-info FILE
  bool json = false;
};

// The process exit status: 0, or 1 when a checkpoint could not be read
// (the message on stderr names the file).
int RunInspect(const InspectArgs& args);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_INSPECT_COMMAND_H_
