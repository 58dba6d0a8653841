// One rank file as the checkpoint model reads it: its summary (zip records,
// small records, data.pkl) and the parsed pickle, with the checks that every
// tensor the model takes from it must pass.
//
// Private to src/checkpoint/: the readers of each part of the model
// (model_states.cc, zero3_partitions.cc, flat_groups.cc) share it.
#ifndef UCFS_CHECKPOINT_PARSED_RANK_FILE_H_
#define UCFS_CHECKPOINT_PARSED_RANK_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"

namespace ucfs {

struct ParsedRankFile {
  TorchFileSummary summary;
  std::shared_ptr<pickle::Document> doc;

  const std::string& path() const { return summary.path; }
  Status Error(const std::string& what) const { return Status::Corruption(path() + ": " + what); }

  // Byte offset in the file of element 0 of `t`, after checking that the
  // tensor lies inside a stored record.
  Result<uint64_t> DataOffset(const TensorRef& t) const;
  // The stored (uncompressed) record that holds all of `t`'s storage.
  Result<const ZipRecord*> Record(const TensorRef& t) const;
  // A 0-dim tensor's value, from the summary's small records.
  Result<double> ScalarValue(const TensorRef& t) const;

  // MatchTensor of node `id`, with the file named in its errors.
  Result<std::optional<TensorRef>> MatchTensor(pickle::NodeId id) const;
  // The same, where anything but a tensor is an error about `what`.
  Result<TensorRef> RequireTensor(pickle::NodeId id, const std::string& what) const;
};

// Summarises `path` through `source` and parses its pickle.
Result<ParsedRankFile> LoadParsedRankFile(TorchFileSource& source, const std::string& path);

// Elements of a param_shapes shape, or nullopt past 2^62 / 16: any state of
// the param, in any dtype up to 16 bytes, must have a byte size that fits
// (views multiply numel by the element size without checking again).
std::optional<uint64_t> CheckedNumel(const std::vector<int64_t>& shape);

// An optimizer's `zero_stage`, however its writer pickled ZeroStageEnum.
std::optional<int> DecodeZeroStage(const pickle::Document& doc, pickle::NodeId id);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_PARSED_RANK_FILE_H_
