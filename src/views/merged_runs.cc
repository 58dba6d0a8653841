#include "views/merged_runs.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>

#include "ucfs/codec/torch_tensor.h"
#include "views/average_slices.h"

namespace ucfs {
namespace {

// A slice's state run (param indices fit: Open bounds the params).
StorageRun SliceRun(uint32_t shard, size_t param, size_t state, uint64_t offset, uint64_t length) {
  return StateRun(shard, static_cast<uint32_t>(param), static_cast<uint32_t>(state), offset,
                  length);
}

// T slices' states concatenated along a dimension past the first: chunk 0
// of slice 0, chunk 0 of slice 1, ..., chunk 0 of slice T-1, chunk 1 of
// slice 0, ... (`chunk` bytes of a slice: its elements from that dimension
// on; `chunks` of them in each slice).
StorageRun InterleavedRun(const MergedParam& p, uint32_t tp, size_t s, uint64_t chunk,
                          uint64_t chunks, const std::function<uint32_t(uint32_t)>& shard) {
  auto gather = std::make_shared<Gather>();
  gather->state = static_cast<uint32_t>(s);
  for (uint32_t t = 0; t < tp; ++t) {
    gather->blocks.push_back({{t * chunk, tp * chunk, 0, chunk, chunks, chunk},
                              shard(t),
                              static_cast<uint32_t>(p.slices[t])});
  }
  StorageRun run;
  run.kind = StorageRun::Kind::kGathered;
  run.length = chunk * chunks * tp;
  run.gather = std::move(gather);
  return run;
}

// An affine map's blocks (elements) as the bytes of a gathered run.
StorageRun AffineRun(const MergedParam& p, size_t s, uint64_t element_size,
                     const std::function<uint32_t(uint32_t)>& shard) {
  auto gather = std::make_shared<Gather>();
  gather->state = static_cast<uint32_t>(s);
  for (const AffineBlock& b : *p.affine_blocks) {
    gather->blocks.push_back(
        {b.Scaled(element_size), shard(b.rank), static_cast<uint32_t>(p.slices[b.rank])});
  }
  StorageRun run;
  run.kind = StorageRun::Kind::kGathered;
  run.length = NumelOf(p.storage_shape) * element_size;
  run.gather = std::move(gather);
  return run;
}

// SubparamShape's merge (ds_to_universal.py merge_tp_slices): each slice
// viewed as the shape with the partition dimension split T ways; for each
// sub-param in turn, every slice's part of it concatenated along that
// dimension. With O the product of the dimensions before it, the merged
// bytes are: for each o < O, for each sub-param j, for each rank t, the
// part_j rows of slice t at row offset_j of its o-th block. Equal sub-params
// past dim 0 are one interleaved run (chunk j of block o is chunk o*J + j).
Status AddSubParamRuns(const MergedParam& p, uint32_t tp, size_t s, uint64_t element_size,
                       const std::function<uint32_t(uint32_t)>& shard,
                       std::vector<StorageRun>* runs) {
  const SubParamShape& sub = *p.merge.sub_param_shape;
  const auto dim = static_cast<size_t>(sub.partition_dim);
  // p.storage_shape is the merged shape (the name table checked the sizes
  // split over T and multiply out to the slice).
  uint64_t outer = 1, inner = element_size;
  for (size_t d = 0; d < dim; ++d) outer *= static_cast<uint64_t>(p.storage_shape[d]);
  for (size_t d = dim + 1; d < p.storage_shape.size(); ++d) {
    inner *= static_cast<uint64_t>(p.storage_shape[d]);
  }
  const std::vector<int64_t>& sizes = sub.shape[dim];
  uint64_t rows = 0;  // the slice's rows along the partition dimension
  for (int64_t size : sizes) rows += static_cast<uint64_t>(size) / tp;
  const bool equal =
      std::all_of(sizes.begin(), sizes.end(), [&](int64_t size) { return size == sizes.front(); });
  if (outer > 1 && equal) {
    const uint64_t chunk = static_cast<uint64_t>(sizes.front()) / tp * inner;
    runs->push_back(
        InterleavedRun(p, tp, s, chunk, chunk ? outer * rows * inner / chunk : 0, shard));
    return Status::OK();
  }
  constexpr uint64_t kMaxRuns = uint64_t{1} << 16;
  if (outer * sizes.size() * tp > kMaxRuns) {
    return Status::NotSupported("param '" + p.name + "': a SubparamShape of unequal sub-params " +
                                "past dim 0 makes more than " + std::to_string(kMaxRuns) + " runs");
  }
  for (uint64_t o = 0; o < outer; ++o) {
    uint64_t offset = 0;  // rows into the block
    for (int64_t size : sizes) {
      const uint64_t part = static_cast<uint64_t>(size) / tp;
      for (uint32_t t = 0; t < tp; ++t) {
        runs->push_back(
            SliceRun(shard(t), p.slices[t], s, (o * rows + offset) * inner, part * inner));
      }
      offset += part;
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<StorageRun>> MergedStateRuns(const ParallelCheckpoint& c, const MergedParam& p,
                                                size_t s, uint64_t element_size,
                                                const std::shared_ptr<SourceFiles>& files) {
  const uint32_t tp = c.degrees().tp;
  const uint64_t slice_bytes = NumelOf(p.local_shape) * element_size;
  const std::function<uint32_t(uint32_t)> shard = [&](uint32_t t) { return p.stage * tp + t; };
  std::vector<StorageRun> runs;
  if (!p.expert_families.empty()) {
    // Each EP rank's copy whole, in EP-rank order (dim 0).
    for (size_t family : p.expert_families) {
      runs.push_back(SliceRun(shard(0), family, s, 0, slice_bytes));
    }
    return runs;
  }
  switch (p.merge.rule) {
    case MergeRule::kReplicated:
      runs.push_back(SliceRun(shard(0), p.slices[0], s, 0, slice_bytes));
      break;
    case MergeRule::kTwoSubParamsDim0:
      for (uint64_t half = 0; half < 2; ++half) {
        for (uint32_t t = 0; t < tp; ++t) {
          runs.push_back(
              SliceRun(shard(t), p.slices[t], s, half * slice_bytes / 2, slice_bytes / 2));
        }
      }
      break;
    case MergeRule::kConcat:
      if (p.merge.cat_dim == 0 || tp == 1) {
        for (uint32_t t = 0; t < tp; ++t) {
          runs.push_back(SliceRun(shard(t), p.slices[t], s, 0, slice_bytes));
        }
      } else {
        uint64_t chunk = element_size;
        for (size_t d = static_cast<size_t>(p.merge.cat_dim); d < p.local_shape.size(); ++d) {
          chunk *= static_cast<uint64_t>(p.local_shape[d]);
        }
        runs.push_back(InterleavedRun(p, tp, s, chunk, chunk ? slice_bytes / chunk : 0, shard));
      }
      break;
    case MergeRule::kAffine:
      runs.push_back(AffineRun(p, s, element_size, shard));
      break;
    case MergeRule::kAverage: {
      if (files == nullptr || element_size != sizeof(float)) {
        return Status::NotSupported("param '" + p.name +
                                    "': averaged (parameter_to_average_patterns) only in float32 "
                                    "states of a view's own files");
      }
      std::vector<AverageSlices::Slice> slices;
      for (uint32_t t = 0; t < tp; ++t) slices.push_back({shard(t), p.slices[t]});
      auto mean = std::make_shared<AverageSlices>(c, files, std::move(slices), s,
                                                  NumelOf(p.local_shape), p.name);
      const uint64_t length = mean->size();
      runs.push_back(ComputedRun(std::move(mean), length));
      break;
    }
    case MergeRule::kSubParams:
      UCFS_RETURN_IF_ERROR(AddSubParamRuns(p, tp, s, element_size, shard, &runs));
      break;
  }
  return runs;
}

std::vector<StorageRun> FirstBytesOf(std::vector<StorageRun> runs, uint64_t length) {
  uint64_t at = 0;
  size_t kept = 0;
  while (kept < runs.size() && at < length) {
    StorageRun& run = runs[kept++];
    if (run.length > length - at) run.length = length - at;
    at += run.length;
  }
  runs.resize(kept);
  return runs;
}

std::vector<UniversalKey> UniversalKeysOf(const ParamMerge& merge) {
  // An affine map's file is {'param': ...} and at most the vocabulary's key:
  // the converter writes no category key for it.
  std::vector<UniversalKey> keys;
  if (merge.rule == MergeRule::kConcat) keys.push_back({"cat_dim", merge.cat_dim, false, nullptr});
  if (merge.rule == MergeRule::kTwoSubParamsDim0) {
    keys.push_back({"cat_dim", 0, false, nullptr});
    keys.push_back({"param_n_sub_params", 2, false, nullptr});
  }
  if (merge.rule == MergeRule::kSubParams) {
    // The SubparamShape dataclass the converter built from the saved dict
    // (SubparamShape(**s)): its fields in their order, the values as saved.
    const auto sub = std::make_shared<const SubParamShape>(*merge.sub_param_shape);
    keys.push_back({"sub_param_shape", 0, false, [sub](pickle::Document& doc) {
                      std::vector<pickle::NodeId> copied;
                      pickle::Node obj;
                      obj.kind = pickle::Kind::kNewObj;
                      obj.a =
                          doc.Global("deepspeed.checkpoint.universal_checkpoint", "SubparamShape");
                      obj.b = doc.AddTuple({});
                      obj.state = doc.AddDict({
                          doc.AddStr("patterns"),
                          doc.CopyFrom(*sub->saved, sub->saved_patterns, &copied),
                          doc.AddStr("shape"),
                          doc.CopyFrom(*sub->saved, sub->saved_shape, &copied),
                          doc.AddStr("partition_dim"),
                          doc.CopyFrom(*sub->saved, sub->saved_partition_dim, &copied),
                      });
                      return doc.Add(std::move(obj));
                    }});
  }
  if (merge.vocab) keys.push_back({"vocab_tensor", 1, true, nullptr});
  return keys;
}

}  // namespace ucfs
