// `ucfs export`: a view written out as real files (include/ucfs/export.h).
#ifndef UCFS_SRC_CLI_EXPORT_COMMAND_H_
#define UCFS_SRC_CLI_EXPORT_COMMAND_H_

#include <cstdint>
#include <optional>
#include <string>

namespace ucfs::cli {

struct ExportArgs {
  std::string checkpoint;
  std::string out;
  std::optional<std::string> tag;
  std::optional<uint32_t> world_size;
  std::optional<uint64_t> sub_group_size;
  bool fp32 = false;  // the consolidated weights instead of the layout
  bool crc = false;
  unsigned threads = 0;
  bool no_sync = false;
  std::optional<std::string> cache_dir;
  bool no_cache = false;
};

// Returns the process exit status (0, 1 on a checkpoint or I/O error, 2 on
// bad usage); messages go to stderr.
int RunExport(const ExportArgs& args);

}  // namespace ucfs::cli

#endif  // UCFS_SRC_CLI_EXPORT_COMMAND_H_
