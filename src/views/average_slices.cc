#include "views/average_slices.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {

AverageSlices::AverageSlices(const StateMapper& mapper, std::shared_ptr<SourceFiles> files,
                             std::vector<Slice> slices, size_t state, uint64_t numel,
                             std::string name)
    : mapper_(mapper),
      files_(std::move(files)),
      slices_(std::move(slices)),
      state_(state),
      size_(numel * sizeof(float)),
      name_(std::move(name)) {}

Status AverageSlices::Read(uint64_t offset, uint64_t length, std::string* out) const {
  if (length == 0) return Status::OK();
  if (offset > size_ || length > size_ - offset) {
    return Status::InvalidArgument("a read past the end of an averaged tensor");
  }
  for (uint64_t at = offset; at < offset + length;) {
    const uint64_t index = at / kChunkBytes;
    UCFS_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> chunk, Chunk(index));
    const uint64_t from = at - index * kChunkBytes;
    const uint64_t n = std::min<uint64_t>(chunk->size() - from, offset + length - at);
    out->append(*chunk, from, n);
    at += n;
  }
  return Status::OK();
}

Result<std::shared_ptr<const std::string>> AverageSlices::Chunk(uint64_t index) const {
  {
    MutexLock lock(mu_);
    if (auto it = kept_.find(index); it != kept_.end()) return it->second;
  }
  // Computed outside the lock; two readers of one new chunk both compute
  // it, and the second keeps the first's.
  const uint64_t begin = index * kChunkBytes;
  UCFS_ASSIGN_OR_RETURN(std::string bytes, Compute(begin, std::min(size_, begin + kChunkBytes)));
  auto chunk = std::make_shared<const std::string>(std::move(bytes));
  MutexLock lock(mu_);
  if (auto it = kept_.find(index); it != kept_.end()) return it->second;
  if (kept_bytes_ + chunk->size() <= kMaxKeptBytes) {
    kept_bytes_ += chunk->size();
    kept_.emplace(index, chunk);
  }
  return chunk;
}

Result<std::string> AverageSlices::Compute(uint64_t begin, uint64_t end) const {
  const size_t count = (end - begin) / sizeof(float);
  // Python's sum(slices) starts from the int 0: 0 + s0 makes -0.0 +0.0.
  std::vector<float> sum(count, 0.0f);
  std::string bytes;
  for (const Slice& slice : slices_) {
    std::vector<Extent> extents;
    UCFS_RETURN_IF_ERROR(
        mapper_.MapShardState(slice.shard, slice.param, state_, begin, end, &extents));
    std::vector<ReadPiece> pieces;
    AppendSourcePieces(extents, &pieces);
    bytes.clear();
    UCFS_RETURN_IF_ERROR(files_->Read(pieces, &bytes));
    if (bytes.size() != end - begin) {
      return Status::Corruption("param '" + Printable(name_) +
                                "': a tensor-parallel slice shorter than its shape");
    }
    for (size_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof v);
      sum[i] = sum[i] + v;
    }
  }
  // torch's true division by the int T, in float32.
  const auto divisor = static_cast<float>(slices_.size());
  std::string out(count * sizeof(float), '\0');
  for (size_t i = 0; i < count; ++i) {
    const float mean = sum[i] / divisor;
    std::memcpy(out.data() + i * sizeof(float), &mean, sizeof mean);
  }
  return out;
}

}  // namespace ucfs
