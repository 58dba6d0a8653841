// CheckpointBuilder: a Checkpoint made from its files, one part of the model
// at a time, in the order the parts depend on each other.
//
// Each part is read by the file named for what it reads, so that a reader
// for another layout is a new file beside them:
//   checkpoint_builder.cc  the rank files, their identities, the order of the steps
//   model_states.cc        rank 0's model states: params and their groups, frozen
//                          params (whole or per-rank fragments), buffers, tied aliases,
//                          the run's metadata
//   optimizer_states.cc    what every optimizer file holds: each rank's copy of each
//                          flat buffer and per-element state, and the scalar states
//   zero3_partitions.cc    ZeRO-3's optimizer files (fp32_flat_groups, sub-groups
//                          owned by torch param groups)
//   flat_groups.cc         ZeRO-1/2's and BF16_Optimizer's (single_partition_of_fp32_groups,
//                          base_optimizer_state)
//   param_alignment.cc     ZeRO-1/2's paddings between params (param_alignment_paddings)
//   expert_groups.cc       MoE expert groups: each EP rank's buffer, over its EDP group
// Private to src/checkpoint/.
#ifndef UCFS_CHECKPOINT_CHECKPOINT_BUILDER_H_
#define UCFS_CHECKPOINT_CHECKPOINT_BUILDER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/parsed_rank_file.h"
#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {

class CheckpointBuilder {
 public:
  // Flat buffers (ranks x sub-groups x states) or frozen fragments (frozen
  // params x ranks) a checkpoint may have: 16M, far beyond any real run
  // (4096 ranks x 1000 sub-groups x 4 states), and 400 MB of slots.
  static constexpr uint64_t kMaxSlots = uint64_t{1} << 24;
  // Per-element optimizer states (exp_avg, exp_avg_sq, ...) a checkpoint may
  // have: each is looked up by name in every rank's every sub-group.
  static constexpr size_t kMaxStates = 64;

  CheckpointBuilder(Env& env, TorchFileSource& source) : env_(env), source_(source) {}

  Result<Checkpoint> Build(const std::string& path, const CheckpointOptions& options);
  // From files found already (a shard group of a parallel checkpoint).
  Result<Checkpoint> BuildFrom(CheckpointFiles files);

 private:
  // --- the rank files (checkpoint_builder.cc)
  // Summarises source `index` and parses its pickle.
  Result<ParsedRankFile> Load(uint32_t index, const std::string& path);
  // Model files read for nothing else are still sources (passed through).
  Status AddUnreadModelFiles();
  bool flat_groups() const { return c_.partitioning_ == Partitioning::kFlatGroup; }
  // Adds a param's, frozen param's or buffer's elements to the model's
  // total, which must stay below 2^58 so that any sum of tensor sizes a view
  // makes (a consolidated file, an index's total_size) fits in 2^62 bytes.
  Status CountElements(const ParsedRankFile& tf, std::string_view name, uint64_t numel);
  bool HasParam(const std::string& name) const;
  bool IsBuffer(const std::string& name) const;
  bool IsTiedAlias(const std::string& name) const;

  // --- rank 0's model states (model_states.cc)
  // The parameter table's names and shapes, frozen and tied params, and
  // run metadata.
  Status ReadModelStates(const ParsedRankFile& tf);
  // param_shapes: the trainable params, one dict per flat buffer.
  Status ReadParamShapes(const ParsedRankFile& tf);
  Status ReadFrozenParamShapes(const ParsedRankFile& tf);
  Status ReadTiedParams(const ParsedRankFile& tf);
  // ds_version, global_steps, dp_world_size and the ZeRO config's settings.
  Status ReadRunMetadata(const ParsedRankFile& tf);
  // The training dtype, from the module's placeholders.
  Status ReadTrainingDtype(const ParsedRankFile& tf);
  // Persistent buffers are real tensors in rank 0's module.
  Status ReadBuffers(const ParsedRankFile& model0);
  // ZeRO-3: each rank's fragment of each frozen param.
  Status ReadFrozenFragments(const ParsedRankFile& model0);
  // ZeRO-1/2: frozen params whole, in rank 0's module.
  Status ReadWholeFrozenParams(const ParsedRankFile& model0);

