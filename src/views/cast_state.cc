#include "views/cast_state.h"

#include "ucfs/codec/dtype_cast.h"
#include "ucfs/views/consolidated_view.h"

namespace ucfs {

WidenedToFloat32::WidenedToFloat32(std::shared_ptr<SourceFiles> files, DType from, uint64_t numel,
                                   std::string name, MapBytes map)
    : files_(std::move(files)),
      from_(from),
      numel_(numel),
      name_(std::move(name)),
      map_(std::move(map)) {}

Status WidenedToFloat32::Read(uint64_t offset, uint64_t length, std::string* out) const {
  if (length == 0) return Status::OK();
  if (offset > size() || length > size() - offset) {
    return Status::InvalidArgument("a read past the end of a widened tensor");
  }
  const uint64_t es = Info(from_).element_size;
  // Whole elements covering the range, read as saved.
  const uint64_t first = offset / 4;
  const uint64_t last = (offset + length + 3) / 4;
  std::vector<Extent> extents;
  UCFS_RETURN_IF_ERROR(map_(first * es, last * es, &extents));
  std::vector<ReadPiece> pieces;
  AppendSourcePieces(extents, &pieces);
  std::string saved;
  UCFS_RETURN_IF_ERROR(files_->Read(pieces, &saved));
  std::string widened;
  UCFS_RETURN_IF_ERROR(WidenToFloat32(saved, from_, &widened).Annotate(name_));
  out->append(widened, offset - first * 4, length);
  return Status::OK();
}

CastState::CastState(const StateMapper& mapper, uint32_t shard, uint32_t param, uint64_t numel,
                     std::shared_ptr<SourceFiles> files, DType to)
    : mapper_(mapper),
      shard_(shard),
      param_(param),
      numel_(numel),
      files_(std::move(files)),
      to_(to),
      element_size_(Info(to).element_size) {}

uint64_t CastState::size() const { return numel_ * element_size_; }

Status CastState::Read(uint64_t offset, uint64_t length, std::string* out) const {
  if (length == 0) return Status::OK();
  if (offset > size() || length > size() - offset) {
    return Status::InvalidArgument("a read past the end of a cast tensor");
  }
  // Whole elements covering the range, read as fp32 master weights.
  const uint64_t first = offset / element_size_;
  const uint64_t last = (offset + length + element_size_ - 1) / element_size_;
  std::vector<Extent> extents;
  UCFS_RETURN_IF_ERROR(mapper_.MapShardState(shard_, param_, 0, first * 4, last * 4, &extents));
  std::vector<ReadPiece> pieces;
  AppendSourcePieces(extents, &pieces);
  std::string fp32;
  UCFS_RETURN_IF_ERROR(files_->Read(pieces, &fp32));
  std::string cast;
  UCFS_RETURN_IF_ERROR(CastFloat32(fp32, to_, &cast));
  out->append(cast, offset - first * element_size_, length);
  return Status::OK();
}

StorageRun WidenedRun(std::shared_ptr<SourceFiles> files, DType from, uint64_t numel,
                      std::string name, WidenedToFloat32::MapBytes map) {
  auto widened = std::make_shared<const WidenedToFloat32>(std::move(files), from, numel,
                                                          std::move(name), std::move(map));
  const uint64_t length = widened->size();
  return ComputedRun(std::move(widened), length);
}

}  // namespace ucfs
