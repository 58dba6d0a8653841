// ZeRO-3's optimizer files: each rank's slot of every parameter, packed
// into sub-groups (fp32_flat_groups), the sub-groups owned by torch's param
// groups (checkpoint_builder.h).
#include <string>
#include <vector>

#include "checkpoint/checkpoint_builder.h"
#include "ucfs/checkpoint/checkpoint_layout.h"

namespace ucfs {

using pickle::Document;
using pickle::NodeId;

// One rank's optimizer file at ZeRO stage 3: its flat buffers and
// per-element states.
Status CheckpointBuilder::ReadZero3OptimizerStates(uint32_t rank, const ParsedRankFile& tf) {
  const Document& doc = *tf.doc;
  const NodeId osd = doc.Get(doc.root(), "optimizer_state_dict");
  if (!doc.MappingItems(osd)) return tf.Error("no 'optimizer_state_dict' dict");
  auto stage = DecodeZeroStage(doc, doc.Get(osd, "zero_stage"));
  if (!stage) return tf.Error("no readable 'zero_stage'");
  if (rank == 0) {
    c_.zero_stage_ = *stage;
    c_.optimizer_class_ = "DeepSpeedZeroOptimizer_Stage3";
  }
  if (*stage != 3) {
    return tf.Error("zero_stage is " + std::to_string(*stage) +
                    ", but the tag directory has a model-states file per rank, as only ZeRO "
                    "stage 3 saves them");
  }
  const NodeId pc = doc.Get(osd, "partition_count");
  std::optional<int64_t> partition_count = doc.AsInt(pc);
  if (!partition_count) {
    // ZeRO-1/2 style: one count per group, all equal.
    if (auto counts = doc.SequenceItems(pc); counts && !counts->empty()) {
      partition_count = doc.AsInt(counts->front());
    }
  }
  if (!partition_count) return tf.Error("no 'partition_count'");
  if (*partition_count != static_cast<int64_t>(c_.world_size())) {
    return tf.Error("inconsistent world size: partition_count is " +
                    std::to_string(*partition_count) + " but the tag directory has " +
                    std::to_string(c_.world_size()) + " ranks of optimizer files");
  }
  const NodeId inner = doc.Get(osd, "optimizer_state_dict");
  // The sub-groups' owners before AutoEP's families copy them.
  if (rank == 0) UCFS_RETURN_IF_ERROR(ReadParamGroups(tf, doc.Get(inner, "param_groups")));
  UCFS_RETURN_IF_ERROR(ReadZero3PartitionGroups(rank, tf, osd));
  if (rank == 0) AddExpertFamilies();
  auto flats = doc.SequenceItems(doc.Get(osd, "fp32_flat_groups"));
  if (!flats) return tf.Error("no 'fp32_flat_groups' list");
  const size_t groups = FileBuffers();
  if (flats->size() != groups) {
    return tf.Error(std::to_string(flats->size()) + " fp32_flat_groups, but param_shapes in " +
                    std::string(BaseName(c_.files_.model_files[0])) + " has " +
                    std::to_string(groups) + " sub-groups");
  }
  if (groups == 0) return tf.Error("no trainable parameters: param_shapes is empty");
  const std::vector<NodeId> group_states = StatesByGroup(doc, doc.Get(inner, "state"), groups);
  if (rank == 0) {
    UCFS_ASSIGN_OR_RETURN(TensorRef flat0, tf.RequireTensor((*flats)[0], "fp32_flat_groups[0]"));
    DefineMasterState(flat0);
    c_.group_states_.resize(c_.sub_groups_.size());
    for (size_t k = 0; k < groups; ++k) {
      UCFS_ASSIGN_OR_RETURN(
          TensorRef flat,
          tf.RequireTensor((*flats)[k], "fp32_flat_groups[" + std::to_string(k) + "]"));
      // Muon's momentum here is a flat partition like exp_avg (stage3.py).
      UCFS_RETURN_IF_ERROR(
          DefineSubGroupStates(tf, k, group_states[k], flat.numel(), flat.numel(), false));
    }
    CopyStatesToFamilies();
    UCFS_RETURN_IF_ERROR(AllocateSlots(tf));
  }
  return ReadFlatBuffers(rank, tf, *flats, "fp32_flat_groups", group_states);
}

Status CheckpointBuilder::ReadParamGroups(const ParsedRankFile& tf, NodeId param_groups) {
  const Document& doc = *tf.doc;
  auto groups = doc.SequenceItems(param_groups);
  std::vector<int> owner(c_.sub_groups_.size(), -1);
  if (groups) {
    for (size_t g = 0; g < groups->size(); ++g) {
      auto ids = doc.SequenceItems(doc.Get((*groups)[g], "params"));
      if (!ids) return tf.Error("param_groups[" + std::to_string(g) + "] has no 'params' list");
      for (NodeId id : *ids) {
        auto k = doc.AsInt(id);
        if (!k || *k < 0 || static_cast<size_t>(*k) >= owner.size() || owner[*k] >= 0) {
          return tf.Error("param_groups[" + std::to_string(g) + "]['params'] names sub-group " +
                          doc.Repr(id, 20) + ", which is out of range or listed twice");
        }
        owner[*k] = static_cast<int>(g);
      }
    }
    c_.param_group_count_ = static_cast<uint32_t>(groups->size());
  } else {
    c_.param_group_count_ = 1;
  }
  for (size_t k = 0; k < owner.size(); ++k) {
    if (owner[k] < 0) {
      if (groups) {
        return tf.Error("sub-group " + std::to_string(k) + " belongs to no param group");
      }
      owner[k] = 0;
    }
    c_.sub_groups_[k].param_group = static_cast<uint32_t>(owner[k]);
    for (uint32_t p : c_.sub_groups_[k].params)
      c_.params_[p].param_group = static_cast<uint32_t>(owner[k]);
  }
  return Status::OK();
}

}  // namespace ucfs
