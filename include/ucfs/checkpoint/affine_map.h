// DeepSpeed 0.19.x's affine map: how AutoTP spread a param over its
// tensor-parallel ranks, described geometrically (deepspeed/checkpoint/
// affine.py; src/design/modern-layouts.md).
//
// A model-states file's universal_checkpoint_info may carry
//   affine_map = {'version': 1, 'params': {pattern: entry}}
//   entry = {'logical_shape': [...],
//            'ranks': {t: {'shard_shape': [...], 'pieces': [piece, ...]}}}
//   piece = {'shape', 'source': [offset, strides], 'dest': [offset, strides],
//            'locations': [ranks], 'scale'?}
// A piece is torch.as_strided(full, shape, source strides, source offset)
// in the full param, and as_strided(shard, shape, dest strides, dest
// offset) in rank t's slice; a piece several ranks list (locations) is
// replicated, and the converter takes it from the first rank listing it.
//
// LayOutAffineMap turns a map into runs of elements, checked against what
// the ranks saved: the arithmetic every view then reads by.
#ifndef UCFS_CHECKPOINT_AFFINE_MAP_H_
#define UCFS_CHECKPOINT_AFFINE_MAP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ucfs/base/periodic_runs.h"
#include "ucfs/base/status.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {

struct AffinePiece {
  std::vector<int64_t> shape;
  int64_t source_offset = 0;
  std::vector<int64_t> source_strides;
  int64_t dest_offset = 0;
  std::vector<int64_t> dest_strides;
  std::vector<int64_t> locations;
  double scale = 1.0;
};

struct ParamAffineMap {
  std::vector<int64_t> logical_shape;
  // By tensor-parallel rank, as the map lists them (rank, its shard).
  struct Shard {
    int64_t rank = 0;
    std::vector<int64_t> shape;
    std::vector<AffinePiece> pieces;
  };
  std::vector<Shard> shards;
};

// The map's entries, by pattern, in the saved order.
struct AffineMaps {
  std::vector<std::pair<std::string, std::shared_ptr<const ParamAffineMap>>> params;
};

// The version DeepSpeed 0.19.8 writes and reads (AFFINE_MAP_FORMAT_VERSION).
inline constexpr int64_t kAffineMapVersion = 1;

// universal_checkpoint_info['affine_map'] of `doc` (node `affine_map`).
// Corruption naming the key that is not what DeepSpeed saves; NotSupported
// for a version above kAffineMapVersion (the converter refuses it too:
// fields added since could be misread).
Result<AffineMaps> ReadAffineMaps(const pickle::Document& doc, pickle::NodeId affine_map);

// Runs of elements from one rank's slice: the whole is the full param.
struct AffineBlock : PeriodicRuns {
  uint32_t rank = 0;
};

// The blocks that make the full param (logical_shape) of `map` from the
// slices of shapes `slice_shapes` (by rank), each element from the first
// rank holding it. Checked against ucfs's own arithmetic: the ranks are
// 0..T-1, each shard shape is that rank's saved slice, every offset and
// stride is in bounds, the pieces of each rank tile its slice, and the
// pieces taken tile the full param, each element once. Corruption saying
// what disagrees (the caller names the file and the param); NotSupported
// for a scaled piece (a row-parallel bias held divided by T): its fp32
// would be computed and its moments the converter refuses too.
Result<std::vector<AffineBlock>> LayOutAffineMap(
    const ParamAffineMap& map, const std::vector<std::vector<int64_t>>& slice_shapes);

// Whether `blocks` (LayOutAffineMap's) lay the param out as the category
// rule `concat_dim` names: each slice the whole param (nullopt: replicated),
// or the slices concatenated along that dimension in rank order. Checked at
// the first and last element of each block's first and last run, which,
// runs being contiguous on both sides, decides every element between.
bool AffineLayoutIsCategory(const std::vector<AffineBlock>& blocks,
                            const std::vector<std::vector<int64_t>>& slice_shapes,
                            const std::vector<int64_t>& logical_shape,
                            std::optional<size_t> concat_dim);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_AFFINE_MAP_H_
