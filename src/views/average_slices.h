// The mean of a param's T tensor-parallel slices, for a param
// universal_checkpoint_info asks to average (parameter_to_average_patterns):
// the one merge that is a computation, not a permutation of source bytes.
// Each chunk is computed once, on its first read, exactly as the
// converter computes it (sum(slices) / T in float32: ((0 + s0) + s1) + ...
// then divided by T), and kept. Private to src/view/.
#ifndef UCFS_VIEWS_AVERAGE_SLICES_H_
#define UCFS_VIEWS_AVERAGE_SLICES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ucfs/base/thread_annotations.h"
#include "ucfs/checkpoint/state_mapper.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/storage_spec.h"

namespace ucfs {

class AverageSlices final : public ComputedBytes {
 public:
  struct Slice {
    uint32_t shard = 0;  // of `mapper`
    size_t param = 0;    // in that shard group's params
  };
  // The mean of state `state` (float32, `numel` elements) of `slices` (one
  // at T = 1: the converter's 0 + s0 still makes -0.0 +0.0) of param
  // `name`; `mapper` must outlive this (the content holding the run keeps
  // it); `files` reads its sources.
  AverageSlices(const StateMapper& mapper, std::shared_ptr<SourceFiles> files,
                std::vector<Slice> slices, size_t state, uint64_t numel, std::string name);
  uint64_t size() const { return size_; }
  Status Read(uint64_t offset, uint64_t length, std::string* out) const override;

  // Bytes of means made per computation, and at most kept per param: a
  // larger param's later chunks are computed on every read.
  static constexpr uint64_t kChunkBytes = uint64_t{1} << 20;
  static constexpr uint64_t kMaxKeptBytes = uint64_t{64} << 20;

 private:
  Result<std::shared_ptr<const std::string>> Chunk(uint64_t index) const;
  Result<std::string> Compute(uint64_t begin, uint64_t end) const;

  const StateMapper& mapper_;
  std::shared_ptr<SourceFiles> files_;
  const std::vector<Slice> slices_;
  const size_t state_;
  const uint64_t size_;
  const std::string name_;
  mutable Mutex mu_;  // a leaf: no call is made under it
  mutable std::map<uint64_t, std::shared_ptr<const std::string>> kept_ UCFS_GUARDED_BY(mu_);
  mutable uint64_t kept_bytes_ UCFS_GUARDED_BY(mu_) = 0;
};

}  // namespace ucfs

#endif  // UCFS_VIEWS_AVERAGE_SLICES_H_
