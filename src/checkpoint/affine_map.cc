#include "ucfs/checkpoint/affine_map.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <queue>
#include <set>

#include "ucfs/base/checked_math.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::NodeId;

Status Wrong(const std::string& where, std::string_view what) {
  return Status::Corruption("universal_checkpoint_info: affine_map" + where + " is not " +
                            std::string(what));
}

std::optional<std::vector<int64_t>> Ints(const Document& doc, NodeId node) {
  auto items = doc.SequenceItems(node);
  if (!items) return std::nullopt;
  std::vector<int64_t> out;
  for (NodeId item : *items) {
    auto v = doc.AsInt(item);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

// [offset, strides] of a piece's 'source' or 'dest'.
bool ReadPlace(const Document& doc, NodeId node, int64_t* offset, std::vector<int64_t>* strides) {
  auto pair = doc.SequenceItems(node);
  if (!pair || pair->size() != 2) return false;
  auto o = doc.AsInt((*pair)[0]);
  auto s = Ints(doc, (*pair)[1]);
  if (!o || !s) return false;
  *offset = *o;
  *strides = std::move(*s);
  return true;
}

Result<AffinePiece> ReadPiece(const Document& doc, NodeId node, const std::string& where) {
  AffinePiece piece;
  auto shape = Ints(doc, doc.Get(node, "shape"));
  auto locations = Ints(doc, doc.Get(node, "locations"));
  if (!shape || !locations ||
      !ReadPlace(doc, doc.Get(node, "source"), &piece.source_offset, &piece.source_strides) ||
      !ReadPlace(doc, doc.Get(node, "dest"), &piece.dest_offset, &piece.dest_strides)) {
    return Wrong(where, "a piece of shape, source, dest and locations");
  }
  piece.shape = std::move(*shape);
  piece.locations = std::move(*locations);
  if (NodeId scale = doc.Get(node, "scale"); scale != pickle::kNoNode) {
    auto v = doc.AsNumber(scale);
    if (!v || *v == 0) return Wrong(where, "a piece with a non-zero number for its scale");
    piece.scale = *v;
  }
  return piece;
}

Result<ParamAffineMap> ReadEntry(const Document& doc, NodeId node, const std::string& where) {
  ParamAffineMap map;
  auto logical = Ints(doc, doc.Get(node, "logical_shape"));
  auto ranks = doc.MappingItems(doc.Get(node, "ranks"));
  if (!logical || !ranks) return Wrong(where, "a dict of logical_shape and ranks");
  map.logical_shape = std::move(*logical);
  for (const auto& [key, value] : *ranks) {
    ParamAffineMap::Shard shard;
    auto rank = doc.AsInt(key);
    auto shape = Ints(doc, doc.Get(value, "shard_shape"));
    auto pieces = doc.SequenceItems(doc.Get(value, "pieces"));
    if (!rank || !shape || !pieces) return Wrong(where, "ranks of shard_shape and pieces");
    shard.rank = *rank;
    shard.shape = std::move(*shape);
    for (NodeId p : *pieces) {
      UCFS_ASSIGN_OR_RETURN(AffinePiece piece, ReadPiece(doc, p, where));
      shard.pieces.push_back(std::move(piece));
    }
    map.shards.push_back(std::move(shard));
  }
  return map;
}

// Elements of `shape`, or nullopt for a negative size or past the bound.
std::optional<uint64_t> Numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    auto m = CheckedMul(n, static_cast<uint64_t>(d), kMaxFileQuantity);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

// A dimension of a piece: its size and its strides on both sides.
struct Dim {
  uint64_t size, source, dest;
};

// The blocks of one piece (its elements in row-major order of its shape):
// the innermost dimensions contiguous on both sides make one run, the
// dimension outside them its period, any further outer ones a block per
// index (bounded). Every run is checked inside the full param (numel) and
// the shard (shard_numel).
Status PieceBlocks(const AffinePiece& p, uint32_t rank, uint64_t numel, uint64_t shard_numel,
                   std::vector<AffineBlock>* out) {
  const std::string what = "rank " + std::to_string(rank) + "'s piece of shape " +
                           ShapeString(p.shape) + " at source " + std::to_string(p.source_offset);
  if (p.source_strides.size() != p.shape.size() || p.dest_strides.size() != p.shape.size()) {
    return Status::Corruption(what + " has strides of another rank than its shape");
  }
  if (p.source_offset < 0 || p.dest_offset < 0) {
    return Status::Corruption(what + " has a negative offset");
  }
  std::vector<Dim> dims;
  for (size_t i = 0; i < p.shape.size(); ++i) {
    if (p.shape[i] < 0 || p.source_strides[i] < 0 || p.dest_strides[i] < 0) {
      return Status::Corruption(what + " has a negative size or stride");
    }
    if (p.shape[i] == 0) return Status::OK();  // no elements
    if (p.shape[i] == 1) continue;             // its strides move nothing
    dims.push_back({static_cast<uint64_t>(p.shape[i]), static_cast<uint64_t>(p.source_strides[i]),
                    static_cast<uint64_t>(p.dest_strides[i])});
  }
  // Nothing past kMaxFileQuantity below: sizes and strides are bounded by
  // the checks against numel, which is.
  for (const Dim& d : dims) {
    if (d.size > numel || d.size > shard_numel || d.source > numel || d.dest > shard_numel) {
      return Status::Corruption(what + " reaches past the param or its shard");
    }
  }
  // Products past the param's size are a piece holding more than it:
  // refused before they could overflow.
  const auto product = [&](uint64_t a, uint64_t b) -> std::optional<uint64_t> {
    auto m = CheckedMul(a, b);
    return m && *m <= numel ? m : std::nullopt;
  };
  const Status too_large = Status::Corruption(what + " holds more elements than the param");
  uint64_t length = 1;
  size_t k = dims.size();
  while (k > 0 && dims[k - 1].source == length && dims[k - 1].dest == length) {
    auto m = product(length, dims[--k].size);
    if (!m) return too_large;
    length = *m;
  }
  // Outer dimensions that nest (stride = inner stride * inner size on both
  // sides) are one.
  std::vector<Dim> outer(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(k));
  for (size_t i = outer.size(); i > 1; --i) {
    Dim& in = outer[i - 1];
    const Dim& out_dim = outer[i - 2];
    if (CheckedMul(in.source, in.size) == out_dim.source &&
        CheckedMul(in.dest, in.size) == out_dim.dest) {
      auto m = product(in.size, out_dim.size);
      if (!m) return too_large;
      in.size = *m;
      outer.erase(outer.begin() + static_cast<std::ptrdiff_t>(i - 2));
    }
  }
  AffineBlock block;
  block.rank = rank;
  block.length = length;
  block.count = outer.empty() ? 1 : outer.back().size;
  block.period = outer.empty() ? 0 : outer.back().source;
  block.slice_period = outer.empty() ? 0 : outer.back().dest;
  uint64_t expand = 1;  // blocks, one per index of the dimensions outside the period's
  constexpr uint64_t kMaxBlocks = uint64_t{1} << 16;
  for (size_t i = 0; i + 1 < outer.size() && expand <= kMaxBlocks; ++i) {
    expand = product(expand, outer[i].size).value_or(kMaxBlocks + 1);
  }
  if (expand > kMaxBlocks) {
    return Status::NotSupported(what + " makes more than " + std::to_string(kMaxBlocks) +
                                " blocks of runs");
  }
  for (uint64_t e = 0; e < expand; ++e) {
    uint64_t source = static_cast<uint64_t>(p.source_offset);
    uint64_t dest = static_cast<uint64_t>(p.dest_offset);
    uint64_t rest = e;
    for (size_t i = outer.empty() ? 0 : outer.size() - 1; i-- > 0;) {
      const uint64_t index = rest % outer[i].size;
      rest /= outer[i].size;
      auto s = CheckedMulAdd(index, outer[i].source, source);
      auto d = CheckedMulAdd(index, outer[i].dest, dest);
      if (!s || !d || *s > numel || *d > shard_numel) return too_large;
      source = *s;
      dest = *d;
    }
    block.start = source;
    block.slice_start = dest;
    // The last run's end, inside the param and the shard.
    auto last = CheckedMulAdd(block.count - 1, block.period, block.start + block.length);
    auto slice_last =
        CheckedMulAdd(block.count - 1, block.slice_period, block.slice_start + block.length);
    if (block.start > numel || block.slice_start > shard_numel || !last || *last > numel ||
        !slice_last || *slice_last > shard_numel) {
      return Status::Corruption(what + " reaches past the param (" + std::to_string(numel) +
                                " elements) or its shard (" + std::to_string(shard_numel) + ")");
    }
    out->push_back(block);
  }
  return Status::OK();
}

// Whether the runs of `blocks`, on the side `start`/`period` pick, cover
// [0, total) exactly once: walked in order of their starts (a merge of the
// blocks' own increasing runs), no run held in memory.
bool Tiles(const std::vector<AffineBlock>& blocks, uint64_t total,
           const std::function<std::pair<uint64_t, uint64_t>(const AffineBlock&)>& side) {
  using Next = std::pair<uint64_t, size_t>;  // (run start, block), run index in `at`
  std::priority_queue<Next, std::vector<Next>, std::greater<>> queue;
  std::vector<uint64_t> at(blocks.size(), 0);
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b].length > 0 && blocks[b].count > 0) queue.push({side(blocks[b]).first, b});
  }
  uint64_t cursor = 0;
  while (!queue.empty()) {
    const auto [start, b] = queue.top();
    queue.pop();
    if (start != cursor) return false;  // a gap, or an element twice
    cursor += blocks[b].length;
    if (++at[b] < blocks[b].count) queue.push({start + side(blocks[b]).second, b});
  }
  return cursor == total;
}

}  // namespace

