#include "ucfs/checkpoint/snapshot_env.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "ucfs/base/bytes_file.h"
#include "ucfs/base/path.h"

namespace ucfs {

namespace {

// `path` relative to `dir`: "" for `dir` itself, nullopt outside it.
std::optional<std::string> RelativeTo(const std::string& dir, const std::string& path) {
  auto rel = RelativeBelow(path, dir);
  return rel ? std::optional<std::string>(std::string(*rel)) : std::nullopt;
}

FileStat Portable(FileStat stat) {
  stat.identity = PortableIdentity(stat.identity);
  return stat;
}

// A file of the Env below whose identity carries no device.
class PortableFile final : public RandomAccessFile {
 public:
  explicit PortableFile(std::unique_ptr<RandomAccessFile> base) : base_(std::move(base)) {}
  Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const override {
    return base_->Read(offset, n, buf, bytes_read);
  }
  uint64_t Size() const override { return base_->Size(); }
  Result<FileStat> Stat() const override {
    UCFS_ASSIGN_OR_RETURN(FileStat stat, base_->Stat());
    return Portable(stat);
  }
  Result<FileStat> OpenedStat() const override {
    UCFS_ASSIGN_OR_RETURN(FileStat stat, base_->OpenedStat());
    return Portable(stat);
  }
  const std::string& path() const override { return base_->path(); }
  int fd() const override { return base_->fd(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
};

}  // namespace

// --- RecordingEnv ------------------------------------------------------------

RecordingEnv::RecordingEnv(std::shared_ptr<Env> base, std::string tag_dir)
    : RecordingEnv(std::move(base), std::move(tag_dir), std::make_shared<Records>()) {}

RecordingEnv::RecordingEnv(std::shared_ptr<Env> base, std::string tag_dir,
                           std::shared_ptr<Records> records)
    : EnvWrapper(std::move(base)), tag_dir_(std::move(tag_dir)), records_(std::move(records)) {}

std::optional<std::string> RecordingEnv::Relative(const std::string& path) const {
  return RelativeTo(tag_dir_, path);
}

Result<std::unique_ptr<RandomAccessFile>> RecordingEnv::Open(const std::string& path) {
  UCFS_ASSIGN_OR_RETURN(auto file, target().Open(path));
  if (auto rel = Relative(path)) {
    MutexLock lock(records_->mu);
    records_->opened.insert(*rel);
  }
  return file;
}

Result<FileStat> RecordingEnv::Stat(const std::string& path) {
  UCFS_ASSIGN_OR_RETURN(FileStat stat, target().Stat(path));
  if (auto rel = Relative(path)) {
    MutexLock lock(records_->mu);
    records_->snapshot.stats[*rel] = Portable(stat);
  }
  return stat;
}

Result<std::vector<DirEntry>> RecordingEnv::ListDir(const std::string& path) {
  UCFS_ASSIGN_OR_RETURN(auto entries, target().ListDir(path));
  if (auto rel = Relative(path)) {
    MutexLock lock(records_->mu);
    records_->snapshot.listings[*rel] = entries;
  }
  return entries;
}

Result<std::shared_ptr<Env>> RecordingEnv::Confine(const std::string& dir) {
  UCFS_ASSIGN_OR_RETURN(std::shared_ptr<Env> confined, target().Confine(dir));
  return std::shared_ptr<Env>(new RecordingEnv(std::move(confined), tag_dir_, records_));
}

Result<TagSnapshot> RecordingEnv::Snapshot(const std::string& tag,
                                           const FileIdentity& tag_dir_identity,
                                           uint64_t max_file) {
  TagSnapshot snapshot;
  std::set<std::string> opened;
  {
    MutexLock lock(records_->mu);
    snapshot = records_->snapshot;
    opened = records_->opened;
  }
  snapshot.tag = tag;
  snapshot.tag_dir_identity = PortableIdentity(tag_dir_identity);
  for (const std::string& rel : opened) {
    if (rel.ends_with(".pt")) continue;
    const std::string path = tag_dir_ + "/" + rel;
    UCFS_ASSIGN_OR_RETURN(auto file, target().Open(path));
    UCFS_ASSIGN_OR_RETURN(FileStat stat, file->OpenedStat());
    if (stat.identity.size > max_file) continue;
    UCFS_ASSIGN_OR_RETURN(std::string bytes, file->ReadString(0, stat.identity.size));
    snapshot.stats[rel] = Portable(stat);
    snapshot.files[rel] = std::move(bytes);
  }
  // Every rank file of the tag directory with its stat (a view's listing
  // shows them); those discovery read, summarised, at the stat the summary
  // was made from.
  if (auto listing = snapshot.listings.find(""); listing != snapshot.listings.end()) {
    for (const DirEntry& e : listing->second) {
      if (e.is_dir || !e.name.ends_with(".pt")) continue;
      const std::string path = tag_dir_ + "/" + e.name;
      if (!opened.contains(e.name)) {
        UCFS_ASSIGN_OR_RETURN(FileStat stat, target().Stat(path));
        snapshot.stats[e.name] = Portable(stat);
        continue;
      }
      UCFS_ASSIGN_OR_RETURN(TorchFileSummary summary, SummarizeTorchFile(target(), path));
      FileStat stat;
      stat.identity = PortableIdentity(summary.identity);
      stat.access = summary.access;
      snapshot.stats[e.name] = stat;
      snapshot.summaries[e.name] = EncodeSummary(summary);
    }
  }
  return snapshot;
}

// --- SnapshotEnv -------------------------------------------------------------

SnapshotEnv::SnapshotEnv(std::shared_ptr<Env> base, std::string tag_dir,
                         std::shared_ptr<const TagSnapshot> snapshot)
    : EnvWrapper(std::move(base)), tag_dir_(std::move(tag_dir)), snapshot_(std::move(snapshot)) {}

std::optional<std::string> SnapshotEnv::Relative(const std::string& path) const {
  return RelativeTo(tag_dir_, path);
}

Result<std::unique_ptr<RandomAccessFile>> SnapshotEnv::Open(const std::string& path) {
  if (auto rel = Relative(path)) {
    if (auto file = snapshot_->files.find(*rel); file != snapshot_->files.end()) {
      FileStat stat;
      stat.identity.size = file->second.size();
      if (auto it = snapshot_->stats.find(*rel); it != snapshot_->stats.end()) stat = it->second;
      // The bytes stay the snapshot's, which the file keeps alive.
      return NewBytesFile(path, std::shared_ptr<const std::string>(snapshot_, &file->second), stat);
    }
    if (KnownAbsent(*rel)) return Absent(path);
  }
  UCFS_ASSIGN_OR_RETURN(auto file, target().Open(path));
  return std::unique_ptr<RandomAccessFile>(std::make_unique<PortableFile>(std::move(file)));
}

bool SnapshotEnv::KnownAbsent(const std::string& rel) const {
  if (rel.empty() || rel.find('/') != std::string::npos) return false;
  auto listing = snapshot_->listings.find("");
  if (listing == snapshot_->listings.end()) return false;
  const std::vector<DirEntry>& entries = listing->second;
  auto it =
      std::lower_bound(entries.begin(), entries.end(), rel,
                       [](const DirEntry& e, const std::string& name) { return e.name < name; });
  return it == entries.end() || it->name != rel;
}

Status SnapshotEnv::Absent(const std::string& path) const {
  return Status::Posix(ENOENT, "no such file (the tag's shared index lists none)").WithFile(path);
}

Result<FileStat> SnapshotEnv::Stat(const std::string& path) {
  if (auto rel = Relative(path)) {
    if (auto it = snapshot_->stats.find(*rel); it != snapshot_->stats.end()) return it->second;
    if (KnownAbsent(*rel)) return Absent(path);
  }
  UCFS_ASSIGN_OR_RETURN(FileStat stat, target().Stat(path));
  return Portable(stat);
}

Result<std::vector<DirEntry>> SnapshotEnv::ListDir(const std::string& path) {
  if (auto rel = Relative(path)) {
    if (auto it = snapshot_->listings.find(*rel); it != snapshot_->listings.end()) {
      return it->second;
    }
  }
  return target().ListDir(path);
}

Result<std::shared_ptr<Env>> SnapshotEnv::Confine(const std::string& dir) {
  UCFS_ASSIGN_OR_RETURN(std::shared_ptr<Env> confined, target().Confine(dir));
  return std::shared_ptr<Env>(new SnapshotEnv(std::move(confined), tag_dir_, snapshot_));
}

// --- SummarySource -----------------------------------------------------------

SummarySource::SummarySource(std::string tag_dir, std::shared_ptr<const TagSnapshot> snapshot,
                             TorchFileSource& fallback)
    : tag_dir_(std::move(tag_dir)), snapshot_(std::move(snapshot)), fallback_(fallback) {}

Result<TorchFileSummary> SummarySource::Summarize(const std::string& path) {
  const auto rel = RelativeTo(tag_dir_, path);
  const auto encoded = rel ? snapshot_->summaries.find(*rel) : snapshot_->summaries.end();
  const auto stat = rel ? snapshot_->stats.find(*rel) : snapshot_->stats.end();
  if (encoded != snapshot_->summaries.end() && stat != snapshot_->stats.end()) {
    auto summary = DecodeSummary(encoded->second);
    // A summary of another version of the file than the one stat recorded
    // is not used: the file is read instead.
    if (summary.ok() && PortableIdentity(summary->identity) == stat->second.identity) {
      ++hits_;
      summary->path = path;
      summary->identity = stat->second.identity;
      summary->access = stat->second.access;
      return summary;
    }
  }
  return fallback_.Summarize(path);
}

}  // namespace ucfs
