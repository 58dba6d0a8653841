// Tensors cast range by range as they are read: nothing is kept, so a 70B
// model's weights cost no memory. CastState: a trainable param's fp32
// master weights cast to a 16-bit dtype (the Hugging Face weights in the
// training dtype, hf_weights.h).
#ifndef UCFS_VIEWS_CAST_STATE_H_
#define UCFS_VIEWS_CAST_STATE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ucfs/checkpoint/state_mapper.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/storage_spec.h"

namespace ucfs {

// Saved values of another dtype widened to float32, as torch's .float()
// makes them (zero_to_fp32.py of DeepSpeed >= 0.19.7 for frozen params,
// ds_to_universal.py of 0.19.8 for the module's tensors that have no
// optimizer state).
class WidenedToFloat32 final : public ComputedBytes {
 public:
  // The extents of saved bytes [begin, end) of the tensor.
  using MapBytes = std::function<Status(uint64_t begin, uint64_t end, std::vector<Extent>* out)>;
  WidenedToFloat32(std::shared_ptr<SourceFiles> files, DType from, uint64_t numel, std::string name,
                   MapBytes map);
  uint64_t size() const { return numel_ * 4; }
  Status Read(uint64_t offset, uint64_t length, std::string* out) const override;

 private:
  std::shared_ptr<SourceFiles> files_;
  const DType from_;
  const uint64_t numel_;
  const std::string name_;
  const MapBytes map_;
};

// A run of `numel` saved `from` values, widened to float32 on every read
// from the bytes `map` names.
StorageRun WidenedRun(std::shared_ptr<SourceFiles> files, DType from, uint64_t numel,
                      std::string name, WidenedToFloat32::MapBytes map);

class CastState final : public ComputedBytes {
 public:
  // Param `param` (of `numel` elements) of shard group `shard` of `mapper`,
  // which must outlive this (the content holding the run keeps it); `files`
  // opens its sources, shared by the casts of one checkpoint.
  CastState(const StateMapper& mapper, uint32_t shard, uint32_t param, uint64_t numel,
            std::shared_ptr<SourceFiles> files, DType to);
  // The run's size: the param's elements in `to`.
  uint64_t size() const;
  Status Read(uint64_t offset, uint64_t length, std::string* out) const override;

 private:
  const StateMapper& mapper_;
  const uint32_t shard_;
  const uint32_t param_;
  const uint64_t numel_;
  std::shared_ptr<SourceFiles> files_;
  const DType to_;
  const uint32_t element_size_;
};

}  // namespace ucfs

#endif  // UCFS_VIEWS_CAST_STATE_H_
