// The two Envs of the shared index (src/design/shared-index.md):
//
// RecordingEnv passes everything to the Env below and records, of the paths
// at or below one tag directory, what discovery asked: each listing, each
// stat, each file opened (and, made into a TagSnapshot, the small ones'
// contents). `ucfs index` runs discovery through it.
//
// SnapshotEnv answers those questions from a TagSnapshot instead: listings,
// stats and the small files' bytes from memory, everything else (a rank
// file's bytes, a path the snapshot does not hold) from the Env below, so
// a question it cannot answer costs one more operation on the source,
// never a wrong answer. Identities it hands out, stats and open files'
// alike, carry no device, as the snapshot's do; an open file's identity is
// still the file's own, so a rank file changed since the snapshot is
// caught where its bytes are read (SourceFiles). Its summaries, for
// Checkpoint::Open, are SummarySource's.
//
// Both confine as the Env below does, keeping what they hold. Thread-safe
// as the Env below is.
#ifndef UCFS_CHECKPOINT_SNAPSHOT_ENV_H_
#define UCFS_CHECKPOINT_SNAPSHOT_ENV_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/env_wrapper.h"
#include "ucfs/base/thread_annotations.h"
#include "ucfs/checkpoint/tag_snapshot.h"
#include "ucfs/codec/torch_file.h"

namespace ucfs {

class RecordingEnv final : public EnvWrapper {
 public:
  // Records what is asked at or below `tag_dir` (absolute, as `base` names
  // it).
  RecordingEnv(std::shared_ptr<Env> base, std::string tag_dir);

  // What was recorded, as a snapshot of tag `tag` whose directory is
  // `tag_dir_identity`: the listings and stats as answered; the whole
  // contents of each file opened that is no larger than `max_file` bytes
  // and not a rank file (*.pt), read again through the Env below; the stat
  // of every rank file the tag directory's recorded listing holds; and of
  // those discovery opened, the summary (SummarizeTorchFile), at the stat
  // it was made from.
  Result<TagSnapshot> Snapshot(const std::string& tag, const FileIdentity& tag_dir_identity,
                               uint64_t max_file = 64 << 10);

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  Result<FileStat> Stat(const std::string& path) override;
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override;
  Result<std::shared_ptr<Env>> Confine(const std::string& dir) override;

 private:
  struct Records {
    Mutex mu;
    TagSnapshot snapshot UCFS_GUARDED_BY(mu);
    std::set<std::string> opened UCFS_GUARDED_BY(mu);  // relative paths
  };
  RecordingEnv(std::shared_ptr<Env> base, std::string tag_dir, std::shared_ptr<Records> records);
  // `path` relative to the tag directory, or nullopt outside it.
  std::optional<std::string> Relative(const std::string& path) const;

  std::string tag_dir_;
  std::shared_ptr<Records> records_;
};

class SnapshotEnv final : public EnvWrapper {
 public:
  // Serves `snapshot` for the tag directory `tag_dir` (absolute, as `base`
  // names it).
  SnapshotEnv(std::shared_ptr<Env> base, std::string tag_dir,
              std::shared_ptr<const TagSnapshot> snapshot);

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  Result<FileStat> Stat(const std::string& path) override;
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override;
  Result<std::shared_ptr<Env>> Confine(const std::string& dir) override;

 private:
  std::optional<std::string> Relative(const std::string& path) const;
  // Whether `rel` names an entry of the tag directory itself that its
  // recorded listing lacks: the directory's identity (mtime) is the one
  // recorded, so no entry was made or removed since, and the answer is
  // ENOENT without asking the source.
  bool KnownAbsent(const std::string& rel) const;
  Status Absent(const std::string& path) const;

  std::string tag_dir_;
  std::shared_ptr<const TagSnapshot> snapshot_;
};

// The rank files' summaries of a snapshot (no device in their identity),
// and, for a path it does not hold, `fallback`'s.
class SummarySource final : public TorchFileSource {
 public:
  SummarySource(std::string tag_dir, std::shared_ptr<const TagSnapshot> snapshot,
                TorchFileSource& fallback);
  Result<TorchFileSummary> Summarize(const std::string& path) override;
  uint64_t cache_hits() const override { return hits_; }

 private:
  std::string tag_dir_;
  std::shared_ptr<const TagSnapshot> snapshot_;
  TorchFileSource& fallback_;
  std::atomic<uint64_t> hits_{0};
};

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_SNAPSHOT_ENV_H_
