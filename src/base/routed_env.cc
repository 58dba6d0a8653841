// RoutedEnv: one Env for one directory, another for the rest.
#include <memory>
#include <string>

#include "ucfs/base/env.h"

namespace ucfs {

namespace {

class RoutedEnv final : public Env {
 public:
  RoutedEnv(std::shared_ptr<Env> base, std::string dir, std::shared_ptr<Env> below)
      : base_(std::move(base)), dir_(std::move(dir)), below_(std::move(below)) {}
  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    return For(path).Open(path);
  }
  Result<FileStat> Stat(const std::string& path) override { return For(path).Stat(path); }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    return For(path).ListDir(path);
  }
  Result<LinkInfo> ReadLink(const std::string& path) override { return For(path).ReadLink(path); }
  std::string Where(const std::string& path) override { return For(path).Where(path); }

 private:
  Env& For(const std::string& path) const { return IsAtOrBelow(path, dir_) ? *below_ : *base_; }
  const std::shared_ptr<Env> base_;
  const std::string dir_;
  const std::shared_ptr<Env> below_;
};

}  // namespace

std::unique_ptr<Env> NewRoutedEnv(std::shared_ptr<Env> base, std::string dir,
                                  std::shared_ptr<Env> below) {
  return std::make_unique<RoutedEnv>(std::move(base), std::move(dir), std::move(below));
}

}  // namespace ucfs
