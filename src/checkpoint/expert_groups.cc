// Expert (MoE) groups: which flat buffers hold experts, over which ranks,
// at ZeRO-1/2 (partition_count, flat_groups.cc) and at ZeRO-3 (AutoEP's
// ds_zero_partition_groups), and the buffer of each EP rank as a family of
// its own (checkpoint_builder.h, expert_topology.h).
#include <string>
#include <vector>

#include "checkpoint/checkpoint_builder.h"
#include "ucfs/checkpoint/expert_topology.h"
#include "ucfs/checkpoint/partition.h"

namespace ucfs {

using pickle::Document;
using pickle::NodeId;

namespace {

std::string RanksText(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (uint32_t r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return "[" + out + "]";
}

}  // namespace

void CheckpointBuilder::MakeExpertGroup(size_t k, uint32_t ep) {
  SubGroupInfo& sg = c_.sub_groups_[k];
  sg.members = ExpertTopology{c_.world_size(), ep, c_.data_before_expert_parallelism_}.Members(0);
  sg.expert_parallel = ep;
  const uint32_t d = sg.partition_world();
  if (flat_groups()) {
    sg.partition_numel = FlatPartitionNumel(sg.numel, d);
    for (uint32_t p : sg.params) c_.params_[p].partition_numel = sg.partition_numel;
    return;
  }
  // ZeRO-3: each param's slot is ceil(numel / D), packed in order (the
  // sizes fit: ReadParamShapes bounded them at W >= D).
  uint64_t offset = 0;
  for (uint32_t p : sg.params) {
    ParamInfo& param = c_.params_[p];
    param.partition_numel = PartitionNumel(param.numel, d);
    param.offset = offset;
    offset += param.partition_numel;
  }
  sg.partition_numel = offset;
}

// Each expert group's buffers of EP ranks 1..N-1: a sub-group per family,
// its params listed again under their local names (family 0's are the
// buffer's own). After the alignment paddings: the families share offsets.
void CheckpointBuilder::AddExpertFamilies() {
  for (size_t k = 0; k < FileBuffers(); ++k) {
    // By value: adding the families moves the sub-groups.
    const uint32_t ep = c_.sub_groups_[k].expert_parallel;
    if (ep == 1) continue;
    const ExpertTopology topology{c_.world_size(), ep, c_.data_before_expert_parallelism_};
    for (uint32_t e = 1; e < ep; ++e) {
      SubGroupInfo family = c_.sub_groups_[k];
      family.family = e;
      family.members = topology.Members(e);
      family.params.clear();
      const auto index = static_cast<uint32_t>(c_.sub_groups_.size());
      for (uint32_t p : c_.sub_groups_[k].params) {
        ParamInfo copy = c_.params_[p];
        copy.family = e;
        copy.sub_group = index;
        family.params.push_back(static_cast<uint32_t>(c_.params_.size()));
        c_.params_.push_back(std::move(copy));
      }
      c_.sub_groups_.push_back(std::move(family));
    }
  }
}

void CheckpointBuilder::CopyStatesToFamilies() {
  for (size_t k = FileBuffers(); k < c_.sub_groups_.size(); ++k) {
    c_.group_states_[k] = c_.group_states_[c_.sub_groups_[k].file_buffer];
  }
}

// stage3.py _zero3_partition_group_metadata (DeepSpeed 0.19.x, written where
// a sub-group holds AutoEP experts): per sub-group its partition_count,
// this rank's partition_rank, the partition_ranks, families
// (['replicated'] or ['autoep_expert']) and group_names (['ep_size_N']).
// Rank 0's decides the expert groups; every rank's must be what the
// topology makes of it.
Status CheckpointBuilder::ReadZero3PartitionGroups(uint32_t rank, const ParsedRankFile& tf,
                                                   NodeId osd) {
  const Document& doc = *tf.doc;
  const NodeId node = doc.Get(osd, "ds_zero_partition_groups");
  const bool absent = node == pickle::kNoNode || doc.node(node).kind == pickle::Kind::kNone;
  if (absent) {
    if (c_.expert_parallel() > 1) {
      return tf.Error(
          "no ds_zero_partition_groups, but rank 0's names expert sub-groups: files "
          "of different runs");
    }
    return Status::OK();
  }
  auto entries = doc.SequenceItems(node);
  if (!entries || entries->size() != FileBuffers()) {
    return tf.Error("ds_zero_partition_groups holds " + doc.Repr(node, 60) +
                    ", not one entry for " + "each of the " + std::to_string(FileBuffers()) +
                    " sub-groups");
  }
  const uint32_t w = c_.world_size();
  for (size_t k = 0; k < entries->size(); ++k) {
    const NodeId entry = (*entries)[k];
    const std::string where = "ds_zero_partition_groups[" + std::to_string(k) + "]";
    auto families = doc.SequenceItems(doc.Get(entry, "families"));
    auto names = doc.SequenceItems(doc.Get(entry, "group_names"));
    auto count = doc.AsInt(doc.Get(entry, "partition_count"));
    auto part = doc.AsInt(doc.Get(entry, "partition_rank"));
    auto ranks = doc.SequenceItems(doc.Get(entry, "partition_ranks"));
    if (!families || families->size() != 1 || !names || names->size() != 1 || !count || !part ||
        !ranks) {
      return tf.Error(where + " is " + doc.Repr(entry, 120) +
                      ", not one family's partition group as DeepSpeed 0.19.8 saves it");
    }
    const std::string family(doc.AsStr((*families)[0]).value_or(""));
    uint32_t ep = 1;
    if (family == "autoep_expert") {
      auto n = ExpertGroupSize(doc.AsStr((*names)[0]).value_or(""));
      if (!n || w % *n != 0 || static_cast<int64_t>(w / *n) != *count) {
        return tf.Error(where + " is an expert group named " + doc.Repr((*names)[0], 40) +
                        " cut over " + std::to_string(*count) + " of the " + std::to_string(w) +
                        " ranks, which no EP size 'ep_size_N' dividing them makes");
      }
      ep = *n;
    } else if (family != "replicated") {
      return tf.Error(where + " names family " + doc.Repr((*families)[0], 40) +
                      ", which ucfs does not know how DeepSpeed partitions");
    }
    if (rank == 0 && ep > 1) MakeExpertGroup(k, ep);
    if (c_.sub_groups_[k].expert_parallel != ep) {
      return tf.Error(where + " says sub-group " + std::to_string(k) + " is " + family +
                      ", but rank 0's says otherwise: files of different runs");
    }
    const ExpertTopology topology{w, ep, c_.data_before_expert_parallelism_};
    const std::vector<uint32_t> want = topology.Members(topology.EpRank(rank));
    std::vector<uint32_t> saved;
    for (NodeId r : *ranks) saved.push_back(static_cast<uint32_t>(doc.AsInt(r).value_or(-1)));
    if (saved != want || *part != topology.EdpRank(rank)) {
      return tf.Error(
          where + " says rank " + std::to_string(rank) + " is partition " + std::to_string(*part) +
          " of ranks " + RanksText(saved) + ", but at EP " + std::to_string(ep) + " of " +
          std::to_string(w) + " ranks DeepSpeed makes it partition " +
          std::to_string(topology.EdpRank(rank)) + " of " + RanksText(want) +
          (c_.data_before_expert_parallelism_ ? " (use_data_before_expert_parallelism)" : ""));
    }
  }
  return Status::OK();
}

}  // namespace ucfs
