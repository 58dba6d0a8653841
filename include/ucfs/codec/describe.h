// A readable, indented rendering of a torch.save pickle, for people poking
// at files by hand (`ucfs show FILE.pt`) and for comparing the structure of
// two checkpoints. Tensors are shown as one line (dtype, shape, storage),
// never expanded into the calls that rebuild them.
#ifndef UCFS_CODEC_DESCRIBE_H_
#define UCFS_CODEC_DESCRIBE_H_

#include <string>

#include "ucfs/base/status.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {

struct DescribeOptions {
  // Show storage keys and locations of tensors; off when comparing the
  // structure of files whose storages are numbered differently.
  bool storage_details = true;
  // Containers longer than this are cut, with a count of what was left out.
  size_t max_items = 64;
  // A pickle's memo lets one value be referenced from many places, so a few
  // KB can stand for a tree of 64^k values ("billion laughs"): rendering
  // stops with an error past this many bytes of output or values shown.
  // The largest real files render in about 1 MB (a module state dict of
  // 10,000 tensors, a line each); a 3 KB pickle of shared lists took 0.9 s
  // and 120 MB to reach the 64 MiB this was before.
  size_t max_output_bytes = size_t{16} << 20;
  size_t max_values = size_t{1} << 20;
};

// The rendering, or an error when it would pass the options' bounds.
Result<std::string> Describe(const pickle::Document& doc, pickle::NodeId id,
                             const DescribeOptions& options = {});

}  // namespace ucfs

#endif  // UCFS_CODEC_DESCRIBE_H_
