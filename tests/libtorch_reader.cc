#include "libtorch_reader.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace ucfs::testing {

bool LoadWithLibTorch(const std::string& path, LibTorchTensor* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    at::Tensor t = torch::jit::pickle_load(data).toTensor().contiguous();
    out->dtype = std::string(c10::toString(t.scalar_type())) == "Float"
                     ? "float32"
                     : c10::toString(t.scalar_type());
    out->shape.assign(t.sizes().begin(), t.sizes().end());
    out->requires_grad = t.requires_grad();
    out->bytes.assign(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    return true;
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
}

std::vector<uint16_t> CastWithLibTorch(const std::vector<uint32_t>& bits,
                                       const std::string& dtype) {
  std::vector<uint32_t> copy = bits;
  at::Tensor in = at::from_blob(copy.data(), {static_cast<int64_t>(copy.size())}, at::kFloat);
  at::Tensor out = in.to(dtype == "bfloat16" ? at::kBFloat16 : at::kHalf).contiguous();
  std::vector<uint16_t> result(copy.size());
  std::memcpy(result.data(), out.data_ptr(), result.size() * 2);
  return result;
}

}  // namespace ucfs::testing
