// What every optimizer file holds, whichever optimizer wrote it: each
// rank's copy of each flat buffer and of its per-element states, and rank
// 0's scalar states (checkpoint_builder.h).
#include <algorithm>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_builder.h"
#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/checkpoint/whole_params.h"

namespace ucfs {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

std::vector<NodeId> StatesByGroup(const Document& doc, NodeId state, size_t groups) {
  std::vector<NodeId> by_group(groups, pickle::kNoNode);
  if (auto items = doc.MappingItems(state)) {
    for (const auto& [key, value] : *items) {
      auto k = doc.AsInt(key);
      if (k && *k >= 0 && static_cast<uint64_t>(*k) < groups) by_group[*k] = value;
    }
  }
  return by_group;
}

void CheckpointBuilder::DefineMasterState(const TensorRef& flat) {
  c_.states_.push_back({"fp32", flat.dtype, flat.requires_grad});
}

// Flat buffer k's states, from rank 0's state dict of it: "fp32", then every
// 1-D state tensor of a partition's length (between min_numel and
// max_numel elements), in the optimizer's order; in a Muon group at ZeRO-1/2
// also its momentum_buffer, whole params (whole_params.h). Another tensor is
// left for CheckNoOtherTensorStates to refuse, by name.
Status CheckpointBuilder::DefineSubGroupStates(const ParsedRankFile& tf, size_t k, NodeId state,
                                               uint64_t min_numel, uint64_t max_numel,
                                               bool muon_group) {
  std::vector<SubGroupState>& mine = c_.group_states_[k];
  mine.push_back({0, StateLayout::kPartition});
  if (state == pickle::kNoNode) return Status::OK();
  const Document& doc = *tf.doc;
  auto entries = doc.MappingItems(state);
  if (!entries) return tf.Error("optimizer state[" + std::to_string(k) + "] is not a dict");
  for (const auto& [name, v] : *entries) {
    auto n = doc.AsStr(name);
    if (!n) continue;
    UCFS_ASSIGN_OR_RETURN(auto t, tf.MatchTensor(v));
    if (!t || t->shape.size() != 1) continue;
    StateLayout layout = StateLayout::kPartition;
    if (muon_group && *n == "momentum_buffer") {
      // DeepSpeedZeroOptimizer's _muon_momentum_buffer: whatever its length
      // (SetSlot checks it on every rank).
      layout = StateLayout::kWholeParams;
    } else if (t->numel() < min_numel || t->numel() > max_numel) {
      continue;
    }
    std::optional<size_t> s = c_.FindState(*n);
    if (!s || *s == 0) {
      // Adam has 2, the optimizers DeepSpeed knows at most a few; every
      // rank and sub-group is then searched for each by name.
      if (c_.states_.size() > kMaxStates) {
        return tf.Error("optimizer state[" + std::to_string(k) + "] has more than " +
                        std::to_string(kMaxStates) + " per-element states (of all its buffers)");
      }
      s = c_.states_.size();
      c_.states_.push_back({std::string(*n), t->dtype, t->requires_grad});
    }
    // A key pickled twice in one dict is one state (the last value counts).
    if (std::none_of(mine.begin(), mine.end(),
                     [&](const SubGroupState& g) { return g.state == *s; })) {
      mine.push_back({static_cast<uint32_t>(*s), layout});
    }
  }
  return Status::OK();
}

// Where each param of a flat group lies whole on the ranks, for the states
// laid out kWholeParams (Muon's momentum at ZeRO-1/2).
void CheckpointBuilder::PlaceWholeParamBuffers() {
  const uint32_t w = c_.world_size();
  c_.whole_rank_numel_.assign(c_.sub_groups_.size() * w, 0);
  c_.whole_first_rank_.assign(c_.params_.size(), 0);
  c_.whole_offset_.assign(c_.params_.size(), 0);
  for (size_t k = 0; k < c_.sub_groups_.size(); ++k) {
    const SubGroupInfo& sg = c_.sub_groups_[k];
    std::vector<uint32_t> order = sg.params;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return c_.params_[a].offset < c_.params_[b].offset;
    });
    std::vector<uint64_t> offsets, numels;
    for (uint32_t p : order) {
      offsets.push_back(c_.params_[p].offset);
      numels.push_back(c_.params_[p].numel);
    }
    WholeParamsLayout l = PlaceWholeParams(sg.partition_numel, w, offsets, numels);
    std::copy(l.rank_numel.begin(), l.rank_numel.end(), c_.whole_rank_numel_.begin() + k * w);
    for (size_t i = 0; i < order.size(); ++i) {
      c_.whole_first_rank_[order[i]] = l.first_rank[i];
      c_.whole_offset_[order[i]] = l.offset[i];
    }
  }
}

