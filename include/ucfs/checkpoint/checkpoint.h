// The ZeRO checkpoint model: what every rank file holds, and where.
//
// Checkpoint::Open parses the small parts of every rank file (zip
// directory, data.pkl) and builds the parameter table: for each parameter
// its shape, the flat buffer it lives in and its offset there, and for each
// rank and each per-element state (the fp32 master weights, exp_avg,
// exp_avg_sq, ...) the exact byte position of that rank's copy of the
// buffer. MapState answers "bytes [a, b) of state s of param p" as extents
// of the source files; it is the only place in ucfs where that arithmetic
// is done (with partition.h, which holds each stage's rule). No tensor data
// is read by Open except 0-dim scalars (the Adam step).
//
// Two layouts, one model:
//  - ZeRO-3 partitions every parameter on its own; a flat buffer is a
//    sub-group's per-rank slots (fp32_flat_groups), and the model states
//    are saved per rank.
//  - ZeRO-1 and -2 (DeepSpeedZeroOptimizer, and BF16_Optimizer) flatten a
//    whole param group and cut it into equal partitions; a flat buffer is
//    a param group (single_partition_of_fp32_groups), "sub-group" k is
//    param group k, and the whole model is in mp_rank_00_model_states.pt.
#ifndef UCFS_CHECKPOINT_CHECKPOINT_H_
#define UCFS_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/source_file.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/batch_size.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/checkpoint/state_mapper.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {

// A byte range of one source file.
struct Extent {
  uint32_t file = 0;  // index into Checkpoint::sources()
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const Extent&) const = default;
};

// How a checkpoint spreads its parameters over the ranks (partition.h).
enum class Partitioning : uint8_t {
  kPerParam,   // ZeRO-3
  kFlatGroup,  // ZeRO-1 and -2
};

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  // kPerParam: P = ceil(numel / world_size), this param's slot on each rank.
  // kFlatGroup: P of its group's flat buffer (the same for all its params).
  uint64_t partition_numel = 0;
  uint32_t sub_group = 0;
  uint32_t param_group = 0;
  // kPerParam: elements from the start of each rank's sub-group buffer.
  // kFlatGroup: elements from the start of the group's whole flat buffer
  // (all ranks' partitions in order).
  uint64_t offset = 0;
  // An expert param (expert_topology.h) is listed once per EP rank e, each
  // under its local name with family e: the same slot of other experts.
  uint32_t family = 0;
};

struct FrozenParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  // kPerParam: each rank's fragment (frozen_param_fragments); kFlatGroup:
  // numel, as the whole tensor is in the model states.
  uint64_t partition_numel = 0;
  DType dtype = DType::kFloat32;
};

// A flat buffer: a ZeRO-3 sub-group, or a ZeRO-1/2 param group.
struct SubGroupInfo {
  uint32_t param_group = 0;
  std::vector<uint32_t> params;  // indices into params()
  uint64_t partition_numel = 0;  // elements of each rank's flat buffer (with padding)
  // Its params' elements without the end padding; kFlatGroup: with the
  // alignment paddings between them (param_alignment()), as DeepSpeed
  // counts the group's length before padding it to 2·W.
  uint64_t numel = 0;
  // kFlatGroup: the ranks the buffer is cut over, in partition order
  // (partition k is members[k]'s): all W for a dense group; for an expert
  // group of EP size N (expert_parallel), the EDP group of EP rank
  // `family`, one buffer per family (expert_topology.h).
  // kPerParam: the same, each param cut over them by ZeRO-3's rule (empty:
  // over all W).
  std::vector<uint32_t> members;
  uint32_t expert_parallel = 1;
  uint32_t family = 0;
  // Which flat buffer of each optimizer file this is (an expert group's
  // families: the same buffer of their ranks' files).
  uint32_t file_buffer = 0;
  uint32_t partition_world() const { return static_cast<uint32_t>(members.size()); }
};

// A per-element optimizer state (or the fp32 master weights, state 0). The
// states are discovered per flat buffer ("state names are data"): Adam's
// exp_avg and exp_avg_sq, Muon's momentum_buffer, whatever the optimizer
// keeps; sub_group_states() says which a buffer has, and how they lie.
struct StateInfo {
  std::string name;  // "fp32" for the master weights, else the optimizer's key
  DType dtype = DType::kFloat32;
  bool requires_grad = false;  // as rank 0's tensor has it (the fp32 flats do)
};

