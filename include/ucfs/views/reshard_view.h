// The reshard view: the checkpoint as DeepSpeed would have saved it with N
// data-parallel ranks, so an unmodified DeepSpeed resumes on N GPUs with a
// plain load_checkpoint().
//
//   ROOT/latest                  the tag
//   ROOT/<tag>/{bf16_}zero_pp_rank_{s}_mp_rank_00_optim_states.pt, s < N
//   ROOT/<tag>/zero_pp_rank_{s}_mp_rank_00_model_states.pt,        s < N
//   everything else of ROOT      passed through, the tag directory's
//                                other files too
//   per-rank files of the frameworks (rng_state_{r}.pth, ...) at N
//                                (view/rank_file_extras.h)
//
// ZeRO-1/2 (Partitioning::kFlatGroup) keep one mp_rank_00_model_states.pt
// (rank 0's, dp_world_size N) and re-cut each param group's flat buffer
// into N partitions with DeepSpeed's 2·N alignment: the fp32 weights as
// the optimizer saves them, every per-element state, group_paddings,
// partition_count and param_slice_mappings recomputed. At ZeRO-3:
//
// Each file is rank 0's pickle re-targeted at N: sub-groups re-split with
// P' = ceil(n/N) and the run's sub_group_size, flat buffers and every
// per-element optimizer state re-partitioned with zero padding,
// partition_count and dp_world_size N, param_shapes recomputed, frozen
// fragments re-partitioned, shared_params on rank 0 only. AutoEP's expert
// sub-groups are cut over each EP rank's EDP group at N (P' = ceil(n/D'),
// D' = N / EP, EP kept), and each rank's file says where it stands:
// ds_zero_partition_groups and ds_autoep_layers at N. Tensor bytes are
// mapped to the source shards exactly as in the universal view. The files
// are built lazily (LazyContent); rank 0's and rank N-1's are built at once,
// so a checkpoint the view cannot serve fails the mount, not a read.
#ifndef UCFS_VIEWS_RESHARD_VIEW_H_
#define UCFS_VIEWS_RESHARD_VIEW_H_

#include <memory>
#include <optional>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/consolidated_view.h"

namespace ucfs {

struct ReshardOptions {
  uint32_t world_size = 0;
  // The run's zero_optimization.sub_group_size when ds_config has none
  // (default: DeepSpeed's, 1e9).
  std::optional<uint64_t> sub_group_size;
  // Rank files are built on first use; at most this many bytes of them are
  // kept built (ContentCache; only their sizes are kept for good), so memory
  // does not grow with N. 1 keeps only the one built last.
  uint64_t cached_bytes = uint64_t{16} << 20;
  // The frameworks' per-rank files (rng_state_{r}.pth, ...) of new ranks
  // are copies of rank (r mod W)'s; else new ranks have none
  // (view/rank_file_extras.h).
  bool copy_rank_files = true;
  // <tag>_fp32/ beside the tag; nullopt for none (a writable mount without
  // --views: trainers count and parse what they find there).
  std::optional<ConsolidatedOptions> consolidated = ConsolidatedOptions{};
};

// DeepSpeed's partitioning of the same parameters at the new world size.
struct ReshardLayout {
  uint32_t world_size = 0;
  uint64_t sub_group_size = 0;
  // params index Checkpoint::params(). The first `file_buffers` are the
  // flat buffers of every rank's optimizer file; the rest are the expert
  // families of those that hold experts (SubGroupInfo::family, members at
  // N: FindBufferOnRank finds a rank's).
  std::vector<SubGroupInfo> sub_groups;
  uint32_t file_buffers = 0;
  std::vector<uint32_t> sub_group_of;  // per param
  std::vector<uint64_t> offset_of;     // per param: elements into its sub-group's flat buffer
  // Per new sub-group: the old sub-group whose scalar state (Adam's step) it carries.
  std::vector<uint32_t> old_sub_group;
};

Result<ReshardLayout> PlanReshard(const Checkpoint& checkpoint, const ReshardOptions& options);

// The checkpoint at a new data-parallel size, a tensor- and
// pipeline-parallel one's stages and tensor-parallel ranks kept: each
// shard group's rank files at N, named with its mp rank (ZeRO-1/2's
// mp_rank_NN_model_states.pt each with dp_world_size N), the layer files
// passed through (src/design/model-parallelism.md).
Result<std::unique_ptr<View>> BuildReshardView(Env& env,
                                               std::shared_ptr<const ParallelCheckpoint> checkpoint,
                                               const ReshardOptions& options);
// The same of a data-parallel checkpoint, the 1 x 1 x D grid.
Result<std::unique_ptr<View>> BuildReshardView(Env& env,
                                               std::shared_ptr<const Checkpoint> checkpoint,
                                               const ReshardOptions& options);

}  // namespace ucfs

#endif  // UCFS_VIEWS_RESHARD_VIEW_H_
