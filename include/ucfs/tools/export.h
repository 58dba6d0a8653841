// Export: a view written out as real files — the drop-in replacement for
// ds_to_universal.py (and zero_to_fp32.py), byte-identical to what the
// mount shows.
//
// Bytes go from the source shards to the output with copy_file_range
// (in-kernel, no copy through user space; plain pread/pwrite where the
// kernel cannot), in 64 MiB chunks spread over threads. Each file is
// written as a hidden temporary, synced and renamed into place, so an
// interrupted export leaves whole files only; running it again skips every
// file already there with the right size and mtime, and redoes the rest.
// A failed one (a full disk, an I/O error: every write goes through the
// WriteEnv seam) leaves no temporary behind and no file but whole ones.
#ifndef UCFS_TOOLS_EXPORT_H_
#define UCFS_TOOLS_EXPORT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/base/write_env.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

struct ExportFile {
  std::string path;  // relative to the output directory
  InodeId inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t mode = 0444;  // the view's permission bits, which the copy keeps
  // A symbolic link the view shows: exported as a link holding this.
  std::optional<std::string> link;
};

// The files below the view's entries `roots` (files or directories, given
// as '/'-separated paths from the view's root: "latest_universal",
// "checkpoint-4/global_step4_universal"), in a stable order.
Result<std::vector<ExportFile>> ListExport(View& view, const std::vector<std::string>& roots);

struct ExportOptions {
  unsigned threads = 0;  // 0: one per CPU (at least 4: the work waits on disks)
  bool sync = true;      // fsync each file before renaming it into place
  // Called (from any thread) as bytes are written or found already there.
  std::function<void(uint64_t bytes)> on_bytes;
  // What the output is written through (thread-safe); null: the real file
  // system's (Env::Posix()->Writer()).
  WriteEnv* writer = nullptr;
};

struct ExportStats {
  uint64_t files_written = 0;
  uint64_t files_skipped = 0;  // already exported, by an earlier run
  uint64_t bytes_written = 0;
};

Result<ExportStats> Export(View& view, const std::string& out_dir,
                           const std::vector<ExportFile>& files, const ExportOptions& options = {});

}  // namespace ucfs

#endif  // UCFS_TOOLS_EXPORT_H_
