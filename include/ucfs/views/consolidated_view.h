// The consolidated weights: the full fp32 model, as DeepSpeed's
// zero_to_fp32.py writes it, assembled on read like everything else.
//
//   <tag>_fp32/pytorch_model.bin            torch.save of an OrderedDict
//   <tag>_fp32/model.safetensors            the same tensors (one file), or
//   <tag>_fp32/model-0000k-of-0000n.safetensors + model.safetensors.index.json
//                                           when they exceed max_shard_bytes
//
// The state dict holds what zero_to_fp32 puts in it, in its order: the
// persistent buffers (as float32, as its .float() makes them), the frozen
// params (in their own dtype), every trainable param's fp32 master weights
// at full shape, then each tied alias — in the .bin the same tensor as the
// param it is tied to, in safetensors (which cannot alias) a copy.
// Unlike zero_to_fp32's, each storage holds exactly the tensor's elements,
// not the ranks' padding after them; the tensors are equal.
#ifndef UCFS_VIEWS_CONSOLIDATED_VIEW_H_
#define UCFS_VIEWS_CONSOLIDATED_VIEW_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/checkpoint/state_mapper.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/torch_pickle_builder.h"

namespace ucfs {

struct ConsolidatedOptions {
  // Hugging Face's default max_shard_size, "5GB".
  uint64_t max_shard_bytes = 5'000'000'000;
  // Real CRC-32s in the .bin files' zip records (UniversalViewOptions::
  // compute_crc): every byte is read when the directory is made.
  bool compute_crc = false;
};

// "<tag>_fp32"
std::string ConsolidatedDirName(const std::string& tag);

// One tensor of the consolidated state dict.
struct ConsolidatedTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  bool requires_grad = false;
  StorageSpec storage;  // exactly the tensor's bytes
  int alias_of = -1;    // a tied alias: the index of the tensor it shares
};

// What the state dict is made as; the defaults are zero_to_fp32's.
// What becomes of the tensors that are no master weight (buffers, frozen
// params) in zero_to_fp32.py of the DeepSpeed that saved a checkpoint.
enum class OtherTensors {
  kAsSaved,            // save_pretrained's (the Hugging Face weights), not zero_to_fp32's
  kBuffersToFloat32,   // up to 0.19.6: buffers .float(), frozen params as saved
  kAllToFloat32,       // 0.19.7: every tensor .to(float32), integer buffers too
  kFloatingToFloat32,  // 0.19.8 on: every floating tensor .to(float32), the rest as saved
};
OtherTensors ZeroToFp32OtherTensors(std::string_view ds_version);

struct StateDictOptions {
  // nullopt: as zero_to_fp32.py of the DeepSpeed that saved the checkpoint.
  std::optional<OtherTensors> others;
  // Trainable params cast from their fp32 master weights to this dtype
  // (bfloat16, float16) as they are read; nullopt keeps fp32.
  std::optional<DType> params_dtype;
  // Tied aliases left out, as save_pretrained drops tied duplicates.
  bool drop_aliases = false;
};

// zero_to_fp32's state dict for `checkpoint`, in its order; a data-parallel
// checkpoint is the 1 x 1 x D grid (ParallelCheckpoint::OfDataParallel).
// Over a tensor- and pipeline-parallel one, which zero_to_fp32.py refuses
// ("Expected 2 ... found 4 files"), each trainable param is its fp32
// master weights merged over the T slices at full shape (the name table:
// the universal files' tensors), in the stages' order; a padded vocabulary
// cut to original_vocab_size rows, as the universal files cut it (the
// padding depends on the saving T, so the model saved at T = 2 and at
// T = 4 gives the same tensors); buffers from tensor rank 0 of each stage,
// the first stage's where stages share a name; tied aliases as each stage
// lists them; frozen params at T > 1 refused (how their slices merge is
// not in the name table). Its runs are mapped through `checkpoint`.
// `env` and `checkpoint` (which must outlive the result) read the buffers
// that need converting to float32, on their first read, and the master
// weights to cast: building the state dict reads no tensor.
Result<std::vector<ConsolidatedTensor>> ConsolidatedStateDict(Env& env,
                                                              const ParallelCheckpoint& checkpoint,
                                                              const StateDictOptions& options = {});

