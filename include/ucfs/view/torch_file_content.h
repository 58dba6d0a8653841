// TorchFileContent: a torch.save file ucfs synthesises — a pickle it
// wrote and storages described by StorageSpecs — laid out exactly as the
// torch that wrote the checkpoint lays its files out (records, order,
// alignment), as a FileContent whose reads map to source extents.
#ifndef UCFS_VIEW_TORCH_FILE_CONTENT_H_
#define UCFS_VIEW_TORCH_FILE_CONTENT_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/zip.h"
#include "ucfs/view/source_files.h"
#include "ucfs/view/storage_spec.h"
#include "ucfs/view/view.h"

namespace ucfs {

class TorchFileContent final : public FileContent {
 public:
  // The file torch.save writes for a pickle and its storages, laid out as
  // the torch that wrote `checkpoint` lays them out (its container_style():
  // which records, in which order, at which alignment). With `crc_reader`,
  // records get real CRC-32s (every byte is read now); without, CRCs are
  // zero, as torch writes them with compute_crc32 off; torch.load accepts
  // both.
  static Result<std::shared_ptr<TorchFileContent>> Make(
      std::shared_ptr<const Checkpoint> checkpoint, const std::string& prefix, std::string pickle,
      std::vector<StorageSpec> storages, SourceFiles* crc_reader = nullptr);
  // The same, its state runs mapped through `mapper` (a ParallelCheckpoint's
  // shard groups), laid out in `style`.
  static Result<std::shared_ptr<TorchFileContent>> Make(std::shared_ptr<const StateMapper> mapper,
                                                        const ContainerStyle& style,
                                                        const std::string& prefix,
                                                        std::string pickle,
                                                        std::vector<StorageSpec> storages,
                                                        SourceFiles* crc_reader = nullptr);

  uint64_t size() const override { return layout_.size(); }
  Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const override;
  const ZipLayout& layout() const { return layout_; }

 private:
  TorchFileContent(std::shared_ptr<const StateMapper> mapper, ZipLayout layout,
                   std::vector<StorageSpec> storages, std::vector<int> storage_of_entry);
  std::shared_ptr<const StateMapper> mapper_;
  ZipLayout layout_;
  std::vector<StorageSpec> storages_;
  std::vector<int> storage_of_entry_;  // -1 for inline entries
};

// The archive prefix torch gives a file: its name without the extension.
std::string ArchivePrefixFor(std::string_view file_name);

}  // namespace ucfs

#endif  // UCFS_VIEW_TORCH_FILE_CONTENT_H_
