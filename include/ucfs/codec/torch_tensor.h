// Recognising torch tensors in a parsed data.pkl.
//
// torch.save pickles a tensor as a call to torch._utils._rebuild_tensor_v2
// (or _v3, or wrapped in _rebuild_from_type_v2 / _rebuild_parameter) whose
// first argument is a persistent id naming a storage record of the zip.
// MatchTensor reads such a call back into a TensorRef: which record holds
// the bytes, in which dtype, at which offset, with which shape.
#ifndef UCFS_CODEC_TORCH_TENSOR_H_
#define UCFS_CODEC_TORCH_TENSOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {

enum class DType : uint8_t {
  kFloat64,
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
  kComplex64,
  kComplex128,
  kQInt8,
  kQUInt8,
  kQInt32,
  kQUInt4x2,
  kQUInt2x4,
  kUntyped,  // torch.UntypedStorage: numel counts bytes
};

struct DTypeInfo {
  DType dtype;
  std::string_view storage_class;  // "FloatStorage"
  std::string_view torch_name;     // "float32" (as torch prints torch.float32)
  uint32_t element_size;
};

const DTypeInfo& Info(DType dtype);
// torch's dtype.is_floating_point: float64, float32, float16, bfloat16.
bool IsFloating(DType dtype);
std::optional<DType> DTypeFromStorageClass(std::string_view storage_class);
// "torch.float32" style names, as found in a pickled `torch float32` global.
std::optional<DType> DTypeFromTorchName(std::string_view name);

struct TensorRef {
  pickle::NodeId node = pickle::kNoNode;  // the rebuild call
  std::string storage_key;                // the zip record is "<prefix>/data/<key>"
  std::string location;                   // "cpu", "cuda:0", ...
  DType dtype = DType::kFloat32;
  uint64_t storage_numel = 0;   // elements of the storage (bytes if untyped)
  uint64_t storage_offset = 0;  // elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
  bool requires_grad = false;

  uint64_t numel() const;
  uint64_t element_size() const { return Info(dtype).element_size; }
  // Row-major contiguous: the tensor's bytes are one range of its storage.
  bool contiguous() const;
  // Byte range of the tensor inside its storage record, if contiguous.
  uint64_t byte_offset() const { return storage_offset * element_size(); }
  uint64_t byte_size() const { return numel() * element_size(); }
};

// If `id` is a tensor rebuild call, what it rebuilds; nullopt if it is not a
// tensor at all; an error if it looks like one but is malformed.
Result<std::optional<TensorRef>> MatchTensor(const pickle::Document& doc, pickle::NodeId id);

// "[11, 7]", as torch prints a shape.
std::string ShapeString(const std::vector<int64_t>& shape);
// Elements of a tensor of this shape.
uint64_t NumelOf(const std::vector<int64_t>& shape);

// A torch.Size(...) or plain tuple of ints.
std::optional<std::vector<int64_t>> MatchShape(const pickle::Document& doc, pickle::NodeId id);

}  // namespace ucfs

#endif  // UCFS_CODEC_TORCH_TENSOR_H_
