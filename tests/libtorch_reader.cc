#include "libtorch_reader.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

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

}  // namespace ucfs::testing
