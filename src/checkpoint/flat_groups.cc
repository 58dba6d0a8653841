// ZeRO-1/2's and BF16_Optimizer's optimizer files: each param group
// flattened and cut into equal partitions (single_partition_of_fp32_groups),
// the base optimizer's states of each (checkpoint_builder.h).
#include <string>
#include <vector>

#include "checkpoint/checkpoint_builder.h"
#include "checkpoint/unserved_layouts.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/partition.h"

namespace ucfs {

using pickle::Document;
using pickle::NodeId;

// One rank's optimizer file at ZeRO stage 1 or 2: per param group, its
// partition of the fp32 weights (single_partition_of_fp32_groups) and of
// the base optimizer's states (base_optimizer_state).
Status CheckpointBuilder::ReadFlatGroupOptimizerStates(uint32_t rank, const ParsedRankFile& tf) {
  const Document& doc = *tf.doc;
  const NodeId osd = doc.Get(doc.root(), "optimizer_state_dict");
  if (!doc.MappingItems(osd)) return tf.Error("no 'optimizer_state_dict' dict");
  UCFS_RETURN_IF_ERROR(ReadFlatGroupOptimizer(rank, tf, osd));
  UCFS_RETURN_IF_ERROR(CheckFlatGroupPartitionCounts(tf, osd));
  // Before anything sizes a partition: the paddings make the groups longer.
  UCFS_RETURN_IF_ERROR(ReadParamAlignment(rank, tf, osd));

  auto flats = doc.SequenceItems(doc.Get(osd, "single_partition_of_fp32_groups"));
  if (!flats) return tf.Error("no 'single_partition_of_fp32_groups' list");
  const size_t groups = c_.sub_groups_.size();
  if (flats->size() != groups) {
    return tf.Error(std::to_string(flats->size()) +
                    " single_partition_of_fp32_groups, but param_shapes in " +
                    std::string(BaseName(c_.files_.model_files[0])) + " has " +
                    std::to_string(groups) + " param groups");
  }
  if (groups == 0) return tf.Error("no trainable parameters: param_shapes is empty");

  // base_optimizer_state is torch's optimizer.state_dict() ({'state': {k:
  // ...}, 'param_groups': [...]}); with elastic_checkpoint a list of each
  // group's state, refused (unserved_layouts.h).
  const NodeId base = doc.Get(osd, "base_optimizer_state");
  if (doc.SequenceItems(base)) return RefuseElasticCheckpoint(tf.path());
  if (!doc.MappingItems(base)) return tf.Error("no 'base_optimizer_state' dict");
  const std::vector<NodeId> group_states = StatesByGroup(doc, doc.Get(base, "state"), groups);
  if (rank == 0) {
    UCFS_ASSIGN_OR_RETURN(TensorRef flat0,
                          tf.RequireTensor((*flats)[0], "single_partition_of_fp32_groups[0]"));
    DefineMasterState(flat0);
    PlaceWholeParamBuffers();
    const std::vector<bool> muon = MuonGroups(doc, base);
    c_.group_states_.resize(groups);
    for (size_t k = 0; k < groups; ++k) {
      const SubGroupInfo& g = c_.sub_groups_[k];
      UCFS_RETURN_IF_ERROR(DefineSubGroupStates(tf, k, group_states[k],
                                                FlatValidNumel(g.numel, c_.world_size(), 0),
                                                g.partition_numel, muon[k]));
    }
    UCFS_RETURN_IF_ERROR(AllocateSlots(tf));
  }
  return ReadFlatBuffers(rank, tf, *flats, "single_partition_of_fp32_groups", group_states);
}

// DeepSpeedZeroOptimizer keeps a Muon group's momentum as whole params
// (_is_muon_group: its params are use_muon, which the engine's split into
// 'muon-params' and 'adam-params' records in each param group).
std::vector<bool> CheckpointBuilder::MuonGroups(const Document& doc, NodeId base) const {
  std::vector<bool> muon(c_.sub_groups_.size(), false);
  if (auto groups = doc.SequenceItems(doc.Get(base, "param_groups"))) {
    for (size_t k = 0; k < groups->size() && k < muon.size(); ++k) {
      const NodeId use = doc.Get((*groups)[k], "use_muon");
      muon[k] = use != pickle::kNoNode && doc.node(use).kind == pickle::Kind::kBool &&
                doc.node(use).scalar != 0;
    }
  }
  return muon;
}

Status CheckpointBuilder::ReadFlatGroupOptimizer(uint32_t rank, const ParsedRankFile& tf,
                                                 NodeId osd) {
  const Document& doc = *tf.doc;
  // DeepSpeedZeroOptimizer records its stage; BF16_Optimizer does not (its
  // stage is the config's: 0 or 1).
  int stage = 0;
  std::string optimizer_class;
  if (const NodeId zs = doc.Get(osd, "zero_stage"); zs != pickle::kNoNode) {
    auto decoded = DecodeZeroStage(doc, zs);
    if (!decoded) return tf.Error("no readable 'zero_stage'");
    stage = *decoded;
    optimizer_class = "DeepSpeedZeroOptimizer";
    if (stage == 3) {
      return tf.Error("zero_stage is 3, but the tag directory has " + SharedModelFileName() +
                      " and no per-rank model states, as only ZeRO stages 0-2 save them");
    }
  } else {
    const NodeId zero_cfg = doc.Get(doc.Get(doc.root(), "ds_config"), "zero_optimization");
    stage = static_cast<int>(doc.AsInt(doc.Get(zero_cfg, "stage")).value_or(0));
    optimizer_class = "BF16_Optimizer";
  }
  if (rank == 0) {
    c_.zero_stage_ = stage;
    c_.optimizer_class_ = optimizer_class;
  } else if (optimizer_class != c_.optimizer_class_ || stage != c_.zero_stage_) {
    return tf.Error("written by " + optimizer_class + " at ZeRO stage " + std::to_string(stage) +
                    ", but rank 0's by " + c_.optimizer_class_ + " at stage " +
                    std::to_string(c_.zero_stage_) + ": files of different runs");
  }
  return Status::OK();
}

Status CheckpointBuilder::CheckFlatGroupPartitionCounts(const ParsedRankFile& tf, NodeId osd) {
  const Document& doc = *tf.doc;
  // One count per param group; expert (MoE) groups may be partitioned over
  // fewer ranks than the others.
  const NodeId pc = doc.Get(osd, "partition_count");
  std::vector<NodeId> counts;
  if (auto items = doc.SequenceItems(pc)) {
    counts = *items;
  } else if (doc.AsInt(pc)) {
    counts = {pc};
  }
  if (counts.empty()) return tf.Error("no 'partition_count'");
  for (NodeId id : counts) {
    auto count = doc.AsInt(id);
    if (!count) return tf.Error("partition_count holds " + doc.Repr(id, 40) + ", not a number");
    if (*count != static_cast<int64_t>(c_.world_size())) {
      return tf.Error("inconsistent world size: partition_count is " + doc.Repr(pc, 80) +
                      " but the tag directory has " + std::to_string(c_.world_size()) +
                      " ranks of optimizer files (param groups partitioned over fewer ranks, "
                      "as MoE expert groups are, are not supported)");
    }
  }
  return Status::OK();
}

}  // namespace ucfs