// One slot per rank, flat buffer and state: bounded before allocating, as
// every count comes from the files.
Status CheckpointBuilder::AllocateSlots(const ParsedRankFile& tf) {
  const size_t groups = c_.sub_groups_.size();
  auto slots = CheckedMul<uint64_t>(c_.world_size(), groups);
  if (slots) slots = CheckedMul<uint64_t>(*slots, c_.states_.size(), kMaxSlots);
  if (!slots) {
    return tf.Error(std::to_string(groups) + " flat buffers of " +
                    std::to_string(c_.states_.size()) + " states at world size " +
                    std::to_string(c_.world_size()) + " are more than " +
                    std::to_string(kMaxSlots) + " in all");
  }
  c_.flat_slots_.resize(*slots);
  c_.scalars_.resize(groups);
  return Status::OK();
}

Status CheckpointBuilder::ReadFlatBuffers(uint32_t rank, const ParsedRankFile& tf,
                                          const std::vector<NodeId>& flats,
                                          const std::string& flats_name,
                                          const std::vector<NodeId>& group_states) {
  const Document& doc = *tf.doc;
  for (size_t i = 0; i < FileBuffers(); ++i) {
    // Buffer i of this file is sub-group k: its own, or its EP rank's family.
    const size_t k = BufferOnRank(i, rank);
    const std::string where = flats_name + "[" + std::to_string(i) + "]";
    UCFS_ASSIGN_OR_RETURN(TensorRef flat, tf.RequireTensor(flats[i], where));
    UCFS_RETURN_IF_ERROR(SetSlot(tf, rank, k, {0, StateLayout::kPartition}, flat, where));
    const NodeId state = group_states[i];
    for (const SubGroupState& gs : c_.group_states_[k]) {
      if (gs.state == 0) continue;
      const std::string& name = c_.states_[gs.state].name;
      const std::string what =
          "optimizer state[" + std::to_string(i) + "]['" + Printable(name) + "']";
      const NodeId v = doc.Get(state, name);
      if (v == pickle::kNoNode) {
        // A rank whose partition touches no param of a Muon group never
        // makes its momentum buffer.
        if (gs.layout == StateLayout::kWholeParams && c_.WholeParamsNumel(k, rank) == 0) continue;
        return tf.Error("no " + what);
      }
      UCFS_ASSIGN_OR_RETURN(TensorRef t, tf.RequireTensor(v, what));
      UCFS_RETURN_IF_ERROR(SetSlot(tf, rank, k, gs, t, what));
    }
    UCFS_RETURN_IF_ERROR(CheckNoOtherTensorStates(tf, k, state));
    if (rank == 0) UCFS_RETURN_IF_ERROR(ReadScalars(tf, k, state));
  }
  // Rank 0 holds family 0 of every expert group: the others' scalars (the
  // step every rank takes alike) are its.
  for (size_t k = FileBuffers(); rank == 0 && k < c_.sub_groups_.size(); ++k) {
    c_.scalars_[k] = c_.scalars_[c_.sub_groups_[k].file_buffer];
  }
  return Status::OK();
}

size_t CheckpointBuilder::FileBuffers() const { return c_.file_buffer_count_; }

size_t CheckpointBuilder::BufferOnRank(size_t k, uint32_t rank) const {
  return c_.SubGroupOnRank(static_cast<uint32_t>(k), rank).value_or(k);
}

// A state tensor that is neither a scalar nor one of the states of its flat
// buffer (exp_avg, momentum_buffer, ...) lies in a way ucfs does not know,
// so it cannot be cut at another world size or merged per param. Served as
// rank 0 saved it, every rank would resume with wrong state: refused, naming
// the file, the group and the key.
Status CheckpointBuilder::CheckNoOtherTensorStates(const ParsedRankFile& tf, size_t k,
                                                   NodeId group_state) {
  const Document& doc = *tf.doc;
  auto entries = doc.MappingItems(group_state);
  if (!entries) return Status::OK();
  for (const auto& [name, v] : *entries) {
    auto n = doc.AsStr(name);
    const std::vector<SubGroupState>& mine = c_.group_states_[k];
    const bool known = n && std::any_of(mine.begin(), mine.end(), [&](const SubGroupState& s) {
                         return s.state != 0 && c_.states_[s.state].name == *n;
                       });
    if (known) continue;
    UCFS_ASSIGN_OR_RETURN(auto t, tf.MatchTensor(v));
    if (!t || t->shape.empty()) continue;  // a scalar (Adam's step), or no tensor
    const SubGroupInfo& sg = c_.sub_groups_[k];
    std::string states;
    for (const SubGroupState& s : mine) {
      if (s.state == 0) continue;
      states += (states.empty() ? "" : ", ") + Printable(c_.states_[s.state].name);
    }
    return Status::NotSupported(
        tf.path() + ": optimizer state[" + std::to_string(k) + "]['" +
        Printable(n ? std::string(*n) : doc.Repr(name, 40)) + "'] (" +
        (flat_groups() ? "param group " + std::to_string(k)
                       : "sub-group " + std::to_string(k) + " of param group " +
                             std::to_string(sg.param_group)) +
        ") is a tensor of shape " + ShapeString(t->shape) +
        " that ucfs does not know how to partition: the states it knows of this buffer "
        "(partitions of " +
        std::to_string(sg.partition_numel) + " elements, or Muon's whole params) are " +
        (states.empty() ? std::string("none") : states) +
        ". Refused rather than copied: every rank would resume with state that is not "
        "its own");
  }
  return Status::OK();
}

