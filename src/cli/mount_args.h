// What `ucfs mount` is asked to do, whichever way it was asked: its own
// command line, or mount(8)'s helper argv (mount_helper.h). One struct, so
// both reach the same mount path; each field's flag, `-o` key and help are
// in mount_options.h, the one table of them.
#ifndef UCFS_CLI_MOUNT_ARGS_H_
#define UCFS_CLI_MOUNT_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ucfs::cli {

struct MountArgs {
  std::string checkpoint;
  std::string mountpoint;
  std::optional<std::string> tag;
  bool foreground = false;
  bool fuse_debug = false;
  // Options for libfuse and the kernel (allow_other, ...).
  std::vector<std::string> options;
  // Each -v: more log output.
  int verbosity = 0;
  std::optional<std::string> cache_dir;
  std::optional<std::string> index_dir;  // the shared index's, if not beside the tag
  bool no_cache = false;
  bool crc = false;
  std::string log_file;
  std::optional<uint32_t> world_size;
  std::optional<uint64_t> sub_group_size;
  std::optional<std::string> universal_info;  // --universal-info FILE
  std::optional<std::string> upper;
  // Earlier mounts' upper directories, read-only under this one's, oldest
  // first (mount/mount_plan.h: MountRequest::layers).
  std::vector<std::string> layers;
  // A writable mount of a run directory shows the extra views
  // (<tag>_universal, latest_universal, <tag>_fp32) only when asked.
  bool views = false;
  // New ranks get no copy of the frameworks' per-rank files.
  bool no_rank_file_copies = false;
  // The dtype of the Hugging Face weights beside config.json: "bf16",
  // "fp16" or "fp32"; default the training dtype.
  std::optional<std::string> weights_dtype;
  // Tuning switches (fuse::ServeOptions): the defaults are the fast ones;
  // --no-* measure what each buys, --drop-source-pages trades speed for page
  // cache.
  bool no_prefetch = false;
  bool no_splice = false;
  bool drop_source_pages = false;
  bool no_direct_writes = false;
  bool no_passthrough = false;
};

// The bounds `ucfs mount --world-size` accepts.
inline constexpr uint32_t kMaxWorldSize = 1u << 20;

}  // namespace ucfs::cli

#endif  // UCFS_CLI_MOUNT_ARGS_H_
