// The index: rank-file summaries cached in LMDB, so a second mount of an
// unchanged checkpoint opens no shard until a tensor is read.
//
// Entries are keyed by the file's path and checked against its identity
// (size, mtime, inode, device): a rewritten file misses and is summarised
// again. The environment is safe to share between concurrent mounts (LMDB
// is multi-process).
#ifndef UCFS_CHECKPOINT_INDEX_H_
#define UCFS_CHECKPOINT_INDEX_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/codec/torch_file.h"

namespace ucfs {

// $XDG_CACHE_HOME/ucfs, or ~/.cache/ucfs.
std::string DefaultIndexDir();

// statfs(2)'s f_type of the file system holding `path` (or its nearest
// existing ancestor).
using FsTypeProbe = std::function<Result<int64_t>(const std::string& path)>;
Result<int64_t> StatfsType(const std::string& path);

// NFS, SMB/CIFS, Lustre, GPFS, BeeGFS, Ceph, AFS, Panasas, 9p and FUSE (which
// may be anything): file systems LMDB's documentation forbids, as its lock
// file and shared map need a local one. $HOME on a cluster is one of them.
bool IsNetworkFsType(int64_t f_type);

struct IndexPlacement {
  std::string dir;
  // Why it is there, for -v: "~/.cache/ucfs is on NFS: the index is kept in
  // /run/user/1000/ucfs". Empty when it is where it was asked to be.
  std::string note;
};

// Where the index lives: `requested` (--cache-dir) or DefaultIndexDir(),
// unless that lies on a network file system; then $XDG_RUNTIME_DIR/ucfs
// when that is local, else /var/tmp/ucfs-<uid>.
IndexPlacement PlaceIndex(const std::optional<std::string>& requested,
                          const FsTypeProbe& probe = StatfsType);

class SummaryIndex final : public TorchFileSource {
 public:
  // Opens (creating) the LMDB environment in directory `dir`.
  static Result<std::unique_ptr<SummaryIndex>> Open(Env& env, const std::string& dir);
  ~SummaryIndex() override;

  Result<TorchFileSummary> Summarize(const std::string& path) override;
  uint64_t cache_hits() const override { return hits_; }
  uint64_t cache_misses() const { return misses_; }

 private:
  struct Lmdb;
  SummaryIndex(Env& env, std::unique_ptr<Lmdb> lmdb);
  Env& env_;
  std::unique_ptr<Lmdb> lmdb_;
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
};

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_INDEX_H_
