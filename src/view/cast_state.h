// A trainable param's fp32 master weights cast to a 16-bit dtype, range by
// range as they are read (the Hugging Face weights in the training dtype,
// hf_weights.h): nothing is kept, so a 70B model's weights cost no memory.
#ifndef UCFS_VIEW_CAST_STATE_H_
#define UCFS_VIEW_CAST_STATE_H_

#include <memory>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/view/source_files.h"
#include "ucfs/view/storage_spec.h"

namespace ucfs {

class CastState final : public ComputedBytes {
 public:
  // `checkpoint` must outlive this (the content holding the run keeps it);
  // `files` opens its sources, shared by the casts of one checkpoint.
  CastState(const Checkpoint& checkpoint, std::shared_ptr<SourceFiles> files, uint32_t param,
            DType to);
  // The run's size: the param's elements in `to`.
  uint64_t size() const;
  Status Read(uint64_t offset, uint64_t length, std::string* out) const override;

 private:
  const Checkpoint& checkpoint_;
  std::shared_ptr<SourceFiles> files_;
  const uint32_t param_;
  const DType to_;
  const uint32_t element_size_;
};

}  // namespace ucfs

#endif  // UCFS_VIEW_CAST_STATE_H_
