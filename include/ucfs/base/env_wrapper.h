// An Env that sends every call to another (LevelDB's EnvWrapper): the base
// of the Envs that change a few calls and pass the rest through (counting
// them, recording them, answering them from a snapshot).
#ifndef UCFS_BASE_ENV_WRAPPER_H_
#define UCFS_BASE_ENV_WRAPPER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ucfs/base/env.h"

namespace ucfs {

class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(std::shared_ptr<Env> target) : target_(std::move(target)) {}
  // A borrowed Env (Env::Posix()) as a target.
  static std::shared_ptr<Env> NotOwned(Env* env) {
    return std::shared_ptr<Env>(env, [](Env*) {});
  }

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    return target_->Open(path);
  }
  Result<FileStat> Stat(const std::string& path) override { return target_->Stat(path); }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  Result<LinkInfo> ReadLink(const std::string& path) override { return target_->ReadLink(path); }
  std::string Where(const std::string& path) override { return target_->Where(path); }
  Result<std::string> RealPath(const std::string& path) override { return target_->RealPath(path); }
  Result<std::shared_ptr<Env>> Confine(const std::string& dir) override {
    return target_->Confine(dir);
  }
  Result<bool> MakeDir(const std::string& path, uint32_t mode, int64_t mtime_ns) override {
    return target_->MakeDir(path, mode, mtime_ns);
  }
  WriteEnv* Writer() override { return target_->Writer(); }

 protected:
  Env& target() const { return *target_; }
  const std::shared_ptr<Env>& shared_target() const { return target_; }

 private:
  std::shared_ptr<Env> target_;
};

}  // namespace ucfs

#endif  // UCFS_BASE_ENV_WRAPPER_H_
