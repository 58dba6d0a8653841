// ZeRO-1/2's and BF16_Optimizer's optimizer files: each param group
// flattened and cut into equal partitions (single_partition_of_fp32_groups),
// the base optimizer's states of each (checkpoint_builder.h).
#include <string>
#include <vector>

#include "checkpoint/checkpoint_builder.h"
#include "checkpoint/unserved_layouts.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/expert_topology.h"
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
  UCFS_RETURN_IF_ERROR(ReadFlatGroupPartitionCounts(rank, tf, osd));
  // Before anything sizes a partition: the paddings make the groups longer.
  UCFS_RETURN_IF_ERROR(ReadParamAlignment(rank, tf, osd));
  if (rank == 0) AddExpertFamilies();

  auto flats = doc.SequenceItems(doc.Get(osd, "single_partition_of_fp32_groups"));
  if (!flats) return tf.Error("no 'single_partition_of_fp32_groups' list");
  const size_t groups = c_.param_group_count_;
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
    c_.group_states_.resize(c_.sub_groups_.size());
    for (size_t k = 0; k < groups; ++k) {
      const SubGroupInfo& g = c_.sub_groups_[k];
      if (muon[k] && g.expert_parallel > 1) {
        return Status::NotSupported(tf.path() + ": param group " + std::to_string(k) +
                                    " is an expert group of Muon: ucfs does not know how "
                                    "DeepSpeed lays out whole-param momentum over experts");
      }
      UCFS_RETURN_IF_ERROR(DefineSubGroupStates(tf, k, group_states[k],
                                                FlatValidNumel(g.numel, g.partition_world(), 0),
                                                g.partition_numel, muon[k]));
    }
    // Every family of an expert group keeps its states.
    CopyStatesToFamilies();
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

// partition_count: per param group, the ranks it is cut over. W for a
// dense group; for an expert group of EP size N (named "ep_size_N" in the
// optimizer's param_groups) W / N, its EDP group's (expert_topology.h).
// Rank 0's file decides which groups are expert groups; every other rank's
// must say the same.
Status CheckpointBuilder::ReadFlatGroupPartitionCounts(uint32_t rank, const ParsedRankFile& tf,
                                                       NodeId osd) {
  const Document& doc = *tf.doc;
  const NodeId pc = doc.Get(osd, "partition_count");
  std::vector<NodeId> counts;
  if (auto items = doc.SequenceItems(pc)) {
    counts = *items;
  } else if (doc.AsInt(pc)) {
    counts = {pc};
  }
  if (counts.empty()) return tf.Error("no 'partition_count'");
  const uint32_t w = c_.world_size();
  const size_t groups = c_.param_group_count_;
  // BF16_Optimizer saves one count for all groups.
  if (counts.size() != groups && counts.size() != 1) {
    return tf.Error("partition_count is " + doc.Repr(pc, 80) + ", but param_shapes has " +
                    std::to_string(groups) + " param groups");
  }
  auto group_names =
      doc.SequenceItems(doc.Get(doc.Get(osd, "base_optimizer_state"), "param_groups"));
  for (size_t k = 0; k < groups; ++k) {
    const NodeId id = counts[counts.size() == 1 ? 0 : k];
    auto count = doc.AsInt(id);
    if (!count || *count <= 0) {
      return tf.Error("partition_count holds " + doc.Repr(id, 40) + ", not a number of ranks");
    }
    SubGroupInfo& sg = c_.sub_groups_[k];
    if (rank > 0) {
      if (*count != sg.partition_world()) {
        return tf.Error("partition_count is " + doc.Repr(pc, 80) +
                        ", but rank 0's says param group " + std::to_string(k) + " is cut over " +
                        std::to_string(sg.partition_world()) + " ranks: files of different runs");
      }
      continue;
    }
    if (*count == static_cast<int64_t>(w)) continue;
    // An expert group: named so by DeepSpeed's MoE param-group split.
    std::optional<uint32_t> ep;
    bool moe = false;
    if (group_names && k < group_names->size()) {
      ep = ExpertGroupSize(doc.AsStr(doc.Get((*group_names)[k], "name")).value_or(""));
      moe = doc.AsInt(doc.Get((*group_names)[k], "moe")).value_or(0) != 0;
    }
    if (!ep || !moe) {
      return tf.Error("inconsistent world size: partition_count is " + doc.Repr(pc, 80) +
                      " but the tag directory has " + std::to_string(w) +
                      " ranks of optimizer files, and param group " + std::to_string(k) +
                      " is no MoE expert group (base_optimizer_state's param_groups name none "
                      "'ep_size_N' with 'moe': True)");
    }
    if (w % *ep != 0 || static_cast<int64_t>(w / *ep) != *count) {
      return tf.Error("param group " + std::to_string(k) + " is the expert group 'ep_size_" +
                      std::to_string(*ep) + "', so DeepSpeed cuts it over " +
                      (w % *ep == 0 ? std::to_string(w / *ep) : std::string("W / N")) +
                      " ranks of the " + std::to_string(w) + ", but partition_count says " +
                      std::to_string(*count));
    }
    MakeExpertGroup(k, *ep);
  }
  return Status::OK();
}

}  // namespace ucfs
