#include "view/merged_runs.h"

#include <memory>
#include <utility>

#include "ucfs/codec/torch_tensor.h"

namespace ucfs {
namespace {

StorageRun StateRun(uint32_t shard, size_t param, size_t state, uint64_t offset, uint64_t length) {
  StorageRun run;
  run.kind = StorageRun::Kind::kState;
  run.shard = shard;
  run.param = static_cast<uint32_t>(param);
  run.state = static_cast<uint32_t>(state);
  run.state_offset = offset;
  run.length = length;
  return run;
}

}  // namespace

Result<std::vector<StorageRun>> MergedStateRuns(const ParallelCheckpoint& c, const MergedParam& p,
                                                size_t s, uint64_t element_size) {
  const uint32_t tp = c.degrees().tp;
  const uint64_t slice_bytes = NumelOf(p.local_shape) * element_size;
  auto shard = [&](uint32_t t) { return p.stage * tp + t; };
  std::vector<StorageRun> runs;
  // At T = 1 every merge but SubparamShape's is the one slice (the mean of
  // one slice is the slice).
  const MergeRule rule =
      tp == 1 && p.merge.rule == MergeRule::kAverage ? MergeRule::kReplicated : p.merge.rule;
  switch (rule) {
    case MergeRule::kReplicated:
      runs.push_back(StateRun(shard(0), p.slices[0], s, 0, slice_bytes));
      break;
    case MergeRule::kTwoSubParamsDim0:
      for (uint64_t half = 0; half < 2; ++half) {
        for (uint32_t t = 0; t < tp; ++t) {
          runs.push_back(
              StateRun(shard(t), p.slices[t], s, half * slice_bytes / 2, slice_bytes / 2));
        }
      }
      break;
    case MergeRule::kConcat:
      if (p.merge.cat_dim == 0 || tp == 1) {
        for (uint32_t t = 0; t < tp; ++t) {
          runs.push_back(StateRun(shard(t), p.slices[t], s, 0, slice_bytes));
        }
      } else {
        auto il = std::make_shared<Interleave>();
        for (uint32_t t = 0; t < tp; ++t) {
          il->slices.push_back({shard(t), static_cast<uint32_t>(p.slices[t])});
        }
        il->state = static_cast<uint32_t>(s);
        il->chunk = element_size;
        for (size_t d = static_cast<size_t>(p.merge.cat_dim); d < p.local_shape.size(); ++d) {
          il->chunk *= static_cast<uint64_t>(p.local_shape[d]);
        }
        StorageRun run;
        run.kind = StorageRun::Kind::kInterleaved;
        run.length = slice_bytes * tp;
        run.interleave = std::move(il);
        runs.push_back(std::move(run));
      }
      break;
    case MergeRule::kAverage:
    case MergeRule::kSubParams:
      return Status::NotSupported("param '" + p.name + "': its universal_checkpoint_info merge (" +
                                  (p.merge.rule == MergeRule::kAverage
                                       ? "parameter_to_average_patterns"
                                       : "parameter_with_sub_params") +
                                  ") is not served yet");
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
  std::vector<UniversalKey> keys;
  if (merge.rule == MergeRule::kConcat) keys.push_back({"cat_dim", merge.cat_dim, false});
  if (merge.rule == MergeRule::kTwoSubParamsDim0) {
    keys.push_back({"cat_dim", 0, false});
    keys.push_back({"param_n_sub_params", 2, false});
  }
  if (merge.vocab) keys.push_back({"vocab_tensor", 1, true});
  return keys;
}

}  // namespace ucfs
