// The safetensors container's header, as Hugging Face's reference writer
// (safetensors' serialize) lays it out: an 8-byte little-endian length,
// then a JSON object -- "__metadata__" first, then one entry per tensor
// with its dtype, shape and [begin, end) offsets in the data that follows
// -- padded with spaces so that the data starts 8-aligned. The data is the
// tensors' bytes back to back, in the order given.
#ifndef UCFS_CODEC_SAFETENSORS_H_
#define UCFS_CODEC_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {

// safetensors' name of `dtype` ("F32", "BF16", ...), or nullopt where it
// has none.
std::optional<std::string_view> SafetensorsDType(DType dtype);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;  // its data's length
};

struct SafetensorsHeader {
  std::string bytes;                  // the length and the padded JSON
  std::vector<uint64_t> data_starts;  // each entry's offset in the data
  uint64_t data_size = 0;
};

// The header of a file holding `entries`, with `metadata` as its
// "__metadata__" (Hugging Face writes {"format": "pt"}). NotSupported naming
// a tensor whose dtype safetensors cannot name; Corruption past 2^62 bytes.
Result<SafetensorsHeader> MakeSafetensorsHeader(
    const std::vector<SafetensorsEntry>& entries,
    const std::vector<std::pair<std::string, std::string>>& metadata = {{"format", "pt"}});

// The index of a checkpoint split into shards (model.safetensors.index.json,
// pytorch_model.bin.index.json) as Hugging Face writes it:
// json.dumps({"metadata": {"total_size": total}, "weight_map": ...},
// indent=2, sort_keys=True) + "\n".
std::string ShardIndexJson(uint64_t total, const std::map<std::string, std::string>& weight_map);

}  // namespace ucfs

#endif  // UCFS_CODEC_SAFETENSORS_H_