Result<AffineMaps> ReadAffineMaps(const Document& doc, NodeId affine_map) {
  AffineMaps maps;
  if (!doc.MappingItems(affine_map)) return Wrong("", "a dict");
  if (NodeId v = doc.Get(affine_map, "version"); v != pickle::kNoNode) {
    auto version = doc.AsInt(v);
    if (!version) return Wrong(".version", "an int");
    if (*version > kAffineMapVersion) {
      return Status::NotSupported("universal_checkpoint_info: affine_map version " +
                                  std::to_string(*version) + ", newer than the " +
                                  std::to_string(kAffineMapVersion) +
                                  " ucfs reads (DeepSpeed 0.19.8's converter refuses it too)");
    }
  }
  const NodeId params = doc.Get(affine_map, "params");
  if (params == pickle::kNoNode) return maps;
  auto items = doc.MappingItems(params);
  if (!items) return Wrong(".params", "a dict");
  for (const auto& [key, value] : *items) {
    auto pattern = doc.AsStr(key);
    if (!pattern) return Wrong(".params", "keyed by patterns");
    const std::string where = " entry '" + Printable(std::string(*pattern)) + "'";
    UCFS_ASSIGN_OR_RETURN(ParamAffineMap map, ReadEntry(doc, value, where));
    maps.params.emplace_back(std::string(*pattern),
                             std::make_shared<const ParamAffineMap>(std::move(map)));
  }
  return maps;
}

