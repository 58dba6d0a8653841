// TorchPickleBuilder: the pickle of a torch.save file ucfs synthesises,
// assembled from pieces of the checkpoint's own pickles and new tensors —
// never by executing anything — and then laid out as a TorchFileContent.
#ifndef UCFS_VIEWS_TORCH_PICKLE_BUILDER_H_
#define UCFS_VIEWS_TORCH_PICKLE_BUILDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/storage_spec.h"
#include "ucfs/views/torch_file_content.h"

namespace ucfs {

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
  // A new contiguous tensor (torch's _rebuild_tensor_v2) whose storage
  // holds `runs`; shape {} for a scalar. The storage holds the tensor's
  // elements, or `storage_numel` from its start (a slice of a longer
  // tensor, as torch.save keeps the whole storage of a view).
  // `tag` names the storage in Parts::tags (-1: untagged).
  pickle::NodeId NewTensor(DType dtype, const std::vector<int64_t>& shape, bool requires_grad,
                           std::vector<StorageRun> runs,
                           std::optional<uint64_t> storage_numel = std::nullopt, int64_t tag = -1);

  // The pickle written and its storages named, before the file is laid
  // out: what rank files that share a pickle share (reshard_view.cc).
  struct Parts {
    std::shared_ptr<const std::string> pickle;
    std::vector<StorageSpec> storages;
    std::vector<int64_t> tags;  // by storage: NewTensor's tag, -1 for the others
  };
  Result<Parts> FinishParts();

  // Writes the pickle rooted at doc().root() and plans the file.
  Result<std::shared_ptr<TorchFileContent>> Finish(std::shared_ptr<const Checkpoint> checkpoint,
                                                   const std::string& prefix,
                                                   SourceFiles* crc_reader = nullptr);
  // The same, its state runs mapped through `mapper` (a ParallelCheckpoint's
  // shard groups), laid out in `style`.
  Result<std::shared_ptr<TorchFileContent>> Finish(std::shared_ptr<const StateMapper> mapper,
                                                   const ContainerStyle& style,
                                                   const std::string& prefix,
                                                   SourceFiles* crc_reader = nullptr);

 private:
  // The one location string of every id ("cpu"), and the one 'storage'.
  pickle::NodeId CpuString();
  pickle::NodeId StorageString();

  pickle::Document doc_;
  // What each storage key node of doc_ holds, and its tag.
  std::unordered_map<pickle::NodeId, std::vector<StorageRun>> storages_;
  std::unordered_map<pickle::NodeId, int64_t> tags_;
  pickle::NodeId storage_str_ = pickle::kNoNode;
  pickle::NodeId cpu_str_ = pickle::kNoNode;
  // A copied id's key node -> the key node of its own that replaced it.
  std::unordered_map<pickle::NodeId, pickle::NodeId> own_keys_;
  pickle::NodeId new_key_count_ = 0;
};

// data.pkl of a torch.save'd bare contiguous tensor: _rebuild_tensor_v2 of
// storage "0" of exactly its elements. As ds_to_universal writes its
// ZeRO-3 per-param files (shape {numel}) and every step.pt (shape {}).
Result<std::string> BareTensorPickle(DType dtype, const std::vector<int64_t>& shape,
                                     bool requires_grad);

// data.pkl of ds_to_universal's ZeRO-1/2 per-param file: {'cat_dim': 0,
// 'param': the tensor at its full shape}, storage "0".
Result<std::string> UniversalParamPickle(DType dtype, const std::vector<int64_t>& shape,
                                         bool requires_grad);

// data.pkl of ds_to_universal's per-param dict of a tensor-parallel merge:
// `keys` (in the converter's order: cat_dim, param_n_sub_params or
// sub_param_shape, vocab_tensor), then 'param', the tensor at `shape` over
// a storage of `storage_numel` elements (a vocabulary cut from its padded
// merge keeps the whole storage).
struct UniversalKey {
  std::string name;
  int64_t value = 0;
  bool is_bool = false;
  // Else the value this adds to the document (an object: SubparamShape).
  std::function<pickle::NodeId(pickle::Document&)> make;
};
Result<std::string> UniversalDictPickle(DType dtype, const std::vector<int64_t>& shape,
                                        uint64_t storage_numel, bool requires_grad,
                                        const std::vector<UniversalKey>& keys);

// The value node under `key` of a dict or OrderedDict, for replacing
// (null where there is none).
pickle::NodeId* ValueSlot(pickle::Document& doc, pickle::NodeId mapping, std::string_view key);

// data.pkl of an expert param's universal file as DeepSpeed 0.19.8's
// converter writes it (ds_to_universal.py consolidate_autoep_zero12_expert_states):
// {'param': tensor, 'cat_dim': 0, 'is_expert_param': True,
//  'ep_num_experts': E}, in that order.
Result<std::string> UniversalExpertPickle(DType dtype, const std::vector<int64_t>& shape,
                                          bool requires_grad, int64_t ep_num_experts);

// data.pkl of a torch.save'd Python number (a step kept as an int or float).
Result<std::string> NumberPickle(double value, bool is_float);

}  // namespace ucfs

#endif  // UCFS_VIEWS_TORCH_PICKLE_BUILDER_H_