// How a state of a flat buffer lies over the ranks.
enum class StateLayout : uint8_t {
  // Like the fp32 master weights: each rank's partition of the buffer.
  kPartition,
  // ZeRO-1/2 Muon's momentum_buffer: each rank holds the whole params its
  // partition touches, concatenated in flat order (whole_params.h).
  kWholeParams,
};

// Buffer `buffer` of rank `rank`'s optimizer file among `sub_groups`: the
// buffer's own sub-group, or its EP rank's family for an expert group, and
// the rank's partition of it (its place in `members`; the rank itself
// where they are empty). nullopt where no sub-group holds the rank.
struct RankBuffer {
  uint32_t sub_group = 0;
  uint32_t part = 0;
};
std::optional<RankBuffer> FindBufferOnRank(const std::vector<SubGroupInfo>& sub_groups,
                                           uint32_t buffer, uint32_t rank);

struct SubGroupState {
  uint32_t state = 0;  // index into Checkpoint::states()
  StateLayout layout = StateLayout::kPartition;
};

// A scalar optimizer state such as Adam's `step`.
struct ScalarState {
  std::string name;
  double value = 0;
  bool is_tensor = false;  // torch.optim keeps step as a 0-dim float tensor
  DType dtype = DType::kFloat32;
  Extent extent;  // is_tensor: its bytes, in rank 0's optimizer file
};

struct BufferInfo {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  Extent extent;  // in rank 0's model-states file
};

struct TiedParam {
  std::string alias;
  std::string canonical;
};

struct SuppliedUniversalInfo;

struct CheckpointOptions {
  std::optional<std::string> tag;
  // Where rank files are summarised from; nullptr reads them directly.
  TorchFileSource* source = nullptr;
  // universal_checkpoint_info laid over the saved one (merge_rules.h).
  std::shared_ptr<const SuppliedUniversalInfo> universal_info;
};

class Checkpoint : public StateMapper {
 public:
  static Result<Checkpoint> Open(Env& env, const std::string& path,
                                 const CheckpointOptions& options = {});
  // One shard group of a parallel checkpoint (ParallelCheckpointFiles), as
  // the data-parallel checkpoint it is; `files` must be complete
  // (CheckNoParallelFileMissing).
  static Result<Checkpoint> OpenShard(Env& env, CheckpointFiles files,
                                      TorchFileSource* source = nullptr);