Result<std::vector<AffineBlock>> LayOutAffineMap(
    const ParamAffineMap& map, const std::vector<std::vector<int64_t>>& slice_shapes) {
  const size_t tp = slice_shapes.size();
  auto numel = Numel(map.logical_shape);
  if (!numel)
    return Status::Corruption("logical_shape " + ShapeString(map.logical_shape) + " is no shape");
  if (map.shards.size() != tp) {
    return Status::Corruption("the map lists " + std::to_string(map.shards.size()) +
                              " ranks, the checkpoint has " + std::to_string(tp) +
                              " tensor-parallel ranks");
  }
  std::vector<const ParamAffineMap::Shard*> by_rank(tp, nullptr);
  for (const auto& shard : map.shards) {
    if (shard.rank < 0 || static_cast<uint64_t>(shard.rank) >= tp || by_rank[shard.rank]) {
      return Status::Corruption("the map lists rank " + std::to_string(shard.rank) +
                                ", not one of ranks 0-" + std::to_string(tp - 1) + " once");
    }
    by_rank[shard.rank] = &shard;
  }
  std::vector<AffineBlock> taken;
  std::set<int64_t> written;  // source offsets of pieces taken (the converter's `written`)
  for (uint32_t t = 0; t < tp; ++t) {
    const ParamAffineMap::Shard& shard = *by_rank[t];
    if (shard.shape != slice_shapes[t]) {
      return Status::Corruption("the map gives rank " + std::to_string(t) + " a shard of shape " +
                                ShapeString(shard.shape) + ", but its saved slice is " +
                                ShapeString(slice_shapes[t]));
    }
    const uint64_t shard_numel = *Numel(shard.shape);  // a saved shape: bounded
    std::vector<AffineBlock> own;                      // every piece of this rank, for its tiling
    for (const AffinePiece& piece : shard.pieces) {
      if (std::find(piece.locations.begin(), piece.locations.end(), int64_t{t}) ==
          piece.locations.end()) {
        return Status::Corruption("rank " + std::to_string(t) + " lists a piece at source " +
                                  std::to_string(piece.source_offset) +
                                  " whose locations do not name it");
      }
      if (piece.scale != 1.0) {
        return Status::NotSupported("rank " + std::to_string(t) + " holds a piece scaled by " +
                                    std::to_string(piece.scale) +
                                    " (a row-parallel bias divided by T), which ucfs does not "
                                    "yet rebuild");
      }
      const size_t before = own.size();
      UCFS_RETURN_IF_ERROR(PieceBlocks(piece, t, *numel, shard_numel, &own));
      // A replicated piece comes from the first rank listing it; its
      // copies are skipped, as the converter skips them.
      if (piece.locations.size() > 1 && written.contains(piece.source_offset)) continue;
      written.insert(piece.source_offset);
      taken.insert(taken.end(), own.begin() + static_cast<std::ptrdiff_t>(before), own.end());
    }
    if (!Tiles(own, shard_numel, [](const AffineBlock& b) {
          return std::pair{b.slice_start, b.slice_period};
        })) {
      return Status::Corruption("rank " + std::to_string(t) + "'s pieces do not fill its shard " +
                                ShapeString(shard.shape) + " exactly once");
    }
  }
  if (!Tiles(taken, *numel, [](const AffineBlock& b) { return std::pair{b.start, b.period}; })) {
    return Status::Corruption("the pieces do not cover the param of shape " +
                              ShapeString(map.logical_shape) + " exactly once");
  }
  std::sort(taken.begin(), taken.end(),
            [](const AffineBlock& a, const AffineBlock& b) { return a.start < b.start; });
  return taken;
}

