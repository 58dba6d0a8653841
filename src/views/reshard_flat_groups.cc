// ZeRO-1/2's rank files at N: each param group's partition of every state,
// and the bookkeeping DeepSpeed saves with it.
#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include "ucfs/checkpoint/partition.h"
#include "ucfs/views/torch_pickle_builder.h"
#include "views/expert_model_states.h"
#include "views/reshard_rank_files.h"
#include "views/universal_files.h"

namespace ucfs {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

namespace {

// A new rank's buffer of param group g (FindBufferOnRank over the layout's
// sub-groups, which keep their file buffers): PlanReshard gives every rank
// one of each.
RankBuffer BufferOf(const ReshardLayout& layout, uint32_t g, uint32_t rank) {
  return FindBufferOnRank(layout.sub_groups, g, rank).value_or(RankBuffer{g, rank});
}

// The first `length` elements of partition `part` of flat group k, for
// one state: the params' elements it covers, then zero padding.
std::vector<StorageRun> FlatGroupRuns(const Checkpoint& c, const ReshardLayout& layout, uint32_t k,
                                      uint32_t part, uint32_t state, uint64_t length) {
  std::vector<StorageRun> runs;
  const uint64_t es = Info(c.states()[state].dtype).element_size;
  const SubGroupInfo& sg = layout.sub_groups[k];
  uint64_t at = 0;  // elements of the partition covered so far
  for (uint32_t p : sg.params) {
    const ParamInfo& param = c.params()[p];
    auto frag = FragmentOnRank(sg.partition_numel, param.offset, param.numel, part);
    if (!frag || frag->partition_start >= length) continue;
    const uint64_t n = std::min(frag->numel, length - frag->partition_start);
    // The alignment padding before it (param_alignment_paddings), zeros as
    // DeepSpeed flattens them.
    if (frag->partition_start > at) AppendZeros((frag->partition_start - at) * es, &runs);
    runs.push_back(StateRun(0, p, state, frag->param_start * es, n * es));
    at = frag->partition_start + n;
  }
  if (length > at) {
    AppendZeros((length - at) * es, &runs);
  }
  return runs;
}

// Muon's momentum_buffer of new rank `rank` in flat group k, for one state:
// the whole params its partition touches, concatenated in flat order
// (whole_params.h); no runs where it touches none.
std::vector<StorageRun> WholeParamRuns(const Checkpoint& c, const ReshardLayout& layout, uint32_t k,
                                       uint32_t part, uint32_t state, uint64_t* numel) {
  std::vector<StorageRun> runs;
  const uint64_t es = Info(c.states()[state].dtype).element_size;
  const SubGroupInfo& sg = layout.sub_groups[k];
  *numel = 0;
  for (uint32_t p : sg.params) {
    const ParamInfo& param = c.params()[p];
    if (!FragmentOnRank(sg.partition_numel, param.offset, param.numel, part)) continue;
    runs.push_back(StateRun(0, p, state, 0, param.numel * es));
    *numel += param.numel;
  }
  return runs;
}

// The nodes every fragment_address shares: its attribute names (one str
// object each, as in Python's pickle of the dataclasses' __dict__), its
// class, and OrderedDict.
struct FragmentNodes {
  NodeId numel_key = pickle::kNoNode;
  NodeId start_key = pickle::kNoNode;
  NodeId fragment = pickle::kNoNode;
  NodeId ordered_dict = pickle::kNoNode;
};

// param_slice_mappings of sub-group sg on `rank`: each param's fragment of
// this partition (tensor_fragment.py), in an OrderedDict by param name.
NodeId SliceMappings(Document& doc, const Checkpoint& c, const SubGroupInfo& sg, uint32_t part,
                     const FragmentNodes& nodes) {
  const NodeId od = doc.AddReduce(nodes.ordered_dict, doc.AddTuple({}));
  for (uint32_t p : sg.params) {
    const ParamInfo& param = c.params()[p];
    auto frag = FragmentOnRank(sg.partition_numel, param.offset, param.numel, part);
    if (!frag) continue;
    pickle::Node address;
    address.kind = Kind::kNewObj;
    address.a = nodes.fragment;
    address.b = doc.AddTuple({});
    address.state =
        doc.AddDict({nodes.numel_key, doc.AddInt(static_cast<int64_t>(frag->numel)),
                     nodes.start_key, doc.AddInt(static_cast<int64_t>(frag->partition_start))});
    doc.AppendPair(od, doc.AddStr(param.name), doc.Add(std::move(address)));
  }
  return od;
}

// param_alignment_paddings: the padding after each param of each group, as
// the offsets hold it. DeepSpeed pads by the params alone, so these are the
// source's at any N (only the group's end padding follows N).
NodeId AlignmentPaddings(Document& doc, const Checkpoint& c, const ReshardLayout& layout) {
  std::vector<NodeId> groups;
  // The file's groups: an expert group's families share its paddings.
  for (uint32_t g = 0; g < c.param_group_count(); ++g) {
    const SubGroupInfo& sg = layout.sub_groups[g];
    std::vector<NodeId> paddings;
    for (size_t i = 0; i < sg.params.size(); ++i) {
      const ParamInfo& p = c.params()[sg.params[i]];
      const uint64_t end =
          i + 1 < sg.params.size() ? c.params()[sg.params[i + 1]].offset : p.offset + p.numel;
      paddings.push_back(doc.AddInt(static_cast<int64_t>(end - p.offset - p.numel)));
    }
    groups.push_back(doc.AddList(std::move(paddings)));
  }
  return doc.AddList(std::move(groups));
}

// base_optimizer_state['state'][k]: rank 0's entry of group k, its
// per-element states re-partitioned (with padding, as torch keeps them).
Status RepartitionBaseState(TorchPickleBuilder& b, const Checkpoint& c, const ReshardLayout& layout,
                            uint32_t rank, NodeId state, const std::string& path) {
  Document& doc = b.doc();
  const size_t groups = c.param_group_count();
  auto old_state = doc.MappingItems(state);
  if (!old_state) return Status::OK();
  std::vector<NodeId> kv;
  for (const auto& [key, value] : *old_state) {
    auto k = doc.AsInt(key);
    auto entries = doc.MappingItems(value);
    if (!k || *k < 0 || static_cast<size_t>(*k) >= groups || !entries) {
      return Status::Corruption(path + ": base_optimizer_state['state'] holds " +
                                doc.Repr(key, 40) + ", not one of the " + std::to_string(groups) +
                                " param groups");
    }
    const auto g = static_cast<uint32_t>(*k);
    const RankBuffer buffer = BufferOf(layout, g, rank);
    const SubGroupInfo& sg = layout.sub_groups[buffer.sub_group];
    std::vector<NodeId> entry;
    for (const auto& [name_node, v] : *entries) {
      NodeId nv = v;
      // Copied: adding nodes below may move the string AsStr points into.
      const std::string name(doc.AsStr(name_node).value_or(""));
      // The group's own states only (Open refused any other tensor).
      const SubGroupState* gs = nullptr;
      for (const SubGroupState& own : c.sub_group_states(g)) {
        if (own.state != 0 && c.states()[own.state].name == name) gs = &own;
      }
      if (gs != nullptr && gs->layout == StateLayout::kWholeParams) {
        const StateInfo& info = c.states()[gs->state];
        uint64_t numel = 0;
        std::vector<StorageRun> runs =
            WholeParamRuns(c, layout, buffer.sub_group, buffer.part, gs->state, &numel);
        // DeepSpeed makes no buffer on a rank touching no Muon param.
        if (numel == 0) continue;
        nv = b.NewTensor(info.dtype, {static_cast<int64_t>(numel)}, info.requires_grad,
                         std::move(runs));
      } else if (gs != nullptr) {
        const StateInfo& info = c.states()[gs->state];
        nv = b.NewTensor(
            info.dtype, {static_cast<int64_t>(sg.partition_numel)}, info.requires_grad,
            FlatGroupRuns(c, layout, buffer.sub_group, buffer.part, gs->state, sg.partition_numel));
      }
      entry.push_back(name_node);
      entry.push_back(nv);
    }
    if (entry.empty() && !entries->empty()) continue;  // its only state was such a buffer
    kv.push_back(key);
    kv.push_back(doc.AddDict(std::move(entry)));
  }
  doc.mutable_node(state).items = std::move(kv);
  return Status::OK();
}

}  // namespace

// A rank file of a ZeRO-1/2 checkpoint at N ranks: rank 0's pickle with
// each param group's partition of rank `rank` — the fp32 weights as the
// optimizer saves them (DeepSpeedZeroOptimizer without the padding,
// BF16_Optimizer with it), every per-element state with it — and the
// bookkeeping DeepSpeed saves with them: group_paddings, partition_count,
// param_slice_mappings, param_alignment_paddings.
Result<std::shared_ptr<TorchFileContent>> FlatGroupOptimizerFile(
    std::shared_ptr<const Checkpoint> ckpt, const ReshardLayout& layout, uint32_t rank) {
  const Checkpoint& c = *ckpt;
  TorchPickleBuilder b;
  std::vector<NodeId> copied;
  UCFS_ASSIGN_OR_RETURN(NodeId root, CopyRankZeroOptimizer(c, b, &copied));
  Document& doc = b.doc();
  const std::string& path = c.rank0_optim_summary().path;
  const size_t groups = c.param_group_count();
  const NodeId osd = doc.Get(root, "optimizer_state_dict");
  NodeId* flats = ValueSlot(doc, osd, "single_partition_of_fp32_groups");
  NodeId* paddings = ValueSlot(doc, osd, "group_paddings");
  NodeId* counts = ValueSlot(doc, osd, "partition_count");
  NodeId* mappings = ValueSlot(doc, osd, "param_slice_mappings");
  const NodeId base = doc.Get(osd, "base_optimizer_state");
  const NodeId state = doc.Get(base, "state");
  if (flats == nullptr || paddings == nullptr || counts == nullptr || mappings == nullptr ||
      !doc.MappingItems(base)) {
    return Status::NotSupported(
        path +
        ": optimizer_state_dict lacks single_partition_of_fp32_groups, group_paddings, "
        "partition_count, param_slice_mappings or a base_optimizer_state dict (an "
        "elastic_checkpoint save?); the reshard view writes what DeepSpeed saves by default");
  }

  const StateInfo& fp32 = c.states()[0];
  std::vector<NodeId> new_flats, new_paddings, new_counts, new_mappings;
  FragmentNodes nodes;
  nodes.numel_key = doc.AddStr("numel");
  nodes.start_key = doc.AddStr("start");
  nodes.fragment = doc.Global("deepspeed.utils.tensor_fragment", "fragment_address");
  nodes.ordered_dict = doc.Global("collections", "OrderedDict");
  for (uint32_t g = 0; g < groups; ++g) {
    // Cut over its n ranks: all N, or an expert group's EDP group.
    const RankBuffer buffer = BufferOf(layout, g, rank);
    const SubGroupInfo& sg = layout.sub_groups[buffer.sub_group];
    const uint32_t n = sg.partition_world();
    // DeepSpeedZeroOptimizer saves partition[:P - padding], a view: its
    // storage is still the whole partition.
    const uint64_t saved = c.IsBf16Optimizer() ? sg.partition_numel
                                               : ZeroOptimizerSavedNumel(sg.numel, n, buffer.part);
    new_flats.push_back(
        b.NewTensor(fp32.dtype, {static_cast<int64_t>(saved)}, fp32.requires_grad,
                    FlatGroupRuns(c, layout, buffer.sub_group, buffer.part, 0, sg.partition_numel),
                    sg.partition_numel));
    new_paddings.push_back(
        doc.AddInt(buffer.part + 1 == n ? static_cast<int64_t>(FlatGroupPadding(sg.numel, n)) : 0));
    new_counts.push_back(doc.AddInt(n));
    new_mappings.push_back(SliceMappings(doc, c, sg, buffer.part, nodes));
  }
  *flats = doc.AddList(std::move(new_flats));
  *paddings = doc.AddList(std::move(new_paddings));
  *counts = doc.AddList(std::move(new_counts));
  *mappings = doc.AddList(std::move(new_mappings));
  if (NodeId* alignment = ValueSlot(doc, osd, "param_alignment_paddings")) {
    *alignment = AlignmentPaddings(doc, c, layout);
  }

  UCFS_RETURN_IF_ERROR(RepartitionBaseState(b, c, layout, rank, state, path));
  return b.Finish(
      ckpt, ArchivePrefixFor(RankFileNameFor(RankFileName::Kind::kOptim, c.files().optim_prefix,
                                             rank, c.files().mp_rank)));
}

// ZeRO-1/2's one model-states file: rank 0's with dp_world_size N (DeepSpeed
// loads that many optimizer files).
Result<std::shared_ptr<TorchFileContent>> SharedModelFile(std::shared_ptr<const Checkpoint> ckpt,
                                                          const ReshardLayout& layout) {
  const Checkpoint& c = *ckpt;
  TorchPickleBuilder b;
  std::vector<NodeId> copied;
  UCFS_ASSIGN_OR_RETURN(NodeId root, CopyRankZeroModelStates(c, b, &copied));
  Document& doc = b.doc();
  if (NodeId* dp = ValueSlot(doc, root, "dp_world_size")) *dp = doc.AddInt(layout.world_size);
  // AutoEP records each layer's EDP size (N / EP at N), in its metadata
  // and in universal_checkpoint_info's copy of it; rank 0's other fields
  // (EP rank 0, EDP rank 0) hold at any N.
  SetAutoEpLayersRank(doc, root, layout.world_size, 0, c.data_before_expert_parallelism());
  return b.Finish(ckpt, ArchivePrefixFor(SharedModelFileName(c.files().mp_rank)));
}

}  // namespace ucfs