  const CheckpointFiles& files() const { return files_; }
  // Optimizer files are sources 0..W-1, model-states files W..2W-1.
  const std::vector<SourceFile>& sources() const { return sources_; }
  uint32_t world_size() const { return files_.world_size; }
  int zero_stage() const { return zero_stage_; }
  Partitioning partitioning() const { return partitioning_; }
  // The DeepSpeed class that wrote the optimizer files:
  // "DeepSpeedZeroOptimizer_Stage3", "DeepSpeedZeroOptimizer" (stages 1, 2)
  // or "BF16_Optimizer" (bf16 at stages 0 and 1 with fp32 gradient
  // accumulation), which saves its partitions with their padding.
  const std::string& optimizer_class() const { return optimizer_class_; }
  bool IsBf16Optimizer() const { return optimizer_class_ == "BF16_Optimizer"; }
  const std::string& ds_version() const { return ds_version_; }
  // ds_config's optimizer.type ("Adam", "Muon", ...), empty where none.
  const std::string& optimizer_type() const { return optimizer_type_; }
  // The training (low-precision) dtype, from the module's placeholders.
  std::optional<DType> lp_dtype() const { return lp_dtype_; }
  std::optional<int64_t> global_steps() const { return global_steps_; }
  std::optional<uint64_t> configured_sub_group_size() const { return sub_group_size_; }
  uint32_t param_group_count() const { return param_group_count_; }
  // ZeRO-1/2's zero_optimization.round_robin_gradients: each group's params
  // were flattened in an order that depends on the world size
  // (param_shapes lists them in that order).
  bool round_robin_gradients() const { return round_robin_gradients_; }
  // ZeRO-1/2's zero_optimization.parameter_alignment: each param of a flat
  // buffer starts at a multiple of this many elements (partition.h), as the
  // optimizer files' param_alignment_paddings record; 1 when off.
  uint64_t param_alignment() const { return param_alignment_; }
  // ds_config's use_data_before_expert_parallelism (expert_topology.h).
  bool data_before_expert_parallelism() const { return data_before_expert_parallelism_; }
  // Whether the model states name AutoEP layers (ds_autoep_layers): its
  // expert params are [local experts, ...] stacks (expert-layouts.md §1);
  // otherwise expert groups are native MoE's, one param per local expert.
  bool autoep() const { return autoep_; }
  // The largest EP size of any expert group; 1 without experts.
  uint32_t expert_parallel() const;
  // The flat buffers each optimizer file lists (an expert group's is one of
  // them, of its family on each rank).
  uint32_t file_buffer_count() const { return file_buffer_count_; }
  // The sub-group that is buffer `buffer` of rank `rank`'s optimizer file
  // (FindBufferOnRank).
  std::optional<size_t> SubGroupOnRank(uint32_t buffer, uint32_t rank) const;
  // ds_config's train_batch_size, micro batch and accumulation as saved.
  const BatchConfig& batch() const { return batch_; }

  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<SubGroupInfo>& sub_groups() const { return sub_groups_; }
  // Every state of any flat buffer, "fp32" first, then in the order sub-group
  // 0's, 1's, ... state dicts first name them.
  const std::vector<StateInfo>& states() const { return states_; }
  // The states flat buffer k has ("fp32" first), in its state dict's order.
  const std::vector<SubGroupState>& sub_group_states(size_t k) const { return group_states_[k]; }
  // The same for the buffer param `param` lives in.
  const std::vector<SubGroupState>& StatesOf(size_t param) const;
  // Whether param `param`'s buffer has state `state`, and how it lies.
  std::optional<StateLayout> LayoutOf(size_t param, size_t state) const;
  // kWholeParams: elements of rank `rank`'s buffer of flat group k.
  uint64_t WholeParamsNumel(size_t k, uint32_t rank) const;
  // Rank 0's scalar states of each sub-group ([sub_group][i]).
  const std::vector<std::vector<ScalarState>>& scalar_states() const { return scalars_; }
  const std::vector<FrozenParamInfo>& frozen_params() const { return frozen_; }
  const std::vector<TiedParam>& tied_params() const { return tied_; }
  const std::vector<BufferInfo>& buffers() const { return buffers_; }

  std::optional<size_t> FindParam(std::string_view name) const;
  std::optional<size_t> FindState(std::string_view name) const;
  std::optional<size_t> FindFrozen(std::string_view name) const;

  // Source extents of bytes [begin, end) of the full, unpartitioned state
  // `state` of trainable param `param` (numel * element_size bytes; padding
  // excluded). Appends to *out, merging adjacent extents. A state param
  // `param`'s buffer lacks is NotFound, naming both.
  Status MapState(size_t param, size_t state, uint64_t begin, uint64_t end,
                  std::vector<Extent>* out) const;
  // A kWholeParams state: the ranks holding param `param` whole (its
  // partition's ranks, lowest first; MapState reads the first), and the
  // extents of rank `rank`'s copy.
  std::vector<uint32_t> WholeParamRanks(size_t param) const;
  Status MapWholeParamCopy(size_t param, size_t state, uint32_t rank, uint64_t begin, uint64_t end,
                           std::vector<Extent>* out) const;
  // How many of param `param`'s elements each rank holds, by rank.
  std::vector<uint64_t> ElementsPerRank(size_t param) const;
  // The same for a frozen parameter's value (its lp-dtype fragments in the
  // model-states files).
  Status MapFrozen(size_t frozen, uint64_t begin, uint64_t end, std::vector<Extent>* out) const;
  // As a StateMapper: its only shard group is 0.
  Status MapShardState(uint32_t shard, size_t param, size_t state, uint64_t begin, uint64_t end,
                       std::vector<Extent>* out) const override;
  Status MapShardFrozen(uint32_t shard, size_t frozen, uint64_t begin, uint64_t end,
                        std::vector<Extent>* out) const override;