bool AffineLayoutIsCategory(const std::vector<AffineBlock>& blocks,
                            const std::vector<std::vector<int64_t>>& slice_shapes,
                            const std::vector<int64_t>& logical_shape,
                            std::optional<size_t> concat_dim) {
  // Where element `full` of the param is in rank t's slice by the rule.
  const auto expected = [&](uint64_t full, uint32_t t) -> std::optional<uint64_t> {
    if (!concat_dim) {
      return slice_shapes[t] == logical_shape ? std::optional<uint64_t>(full) : std::nullopt;
    }
    const size_t d = *concat_dim;
    const std::vector<int64_t>& slice = slice_shapes[t];
    if (d >= logical_shape.size() || slice.size() != logical_shape.size()) return std::nullopt;
    uint64_t before = 0;  // rows of dim d on ranks before t
    for (uint32_t r = 0; r < t; ++r) before += static_cast<uint64_t>(slice_shapes[r][d]);
    uint64_t rest = full, offset = 0, stride = 1;
    for (size_t i = logical_shape.size(); i-- > 0;) {
      const auto size = static_cast<uint64_t>(logical_shape[i]);
      uint64_t index = rest % size;
      rest /= size;
      if (i == d) {
        if (index < before || index - before >= static_cast<uint64_t>(slice[d])) {
          return std::nullopt;
        }
        index -= before;
      }
      offset += index * stride;
      stride *= static_cast<uint64_t>(slice[i]);
    }
    return offset;
  };
  for (const AffineBlock& b : blocks) {
    for (uint64_t i : {uint64_t{0}, b.count - 1}) {
      for (uint64_t e : {uint64_t{0}, b.length - 1}) {
        const uint64_t full = b.start + i * b.period + e;
        if (expected(full, b.rank) != b.slice_start + i * b.slice_period + e) return false;
      }
    }
  }
  return true;
}

}  // namespace ucfs
