#include "ucfs/base/counting_env.h"

#include <thread>
#include <utility>

#include "ucfs/base/path.h"

namespace ucfs {

namespace {

// A file of the Env below, its reads and fstats counted.
class CountingFile final : public RandomAccessFile {
 public:
  CountingFile(std::unique_ptr<RandomAccessFile> base,
               std::shared_ptr<CountingEnv::Counters> counters)
      : base_(std::move(base)), counters_(std::move(counters)) {}

  Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const override {
    Status s = base_->Read(offset, n, buf, bytes_read);
    counters_->reads.fetch_add(1, std::memory_order_relaxed);
    if (s.ok()) counters_->bytes_read.fetch_add(*bytes_read, std::memory_order_relaxed);
    return s;
  }
  uint64_t Size() const override { return base_->Size(); }
  Result<FileStat> Stat() const override {
    counters_->stats.fetch_add(1, std::memory_order_relaxed);
    counters_->fstats.fetch_add(1, std::memory_order_relaxed);
    if (counters_->tracer) counters_->tracer("fstat", base_->path());
    return base_->Stat();
  }
  // Part of the open, which is counted.
  Result<FileStat> OpenedStat() const override { return base_->OpenedStat(); }
  const std::string& path() const override { return base_->path(); }
  int fd() const override { return base_->fd(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::shared_ptr<CountingEnv::Counters> counters_;
};

}  // namespace

CountingEnv::CountingEnv(std::shared_ptr<Env> base, std::chrono::nanoseconds metadata_delay)
    : CountingEnv(std::move(base), metadata_delay, std::make_shared<Counters>(), "") {}

CountingEnv::CountingEnv(std::shared_ptr<Env> base, std::chrono::nanoseconds metadata_delay,
                         std::shared_ptr<Counters> counters, std::string confined_to)
    : EnvWrapper(std::move(base)),
      delay_(metadata_delay),
      counters_(std::move(counters)),
      confined_to_(std::move(confined_to)) {}

void CountingEnv::set_tracer(Tracer tracer) { counters_->tracer = std::move(tracer); }

EnvCounts CountingEnv::counts() const {
  EnvCounts c;
  c.opens = counters_->opens.load();
  c.stats = counters_->stats.load();
  c.fstats = counters_->fstats.load();
  c.listings = counters_->listings.load();
  c.others = counters_->others.load();
  c.reads = counters_->reads.load();
  c.bytes_read = counters_->bytes_read.load();
  return c;
}

void CountingEnv::Reset() {
  for (auto* counter :
       {&counters_->opens, &counters_->stats, &counters_->fstats, &counters_->listings,
        &counters_->others, &counters_->reads, &counters_->bytes_read}) {
    counter->store(0);
  }
}

void CountingEnv::Metadata(std::atomic<uint64_t>& counter, const char* kind,
                           const std::string& path) const {
  counter.fetch_add(1, std::memory_order_relaxed);
  if (counters_->tracer) {
    counters_->tracer(kind, path.starts_with('/') ? path : JoinPath(confined_to_, path));
  }
  if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
}

Result<std::unique_ptr<RandomAccessFile>> CountingEnv::Open(const std::string& path) {
  Metadata(counters_->opens, "open", path);
  UCFS_ASSIGN_OR_RETURN(auto file, target().Open(path));
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<CountingFile>(std::move(file), counters_));
}

Result<FileStat> CountingEnv::Stat(const std::string& path) {
  Metadata(counters_->stats, "stat", path);
  return target().Stat(path);
}

Result<std::vector<DirEntry>> CountingEnv::ListDir(const std::string& path) {
  Metadata(counters_->listings, "list", path);
  return target().ListDir(path);
}

Result<LinkInfo> CountingEnv::ReadLink(const std::string& path) {
  Metadata(counters_->others, "readlink", path);
  return target().ReadLink(path);
}

Result<std::string> CountingEnv::RealPath(const std::string& path) {
  Metadata(counters_->others, "realpath", path);
  return target().RealPath(path);
}

Result<std::shared_ptr<Env>> CountingEnv::Confine(const std::string& dir) {
  Metadata(counters_->others, "confine", dir);
  UCFS_ASSIGN_OR_RETURN(std::shared_ptr<Env> confined, target().Confine(dir));
  return std::shared_ptr<Env>(
      new CountingEnv(std::move(confined), delay_, counters_, JoinPath(confined_to_, dir)));
}

}  // namespace ucfs