Status CheckpointBuilder::SetSlot(const ParsedRankFile& tf, uint32_t rank, size_t k,
                                  SubGroupState gs, const TensorRef& t, const std::string& what) {
  const SubGroupInfo& sg = c_.sub_groups_[k];
  const size_t s = gs.state;
  if (gs.layout == StateLayout::kWholeParams) {
    const uint64_t whole = c_.WholeParamsNumel(k, rank);
    if (t.shape.size() != 1 || t.numel() != whole || !t.contiguous()) {
      return tf.Error(what + " has shape " + ShapeString(t.shape) +
                      ", but Muon's momentum at ZeRO-1/2 holds the whole params rank " +
                      std::to_string(rank) + "'s partition of param group " + std::to_string(k) +
                      " touches: " + std::to_string(whole) + " elements");
    }
  } else if (flat_groups()) {
    // A partition may be saved without its padding (DeepSpeedZeroOptimizer
    // drops it from the fp32 weights; elastic checkpoints from every
    // state), never without a valid element.
    const uint32_t part =
        FindBufferOnRank(c_.sub_groups_, sg.file_buffer, rank).value_or(RankBuffer{}).part;
    const uint64_t valid = FlatValidNumel(sg.numel, sg.partition_world(), part);
    if (t.shape.size() != 1 || t.numel() < valid || t.numel() > sg.partition_numel ||
        !t.contiguous()) {
      return tf.Error(what + " has shape " + ShapeString(t.shape) + ", but param group " +
                      std::to_string(sg.param_group) + " (" + std::to_string(sg.numel) +
                      " elements) has partitions of " + std::to_string(sg.partition_numel) +
                      (sg.expert_parallel > 1
                           ? " over its " + std::to_string(sg.partition_world()) +
                                 " expert-data-parallel ranks, "
                           : " at world size " + std::to_string(c_.world_size()) + ", ") +
                      std::to_string(valid) + " of them valid on rank " + std::to_string(rank));
    }
  } else if (t.shape.size() != 1 || t.numel() != sg.partition_numel || !t.contiguous()) {
    return tf.Error(what + " has shape " + ShapeString(t.shape) + ", but sub-group " +
                    std::to_string(k) + "'s params need a flat buffer of " +
                    std::to_string(sg.partition_numel) + " elements at world size " +
                    std::to_string(c_.world_size()));
  }
  if (t.dtype != c_.states_[s].dtype) {
    return tf.Error(what + " is " + std::string(Info(t.dtype).torch_name) + " but rank 0's is " +
                    std::string(Info(c_.states_[s].dtype).torch_name));
  }
  UCFS_ASSIGN_OR_RETURN(uint64_t offset, tf.DataOffset(t));
  Checkpoint::Slot& slot =
      c_.flat_slots_[(rank * c_.sub_groups_.size() + k) * c_.states_.size() + s];
  slot.file = rank;
  slot.offset = offset;
  slot.present = true;
  return Status::OK();
}

Status CheckpointBuilder::ReadScalars(const ParsedRankFile& tf, size_t k, NodeId group_state) {
  const Document& doc = *tf.doc;
  auto entries = doc.MappingItems(group_state);
  if (!entries) return Status::OK();
  for (const auto& [name, v] : *entries) {
    auto n = doc.AsStr(name);
    if (!n) continue;
    ScalarState s;
    s.name = std::string(*n);
    if (auto num = doc.AsNumber(v)) {
      s.value = *num;
      s.dtype = doc.node(v).kind == Kind::kFloat ? DType::kFloat64 : DType::kInt64;
    } else {
      UCFS_ASSIGN_OR_RETURN(auto t, tf.MatchTensor(v));
      if (!t || t->numel() != 1 || !t->shape.empty()) continue;  // per-element, or not ours
      UCFS_ASSIGN_OR_RETURN(s.value, tf.ScalarValue(*t));
      UCFS_ASSIGN_OR_RETURN(uint64_t offset, tf.DataOffset(*t));
      s.extent = Extent{0, offset, t->element_size()};  // rank 0's optimizer file is source 0
      s.is_tensor = true;
      s.dtype = t->dtype;
    }
    c_.scalars_[k].push_back(std::move(s));
  }
  return Status::OK();
}

}  // namespace ucfs
