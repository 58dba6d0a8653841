// ParallelCheckpoint: a tensor-, pipeline- and data-parallel checkpoint as
// the grid of data-parallel checkpoints it is, and the name table the
// universal layout is made from (src/design/model-parallelism.md).
//
// Each shard group (p, t) opens as a Checkpoint (Checkpoint::OpenShard),
// whose params are the TP-local slices partitioned over D ranks by the
// stage's rule. The table has one entry per universal param name, in the
// order of the stages' param_shapes: where its T slices are (the lowest
// stage holding it: a tied embedding's later copies are skipped, as the
// converter skips pipeline_replicated ones), the merge rule MergeRules
// decided for it, and the shapes the merge gives. Everything is decided
// here, once, at open: a view only lays out what the table says.
#ifndef UCFS_CHECKPOINT_PARALLEL_CHECKPOINT_H_
#define UCFS_CHECKPOINT_PARALLEL_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/affine_map.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/checkpoint/state_mapper.h"

namespace ucfs {

struct MergedParam {
  std::string name;
  ParamMerge merge;
  uint32_t stage = 0;  // p whose slices are merged
  // By tensor-parallel rank t: the param's index in the params() of shard
  // group stage * T + t.
  std::vector<size_t> slices;
  std::vector<int64_t> local_shape;  // every slice's (they agree but under an affine map)
  // The merged tensor's storage (a vocabulary's padded rows included), and
  // the shape the universal file gives it (a vocabulary cut to
  // original_vocab_size rows, which the storage keeps, as torch.save keeps
  // a sliced tensor's whole storage).
  std::vector<int64_t> storage_shape;
  std::vector<int64_t> shape;
  // Later stages holding a copy (a tied embedding): not merged.
  std::vector<uint32_t> copies_on;
  // kAffine: the runs of elements, by rank (LayOutAffineMap), that make the
  // merged storage.
  std::shared_ptr<const std::vector<AffineBlock>> affine_blocks;
  // An expert param (expert_topology.h; T = 1): its copy in each EP rank's
  // buffer, by EP rank (params of shard group `stage`), whose whole states
  // concatenate along dim 0 into the universal tensor: AutoEP's
  // [num_experts, ...] by global expert, native MoE's local param stacked
  // [EP, ...]. `ep_num_experts` as the universal file records it (dim 0).
  std::vector<size_t> expert_families;
  int64_t ep_num_experts = 0;
};

// DeepSpeed >= 0.19.5 saves the grid's degrees in every model-states file
// (`checkpoint_parallel_dimensions`: {'pp_degree': P, 'tp_degree': T}).
// Corruption naming `file` where they are not the degrees the file names
// make (a pipeline stage's or a tensor-parallel rank's files all missing
// look like a smaller grid), or are not ints; OK where absent.
Status CheckParallelDimensions(const ParallelDegrees& degrees, const pickle::Document& model_states,
                               const std::string& file);

class ParallelCheckpoint : public StateMapper {
 public:
  // The tag DiscoverCheckpoint would find, every file of its grid present,
  // each shard group opened. The name table is made too; why it could not
  // be is merge_status(): the shard groups still serve a view at a new D,
  // which needs no merge.
  static Result<ParallelCheckpoint> Open(Env& env, const std::string& path,
                                         const CheckpointOptions& options = {});
  // The same for a grid listed already (ListParallelCheckpointFiles: the
  // callers that list to tell a grid from a data-parallel checkpoint do not
  // read a tag directory of thousands of files twice); options.tag unused.
  static Result<ParallelCheckpoint> OpenListed(Env& env, ParallelCheckpointFiles files,
                                               const CheckpointOptions& options = {});

  // A data-parallel checkpoint as the 1 × 1 × D grid it is: a run saved by
  // Megatron-DeepSpeed at T = 1 carries universal_checkpoint_info too, and
  // the converter merges its params by those rules (a vocabulary cut, a
  // replicated param without cat_dim).
  static ParallelCheckpoint OfDataParallel(std::shared_ptr<const Checkpoint> checkpoint);
  // The same, shared, for the views that keep it.
  static std::shared_ptr<const ParallelCheckpoint> SharedOfDataParallel(
      std::shared_ptr<const Checkpoint> checkpoint);
  // The grid of `files` from its shard groups, opened already (by mp rank;
  // `ucfs verify` opens them one by one, to report each one's problems).
  static ParallelCheckpoint FromShards(ParallelCheckpointFiles files,
                                       std::vector<std::shared_ptr<const Checkpoint>> shards,
                                       std::shared_ptr<const SuppliedUniversalInfo> supplied);

  const ParallelCheckpointFiles& files() const { return files_; }
  const ParallelDegrees& degrees() const { return files_.degrees; }
  // Shard group m = p * T + t.
  const Checkpoint& shard(uint32_t m) const { return *shards_[m]; }
  // The universal name table (empty unless merge_status() is OK).
  const std::vector<MergedParam>& params() const { return params_; }
  // NotSupported where no universal layout can be made (T > 1 without
  // universal_checkpoint_info: how its slices merge is unknown); Corruption
  // naming the file where the shards disagree on a param, and for patterns
  // no param used (ds_to_universal.py's strict check).
  const Status& merge_status() const { return merge_status_; }
  // Why the table would merge wrongly for a load at another T
  // (UnsafeAtAnotherTensorDegree), or nullopt.
  const std::optional<std::string>& unsafe_at_another_tensor_degree() const { return unsafe_; }
  // Whether the run saved universal_checkpoint_info or --universal-info
  // supplied it, readable or not (merge_status() says).
  bool has_universal_info() const { return has_universal_info_; }
  // What --universal-info supplied (null: the saved info alone).
  const std::shared_ptr<const SuppliedUniversalInfo>& supplied_universal_info() const {
    return supplied_info_;
  }
  // The rules the table was decided by (merge_status() OK).
  const MergeRules& rules() const { return *rules_; }
  // Every shard group's sources, shard 0's first: shard m's source i is
  // source source_base(m) + i.
  const std::vector<SourceFile>& sources() const { return sources_; }
  uint32_t source_base(uint32_t m) const { return source_base_[m]; }

  // Through shard group `shard`, its extents renumbered into sources().
  Status MapShardState(uint32_t shard, size_t param, size_t state, uint64_t begin, uint64_t end,
                       std::vector<Extent>* out) const override;
  Status MapShardFrozen(uint32_t shard, size_t frozen, uint64_t begin, uint64_t end,
                        std::vector<Extent>* out) const override;

 private:
  ParallelCheckpointFiles files_;
  std::vector<std::shared_ptr<const Checkpoint>> shards_;
  std::shared_ptr<MergeRules> rules_;
  std::vector<MergedParam> params_;
  std::vector<SourceFile> sources_;
  std::vector<uint32_t> source_base_;
  Status merge_status_;
  std::shared_ptr<const SuppliedUniversalInfo> supplied_info_;
  std::optional<std::string> unsafe_;
  bool has_universal_info_ = false;

  Status MakeNameTable();
};

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_PARALLEL_CHECKPOINT_H_
