// Synthesised torch.save files: a pickle ucfs wrote, and storages whose
// bytes are runs of checkpoint state, source ranges or zeros — laid out
// exactly as torch.save would lay them out, so sizes are known at stat
// time and every read maps to source extents.
#ifndef UCFS_TORCH_WRITER_H_
#define UCFS_TORCH_WRITER_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ucfs/checkpoint.h"
#include "ucfs/source_files.h"
#include "ucfs/torch_file.h"
#include "ucfs/view.h"
#include "ucfs/zip.h"

namespace ucfs {

class DeferredBytes;

// A contiguous part of a storage's bytes.
struct StorageRun {
  enum class Kind : uint8_t {
    kState,   // bytes [state_offset, +length) of a param's full state (Checkpoint::MapState)
    kSource,  // bytes [source_offset, +length) of a source file
    kZeros,   // padding
    kFrozen,  // bytes [state_offset, +length) of frozen param `param`'s full value (MapFrozen)
    kBytes,   // `bytes`: values ucfs computes (a buffer converted to another dtype)
  };
  Kind kind = Kind::kZeros;
  uint64_t length = 0;
  uint32_t param = 0;
  uint32_t state = 0;
  uint64_t state_offset = 0;
  uint32_t source = 0;
  uint64_t source_offset = 0;
  std::shared_ptr<const DeferredBytes> bytes;
};

// Bytes ucfs computes from source bytes, made on first read and kept: a
// mount reads no tensor bytes, not even small ones. Thread-safe.
class DeferredBytes {
 public:
  explicit DeferredBytes(std::function<Result<std::string>()> make) : make_(std::move(make)) {}
  Result<std::string_view> Get() const;

 private:
  std::function<Result<std::string>()> make_;
  mutable std::once_flag once_;
  mutable Status status_;
  mutable std::string bytes_;
};

struct StorageSpec {
  std::string key;               // the record is "<prefix>/data/<key>"
  std::vector<StorageRun> runs;  // in order; their lengths add up to the storage size
  uint32_t crc32 = 0;
  // run_starts[i]: offset of runs[i] in the storage (FillRunStarts).
  std::vector<uint64_t> run_starts;

  uint64_t size() const;
  void FillRunStarts();
};

// Read pieces of bytes [begin, end) of a storage (run_starts filled), its
// state and frozen runs mapped through `checkpoint`.
Status PlanStorage(const Checkpoint& checkpoint, const StorageSpec& storage, uint64_t begin,
                   uint64_t end, std::vector<ReadPiece>* out);

// Reads source bytes for ucfs itself (CRCs, tests, export): a ReadPiece
// list resolved through an Env, with files opened once.
class PieceReader {
 public:
  PieceReader(Env& env, std::function<SourceFile(uint32_t)> source);
  // The pieces' bytes, each source checked as SourceFiles checks them.
  Status Read(const std::vector<ReadPiece>& pieces, std::string* out);
  // CRC-32 of the pieces' bytes, read in bounded chunks (tensors may be GBs).
  Result<uint32_t> Crc32(const std::vector<ReadPiece>& pieces);

 private:
  SourceFiles files_;
};

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
      std::vector<StorageSpec> storages, PieceReader* crc_reader = nullptr);

  uint64_t size() const override { return layout_.size(); }
  Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const override;
  const ZipLayout& layout() const { return layout_; }

 private:
  TorchFileContent(std::shared_ptr<const Checkpoint> checkpoint, ZipLayout layout,
                   std::vector<StorageSpec> storages, std::vector<int> storage_of_entry);
  std::shared_ptr<const Checkpoint> checkpoint_;
  ZipLayout layout_;
  std::vector<StorageSpec> storages_;
  std::vector<int> storage_of_entry_;  // -1 for inline entries
};

// Assembles the pickle of a synthesised torch.save file from pieces of
// source pickles and new tensors, then lays the file out. Storages are
// renumbered in the order the pickle meets them and moved to 'cpu', as
// torch.load(map_location='cpu') + torch.save would.
class TorchPickleBuilder {
 public:
  TorchPickleBuilder() = default;
  pickle::Document& doc() { return doc_; }

  // Copies the subgraph at `id` of a source file's pickle. Its tensors keep
  // their bytes: the storage records of `summary`, source `source_index`.
  // Pass the same `copied` map to share nodes between several copies.
  Result<pickle::NodeId> Copy(const pickle::Document& source_doc, pickle::NodeId id,
                              const TorchFileSummary& summary, uint32_t source_index,
                              std::vector<pickle::NodeId>* copied);
  // A new 1-D or 0-dim tensor (torch's _rebuild_tensor_v2) whose storage
  // holds `runs`; shape {} for a scalar.
  pickle::NodeId NewTensor(DType dtype, const std::vector<int64_t>& shape, bool requires_grad,
                           std::vector<StorageRun> runs);

  // Writes the pickle rooted at doc().root() and plans the file.
  Result<std::shared_ptr<TorchFileContent>> Finish(std::shared_ptr<const Checkpoint> checkpoint,
                                                   const std::string& prefix,
                                                   PieceReader* crc_reader = nullptr);

 private:
  // The one location string of every id ("cpu").
  pickle::NodeId CpuString();

  pickle::Document doc_;
  // What each storage key node of doc_ holds.
  std::unordered_map<pickle::NodeId, std::vector<StorageRun>> storages_;
  pickle::NodeId storage_str_ = pickle::kNoNode;
  pickle::NodeId cpu_str_ = pickle::kNoNode;
  // A copied id's key node -> the key node of its own that replaced it.
  std::unordered_map<pickle::NodeId, pickle::NodeId> own_keys_;
  pickle::NodeId new_key_count_ = 0;
};

// data.pkl of a torch.save'd bare tensor: _rebuild_tensor_v2 of storage "0"
// with shape (numel,), as ds_to_universal writes its per-param files.
Result<std::string> BareTensorPickle(DType dtype, uint64_t numel, bool requires_grad);

// The archive prefix torch gives a file: its name without the extension.
std::string ArchivePrefixFor(std::string_view file_name);

}  // namespace ucfs

#endif  // UCFS_TORCH_WRITER_H_
