// LazyIndex: the summary index (checkpoint/index.h), opened on first use.
//
// A run view's tags (and a root's other tags) open in the mount's daemon,
// after it forked, and LMDB's environment must be used by the process that
// opened it: so the index opens at the first summary asked for, there.
// Without it (it cannot be opened, say on a read-only home), rank files are
// summarised directly, and the mount says so once. Thread-safe: FUSE's
// threads open tags at once.
#ifndef UCFS_MOUNT_LAZY_INDEX_H_
#define UCFS_MOUNT_LAZY_INDEX_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ucfs/base/env.h"
#include "ucfs/checkpoint/index.h"
#include "ucfs/codec/torch_file.h"

namespace ucfs {

class LazyIndex final : public TorchFileSource {
 public:
  // `env` reads the rank files and must outlive this; `dir` holds the index.
  LazyIndex(Env& env, std::string dir) : env_(env), direct_(env), dir_(std::move(dir)) {}

  Result<TorchFileSummary> Summarize(const std::string& path) override;

 private:
  Env& env_;
  DirectTorchFileSource direct_;
  const std::string dir_;
  std::once_flag opened_;
  std::unique_ptr<SummaryIndex> index_;  // set in opened_
};

// Where the index lives (--cache-dir, else the default), said at -v when
// it is not where it was asked to be (off a network file system).
std::string IndexDir(const std::optional<std::string>& cache_dir);

}  // namespace ucfs

#endif  // UCFS_MOUNT_LAZY_INDEX_H_
