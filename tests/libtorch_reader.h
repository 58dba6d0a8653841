// LibTorch's reader of torch.save files, behind a plain interface: the
// LibTorch 1.13 headers do not compile as C++20, so they stay in
// libtorch_reader.cc, built as C++17.
#ifndef UCFS_TESTS_LIBTORCH_READER_H_
#define UCFS_TESTS_LIBTORCH_READER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ucfs::testing {

struct LibTorchTensor {
  std::string dtype;  // "float32", ...
  std::vector<int64_t> shape;
  bool requires_grad = false;
  std::string bytes;  // contiguous, native byte order
};

// Loads a torch.save file holding one tensor with torch::jit::pickle_load.
// Returns false and sets *error if LibTorch cannot.
bool LoadWithLibTorch(const std::string& path, LibTorchTensor* out, std::string* error);

// float32 elements (`bits`) cast by at::Tensor::to to "bfloat16" or
// "float16": the 16-bit patterns torch makes.
std::vector<uint16_t> CastWithLibTorch(const std::vector<uint32_t>& bits, const std::string& dtype);

}  // namespace ucfs::testing

#endif  // UCFS_TESTS_LIBTORCH_READER_H_