// Ends a state dict: refuses a name twice (a safetensors header would drop
// one), appends each of `tied_params` whose canonical tensor is in it as an
// alias of that tensor (zero_to_fp32's shared params), fills run starts.
Status FinishStateDict(const std::vector<TiedParam>& tied_params,
                       std::vector<ConsolidatedTensor>* tensors);

// A file of a directory ucfs makes.
struct NamedContent {
  std::string name;
  std::shared_ptr<const FileContent> content;
};

// `tensors` as safetensors files: one model.safetensors, or past
// `max_shard_bytes` model-0000k-of-0000n.safetensors and
// model.safetensors.index.json, split as Hugging Face splits them; a tied
// alias is a copy in its tensor's shard (safetensors cannot alias).
// Their state and frozen runs are mapped through `mapper` (a Checkpoint, or
// a ParallelCheckpoint's shard groups).
Result<std::vector<NamedContent>> SafetensorsFiles(std::shared_ptr<const StateMapper> mapper,
                                                   const std::vector<ConsolidatedTensor>& tensors,
                                                   uint64_t max_shard_bytes);

// A safetensors file of `tensors` (each storage's bytes; aliases copied).
class SafetensorsContent final : public FileContent {
 public:
  static Result<std::shared_ptr<SafetensorsContent>> Make(std::shared_ptr<const StateMapper> mapper,
                                                          std::vector<ConsolidatedTensor> tensors);

  uint64_t size() const override { return header_.size() + data_size_; }
  Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const override;

 private:
  SafetensorsContent() = default;
  std::shared_ptr<const StateMapper> mapper_;
  std::string header_;  // the length prefix and the JSON header, padded
  std::vector<StorageSpec> data_;
  std::vector<uint64_t> data_starts_;  // offset of data_[i] after the header
  uint64_t data_size_ = 0;
};

// What the files of a state dict are read through and written as.
struct ConsolidatedSource {
  std::shared_ptr<const StateMapper> mapper;  // a Checkpoint, or a ParallelCheckpoint
  ContainerStyle style;                       // the torch that wrote the checkpoint's
  std::string ds_version;                     // the DeepSpeed that saved it (.bin sharding)
};

// `tensors` in directory `dir`: the .bin file(s) zero_to_fp32.py of
// `source.ds_version` writes, and the same tensors as safetensors.
// `sources` reads the bytes of the CRCs (options.compute_crc).
Status AddConsolidatedFiles(View& view, InodeId dir, const ConsolidatedSource& source,
                            const std::vector<ConsolidatedTensor>& tensors,
                            const ConsolidatedOptions& options, SourceFiles* sources);

// Buffer `b` of the state dict, its extent in source `source`: as saved, or
// float32, widened on every read from the bytes `files` reads
// (identity-checked, as every source byte ucfs serves).
Result<ConsolidatedTensor> BufferTensor(const BufferInfo& b, uint32_t source, bool as_saved,
                                        std::shared_ptr<SourceFiles> files);

// Adds the <tag>_fp32 directory under `parent`.
Status AddConsolidatedDir(Env& env, View& view, InodeId parent,
                          std::shared_ptr<const ParallelCheckpoint> checkpoint,
                          const ConsolidatedOptions& options = {});

// The same under the root, for the views: the consolidated weights are an
// extra, so a checkpoint they cannot be made for (a buffer of a dtype that
// has no float32 conversion) still mounts, with a warning.
void AddConsolidatedDirOrWarn(Env& env, View& view,
                              std::shared_ptr<const ParallelCheckpoint> checkpoint,
                              const ConsolidatedOptions& options);

}  // namespace ucfs

#endif  // UCFS_VIEWS_CONSOLIDATED_VIEW_H_
