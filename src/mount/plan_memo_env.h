// PlanMemoEnv: the answers a mount's plan gets, remembered while it is made.
//
// Making a plan asks the checkpoint's file system the same questions
// several times (the root's `latest` and listing: the grid probe, the
// run-directory probe, the tag's location, the checkpoint's open, the
// root's other tags), each a round trip to a shared file system's metadata
// server. A plan is one moment of the checkpoint, so while it is made a
// question asked again gets the first answer: stats, listings, link reads,
// real paths, and the whole of small files (<= 64 kB, rank files not)
// opened. Forget()
// ends that: from then on (the daemon's lifetime) every call goes below, so
// a tag saved later is seen. MakeDir forgets everything remembered. The
// Envs it confines to remember and forget with it. Thread-safe.
#ifndef UCFS_MOUNT_PLAN_MEMO_ENV_H_
#define UCFS_MOUNT_PLAN_MEMO_ENV_H_

#include <memory>
#include <string>

#include "ucfs/base/env_wrapper.h"

namespace ucfs {

class PlanMemoEnv final : public EnvWrapper {
 public:
  explicit PlanMemoEnv(std::shared_ptr<Env> target);
  void Forget();

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  Result<FileStat> Stat(const std::string& path) override;
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override;
  Result<LinkInfo> ReadLink(const std::string& path) override;
  Result<std::string> RealPath(const std::string& path) override;
  Result<std::shared_ptr<Env>> Confine(const std::string& dir) override;
  Result<bool> MakeDir(const std::string& path, uint32_t mode, int64_t mtime_ns) override;

  struct Memory;

 private:
  PlanMemoEnv(std::shared_ptr<Env> target, std::shared_ptr<Memory> memory, std::string scope);

  std::shared_ptr<Memory> memory_;
  // The answers of Envs confined elsewhere are kept apart: a path means
  // what it means to the Env that was asked.
  std::string scope_;
};

}  // namespace ucfs

#endif  // UCFS_MOUNT_PLAN_MEMO_ENV_H_
