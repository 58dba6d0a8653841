// An Env that counts what is asked of the one below it, and can make each
// metadata operation slow: what a mount costs the source file system, and
// how a mount fares when every open, stat and listing is a round trip to a
// loaded metadata server (a parallel file system's: Lustre, GPFS, NFS).
// bench/mount_cost.cc measures mounts through it (issue 38).
//
// Confine hands out a CountingEnv over the confined Env that adds to the
// same counts, so a mount planned on a counting host (mount/mount_plan.h)
// is counted whole: discovery, the views' builds, and the source files'
// reads. Thread-safe as the Env below is.
#ifndef UCFS_BASE_COUNTING_ENV_H_
#define UCFS_BASE_COUNTING_ENV_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/env_wrapper.h"

namespace ucfs {

// What was asked of the Env below, by kind.
struct EnvCounts {
  uint64_t opens = 0;  // Open (open(2) of a file)
  uint64_t stats = 0;  // Stat, and Open's fstat where the file's identity is asked
  // Of `stats`, those of an open file (RandomAccessFile::Stat, an fstat):
  // whether one is a round trip depends on the file system's attribute
  // caching, where a stat by path always walks the path.
  uint64_t fstats = 0;
  uint64_t listings = 0;  // ListDir (a directory read whole)
  uint64_t others = 0;    // ReadLink, RealPath, Confine (each a path walk)
  uint64_t reads = 0;     // RandomAccessFile::Read calls
  uint64_t bytes_read = 0;
  // The metadata operations: what a metadata server answers.
  uint64_t metadata() const { return opens + stats + listings + others; }
};

class CountingEnv final : public EnvWrapper {
 public:
  // `base` may be a borrowed Env (Env::Posix()): wrap it with NotOwned.
  // `metadata_delay` is slept before each metadata operation (not reads).
  explicit CountingEnv(std::shared_ptr<Env> base,
                       std::chrono::nanoseconds metadata_delay = std::chrono::nanoseconds(0));

  EnvCounts counts() const;
  void Reset();
  // Called with each metadata operation's kind ("open", "stat", "fstat",
  // "list", "readlink", "realpath", "confine") and path (below a confined
  // Env: the confining dir joined to it), here and in the Envs it confines:
  // which questions a mount asks, not only how many. Set before use.
  using Tracer = std::function<void(const char* kind, const std::string& path)>;
  void set_tracer(Tracer tracer);

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  Result<FileStat> Stat(const std::string& path) override;
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override;
  Result<LinkInfo> ReadLink(const std::string& path) override;
  Result<std::string> RealPath(const std::string& path) override;
  Result<std::shared_ptr<Env>> Confine(const std::string& dir) override;

  struct Counters {
    std::atomic<uint64_t> opens{0}, stats{0}, fstats{0}, listings{0}, others{0}, reads{0},
        bytes_read{0};
    Tracer tracer;
  };

 private:
  CountingEnv(std::shared_ptr<Env> base, std::chrono::nanoseconds metadata_delay,
              std::shared_ptr<Counters> counters, std::string confined_to);
  // Counts one metadata operation on `path` in `counter`, after the delay.
  void Metadata(std::atomic<uint64_t>& counter, const char* kind, const std::string& path) const;

  std::chrono::nanoseconds delay_;
  std::shared_ptr<Counters> counters_;
  std::string confined_to_;  // the dir this Env is confined to, for the tracer
};

}  // namespace ucfs

#endif  // UCFS_BASE_COUNTING_ENV_H_
