#include "mount/plan_memo_env.h"

#include <atomic>
#include <map>
#include <utility>

#include "ucfs/base/bytes_file.h"
#include "ucfs/base/thread_annotations.h"

namespace ucfs {

namespace {

constexpr uint64_t kSmallFile = 64 << 10;

// A small file's bytes as first read, with its stat then.
struct SmallFile {
  std::shared_ptr<const std::string> bytes;
  FileStat stat;
};

}  // namespace

struct PlanMemoEnv::Memory {
  std::atomic<bool> remembering{true};
  Mutex mu;
  std::map<std::string, Result<FileStat>> stats UCFS_GUARDED_BY(mu);
  std::map<std::string, Result<std::vector<DirEntry>>> listings UCFS_GUARDED_BY(mu);
  std::map<std::string, Result<LinkInfo>> links UCFS_GUARDED_BY(mu);
  std::map<std::string, Result<std::string>> real_paths UCFS_GUARDED_BY(mu);
  std::map<std::string, SmallFile> files UCFS_GUARDED_BY(mu);

  void Clear() {
    MutexLock lock(mu);
    stats.clear();
    listings.clear();
    links.clear();
    real_paths.clear();
    files.clear();
  }

  // `ask`'s answer for `key`, the first one while remembering.
  template <typename T, typename Ask>
  Result<T> Remembered(std::map<std::string, Result<T>> Memory::*table, const std::string& key,
                       Ask ask) {
    if (!remembering.load()) return ask();
    {
      MutexLock lock(mu);
      auto& t = this->*table;
      if (auto it = t.find(key); it != t.end()) return it->second;
    }
    Result<T> answer = ask();
    MutexLock lock(mu);
    (this->*table).emplace(key, answer);
    return answer;
  }
};

PlanMemoEnv::PlanMemoEnv(std::shared_ptr<Env> target)
    : PlanMemoEnv(std::move(target), std::make_shared<Memory>(), "") {}

PlanMemoEnv::PlanMemoEnv(std::shared_ptr<Env> target, std::shared_ptr<Memory> memory,
                         std::string scope)
    : EnvWrapper(std::move(target)), memory_(std::move(memory)), scope_(std::move(scope)) {}

void PlanMemoEnv::Forget() {
  memory_->remembering.store(false);
  memory_->Clear();
}

Result<FileStat> PlanMemoEnv::Stat(const std::string& path) {
  return memory_->Remembered(&Memory::stats, scope_ + '\0' + path,
                             [&] { return target().Stat(path); });
}

Result<std::vector<DirEntry>> PlanMemoEnv::ListDir(const std::string& path) {
  return memory_->Remembered(&Memory::listings, scope_ + '\0' + path,
                             [&] { return target().ListDir(path); });
}

Result<LinkInfo> PlanMemoEnv::ReadLink(const std::string& path) {
  return memory_->Remembered(&Memory::links, scope_ + '\0' + path,
                             [&] { return target().ReadLink(path); });
}

Result<std::string> PlanMemoEnv::RealPath(const std::string& path) {
  return memory_->Remembered(&Memory::real_paths, scope_ + '\0' + path,
                             [&] { return target().RealPath(path); });
}

Result<std::unique_ptr<RandomAccessFile>> PlanMemoEnv::Open(const std::string& path) {
  if (!memory_->remembering.load()) return target().Open(path);
  const std::string key = scope_ + '\0' + path;
  {
    MutexLock lock(memory_->mu);
    if (auto it = memory_->files.find(key); it != memory_->files.end()) {
      return NewBytesFile(path, it->second.bytes, it->second.stat);
    }
  }
  UCFS_ASSIGN_OR_RETURN(auto file, target().Open(path));
  // Rank files are summarised once by the checkpoint's open (and the
  // index), never kept whole here: a plan must not hold W of them.
  if (file->Size() > kSmallFile || path.ends_with(".pt")) return file;
  SmallFile small;
  UCFS_ASSIGN_OR_RETURN(small.stat, file->OpenedStat());
  UCFS_ASSIGN_OR_RETURN(std::string bytes, file->ReadString(0, file->Size()));
  small.bytes = std::make_shared<const std::string>(std::move(bytes));
  {
    MutexLock lock(memory_->mu);
    memory_->files.emplace(key, small);
  }
  return NewBytesFile(path, small.bytes, small.stat);
}

Result<std::shared_ptr<Env>> PlanMemoEnv::Confine(const std::string& dir) {
  UCFS_ASSIGN_OR_RETURN(std::shared_ptr<Env> confined, target().Confine(dir));
  return std::shared_ptr<Env>(
      new PlanMemoEnv(std::move(confined), memory_, scope_ + '\0' + dir + '\0'));
}

Result<bool> PlanMemoEnv::MakeDir(const std::string& path, uint32_t mode, int64_t mtime_ns) {
  memory_->Clear();
  return target().MakeDir(path, mode, mtime_ns);
}

}  // namespace ucfs