  // What the user supplied of universal_checkpoint_info (null: none).
  const std::shared_ptr<const SuppliedUniversalInfo>& supplied_universal_info() const {
    return supplied_universal_info_;
  }

  // Rank 0's parsed data.pkl of the optimizer and model-states files.
  const pickle::Document& rank0_optim() const { return *rank0_optim_; }
  const pickle::Document& rank0_model() const { return *rank0_model_; }
  // Rank 0's files: where their storage records are.
  const TorchFileSummary& rank0_optim_summary() const { return *rank0_optim_summary_; }
  const TorchFileSummary& rank0_model_summary() const { return *rank0_model_summary_; }
  // How rank 0's optimizer file was written: files made from this
  // checkpoint are written the same way.
  const ContainerStyle& container_style() const { return container_style_; }

 private:
  // Where one rank's copy of one flat buffer begins.
  struct Slot {
    uint32_t file = 0;
    uint64_t offset = 0;  // byte offset of element 0 in the file
    bool present = false;
  };
  // Extents of bytes [begin, end) of a tensor whose elements `pieces`
  // place (partition.h); rank r's slot is
  // slots[r * slot_stride], the piece's slot_offset counted from element
  // `slot_element_offset` of it.
  Status MapPieces(uint32_t element_size, uint64_t slot_element_offset, const Slot* slots,
                   size_t slot_stride, uint64_t begin, uint64_t end,
                   const std::vector<RankPiece>& pieces, std::vector<Extent>* out) const;
  // Where elements [first, last) of a param or frozen param of `numel`
  // elements lie (partition.h): the stage's rule, in one place.
  // Flat groups: `members` (SubGroupInfo) turns partitions into ranks.
  std::vector<RankPiece> PlaceElements(uint64_t numel, uint64_t partition_numel,
                                       uint64_t flat_offset, uint64_t first, uint64_t last,
                                       const std::vector<uint32_t>* members = nullptr) const;
  friend class CheckpointBuilder;

  CheckpointFiles files_;
  std::vector<SourceFile> sources_;
  int zero_stage_ = 0;
  Partitioning partitioning_ = Partitioning::kPerParam;
  std::string optimizer_class_;
  std::string ds_version_;
  std::string optimizer_type_;
  std::optional<DType> lp_dtype_;
  std::optional<int64_t> global_steps_;
  std::optional<uint64_t> sub_group_size_;
  uint32_t param_group_count_ = 0;
  uint32_t file_buffer_count_ = 0;
  bool round_robin_gradients_ = false;
  std::optional<bool> parameter_alignment_config_;  // ds_config's, if it says
  uint64_t param_alignment_ = 1;
  bool data_before_expert_parallelism_ = false;
  bool autoep_ = false;
  BatchConfig batch_;
  std::vector<ParamInfo> params_;
  std::vector<SubGroupInfo> sub_groups_;
  std::vector<StateInfo> states_;
  std::vector<std::vector<SubGroupState>> group_states_;  // [sub_group]
  // Flat groups: whole_rank_numel_[k * world_size + r] (kWholeParams), and
  // each param's lowest rank holding it whole and its offset there.
  std::vector<uint64_t> whole_rank_numel_;
  std::vector<uint32_t> whole_first_rank_;
  std::vector<uint64_t> whole_offset_;
  std::vector<std::vector<ScalarState>> scalars_;
  std::vector<FrozenParamInfo> frozen_;
  std::vector<TiedParam> tied_;
  std::vector<BufferInfo> buffers_;
  // flat_slots_[(rank * sub_groups + k) * states + s]
  std::vector<Slot> flat_slots_;
  // frozen_slots_[frozen * world_size + rank]
  std::vector<Slot> frozen_slots_;
  std::shared_ptr<const pickle::Document> rank0_optim_;
  std::shared_ptr<const pickle::Document> rank0_model_;
  std::shared_ptr<const SuppliedUniversalInfo> supplied_universal_info_;
  std::shared_ptr<const TorchFileSummary> rank0_optim_summary_;
  std::shared_ptr<const TorchFileSummary> rank0_model_summary_;
  ContainerStyle container_style_;
};

// A scalar's value from its little-endian bytes (the Adam step) as a double.
Result<double> DecodeScalar(const char* bytes, DType dtype);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_CHECKPOINT_H_