  // --- every optimizer file's flat buffers (optimizer_states.cc)
  // State 0, the master weights, from rank 0's first flat buffer.
  void DefineMasterState(const TensorRef& flat);
  // Flat buffer k's states, from rank 0's state dict of it (`muon_group`: a
  // ZeRO-1/2 Muon group, whose momentum_buffer holds whole params).
  Status DefineSubGroupStates(const ParsedRankFile& tf, size_t k, pickle::NodeId state,
                              uint64_t min_numel, uint64_t max_numel, bool muon_group);
  // ZeRO-1/2: where each param lies whole on the ranks (whole_params.h).
  void PlaceWholeParamBuffers();
  Status AllocateSlots(const ParsedRankFile& tf);
  // Rank `rank`'s copy of every flat buffer: `flats[k]` holds the fp32
  // weights of buffer k, `group_states[k]` the optimizer's state of it.
  Status ReadFlatBuffers(uint32_t rank, const ParsedRankFile& tf,
                         const std::vector<pickle::NodeId>& flats, const std::string& flats_name,
                         const std::vector<pickle::NodeId>& group_states);
  Status SetSlot(const ParsedRankFile& tf, uint32_t rank, size_t k, SubGroupState s,
                 const TensorRef& t, const std::string& what);
  Status ReadScalars(const ParsedRankFile& tf, size_t k, pickle::NodeId group_state);
  // Flat buffer k's state holds no tensor but scalars and the states defined
  // for it.
  Status CheckNoOtherTensorStates(const ParsedRankFile& tf, size_t k, pickle::NodeId group_state);

  // --- ZeRO-3 (zero3_partitions.cc)
  Status ReadZero3OptimizerStates(uint32_t rank, const ParsedRankFile& tf);
  Status ReadParamGroups(const ParsedRankFile& tf, pickle::NodeId param_groups);

  // --- ZeRO-1/2 and BF16_Optimizer (flat_groups.cc)
  Status ReadFlatGroupOptimizerStates(uint32_t rank, const ParsedRankFile& tf);
  // Which optimizer at which stage wrote rank `rank`'s file.
  Status ReadFlatGroupOptimizer(uint32_t rank, const ParsedRankFile& tf, pickle::NodeId osd);
  // partition_count: which groups are expert groups, over which ranks.
  Status ReadFlatGroupPartitionCounts(uint32_t rank, const ParsedRankFile& tf, pickle::NodeId osd);

  // --- expert groups (expert_groups.cc)
  // Buffer k holds experts over EP size `ep`: cut over EP rank 0's EDP
  // group, its partitions sized for it.
  void MakeExpertGroup(size_t k, uint32_t ep);
  // A sub-group per further EP rank of each expert buffer (its family).
  void AddExpertFamilies();
  // The families' states are their buffer's (after DefineSubGroupStates).
  void CopyStatesToFamilies();
  // ZeRO-3: ds_zero_partition_groups, checked against the topology.
  Status ReadZero3PartitionGroups(uint32_t rank, const ParsedRankFile& tf, pickle::NodeId osd);
  // The flat buffers each optimizer file lists (flat groups: the param
  // groups), and which sub-group buffer `k` of rank `rank`'s file is.
  size_t FileBuffers() const;
  size_t BufferOnRank(size_t k, uint32_t rank) const;
  // Which param groups are Muon's (their saved param_group's use_muon).
  std::vector<bool> MuonGroups(const pickle::Document& doc, pickle::NodeId base) const;

  // --- ZeRO-1/2's parameter alignment (param_alignment.cc)
  // Rank `rank`'s param_alignment_paddings, checked against the run's
  // settings (rank 0) or rank 0's (the others); rank 0's laid into the
  // params' offsets and the groups' lengths.
  Status ReadParamAlignment(uint32_t rank, const ParsedRankFile& tf, pickle::NodeId osd);
  // Param group k's params' elements, and the padding after each as the
  // offsets hold it.
  std::vector<uint64_t> GroupNumels(size_t k) const;
  std::vector<uint64_t> GroupPaddings(size_t k) const;

  Env& env_;
  TorchFileSource& source_;
  Checkpoint c_;
  uint64_t total_elements_ = 0;  // CountElements
};

// The optimizer state of each of `groups` flat buffers: torch.optim keys the
// state of buffer k by k (the last entry of a key counts, as in a dict);
// kNoNode where a buffer has none.
std::vector<pickle::NodeId> StatesByGroup(const pickle::Document& doc, pickle::NodeId state,
                                          size_t groups);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_CHECKPOINT_BUILDER_H_
