// ZeRO-3's rank files at N: each new sub-group's slot of every state, the
// frozen fragments, and the pickles laid out once for every rank.
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

Result<NodeId> CopyRankZeroOptimizer(const Checkpoint& c, TorchPickleBuilder& b,
                                     std::vector<NodeId>* copied) {
  const Document& src = c.rank0_optim();
  UCFS_ASSIGN_OR_RETURN(NodeId root, b.Copy(src, src.root(), c.rank0_optim_summary(), 0, copied));
  b.doc().set_root(root);
  return root;
}

Result<NodeId> CopyRankZeroModelStates(const Checkpoint& c, TorchPickleBuilder& b,
                                       std::vector<NodeId>* copied) {
  const Document& src = c.rank0_model();
  // Rank 0's model-states file is source W.
  UCFS_ASSIGN_OR_RETURN(NodeId root,
                        b.Copy(src, src.root(), c.rank0_model_summary(), c.world_size(), copied));
  b.doc().set_root(root);
  return root;
}

namespace {

// Rank `rank`'s slot of every param of new buffer k, for one state: the
// valid elements from the checkpoint, then zero padding. An expert
// buffer's are its EP rank's copies of the params, cut over its EDP group.
std::vector<StorageRun> FlatRuns(const Checkpoint& c, const ReshardLayout& layout, uint32_t k,
                                 uint32_t rank, uint32_t state) {
  const RankBuffer buffer =
      FindBufferOnRank(layout.sub_groups, k, rank).value_or(RankBuffer{k, rank});
  const SubGroupInfo& sg = layout.sub_groups[buffer.sub_group];
  const uint32_t world = sg.members.empty() ? layout.world_size : sg.partition_world();
  std::vector<StorageRun> runs;
  const uint64_t es = Info(c.states()[state].dtype).element_size;
  for (uint32_t p : sg.params) {
    const uint64_t n = c.params()[p].numel;
    const uint64_t part = PartitionNumel(n, world);
    const uint64_t valid = ValidNumel(n, world, buffer.part);
    if (valid > 0) {
      runs.push_back(StateRun(0, p, state, buffer.part * part * es, valid * es));
    }
    AppendZeros((part - valid) * es, &runs);
  }
  return runs;
}

std::vector<StorageRun> FrozenRuns(const Checkpoint& c, uint32_t f, uint32_t world, uint32_t rank) {
  const FrozenParamInfo& info = c.frozen_params()[f];
  const uint64_t es = Info(info.dtype).element_size;
  const uint64_t part = PartitionNumel(info.numel, world);
  const uint64_t valid = ValidNumel(info.numel, world, rank);
  std::vector<StorageRun> runs;
  if (valid > 0) {
    StorageRun run;
    run.kind = StorageRun::Kind::kFrozen;
    run.param = f;
    run.state_offset = rank * part * es;
    run.length = valid * es;
    runs.push_back(run);
  }
  if (part > valid) {
    AppendZeros((part - valid) * es, &runs);
  }
  return runs;
}

// Scalar state `scalar` of a sub-group, as a node of b's pickle.
Result<NodeId> ScalarStateNode(TorchPickleBuilder& b, const ScalarState& scalar,
                               const std::string& path) {
  Document& doc = b.doc();
  if (scalar.is_tensor) {
    // Each sub-group its own step tensor, as torch.optim keeps them.
    StorageRun run;
    run.kind = StorageRun::Kind::kSource;
    run.source = scalar.extent.file;
    run.source_offset = scalar.extent.offset;
    run.length = scalar.extent.length;
    return b.NewTensor(scalar.dtype, {}, false, {run});
  }
  if (scalar.dtype == DType::kFloat64) return doc.AddFloat(scalar.value);
  // An int kept as a double by Checkpoint: only one that fits an
  // int64 converts back (found by checkpoint_fuzz: 2^63 - 1).
  if (!(scalar.value >= -0x1p63 && scalar.value < 0x1p63)) {
    return Status::NotSupported(path + ": scalar state '" + Printable(scalar.name) + "' (" +
                                std::to_string(scalar.value) + ") does not fit an int64");
  }
  return doc.AddInt(static_cast<int64_t>(scalar.value));
}

// The tag of a storage of ZeRO-3's optimizer file holding sub-group k's
// slot of `state` (OptimizerFileParts), and back.
int64_t SlotTag(const Checkpoint& c, uint32_t k, uint32_t state) {
  return static_cast<int64_t>(k) * static_cast<int64_t>(c.states().size()) + state;
}
std::pair<uint32_t, uint32_t> SlotOfTag(const Checkpoint& c, int64_t tag) {
  const auto states = static_cast<int64_t>(c.states().size());
  return {static_cast<uint32_t>(tag / states), static_cast<uint32_t>(tag % states)};
}

// Entry `name` of new sub-group k's state dict, rank 0's `value` unless the
// name is a per-element state (a slot of it, tagged) or a scalar state (as
// k's old sub-group holds it).
Result<NodeId> SubGroupStateValue(TorchPickleBuilder& b, const Checkpoint& c,
                                  const ReshardLayout& layout, uint32_t k, const std::string& name,
                                  NodeId value, const std::string& path) {
  // State 0 is the master weights, in fp32_flat_groups: a state
  // dict entry of the same name ("fp32") is another thing (found by
  // checkpoint_fuzz: a scalar of that name became a flat buffer).
  if (auto s = c.FindState(name); s && *s > 0) {
    const StateInfo& info = c.states()[*s];
    const auto state = static_cast<uint32_t>(*s);
    return b.NewTensor(info.dtype, {static_cast<int64_t>(layout.sub_groups[k].partition_numel)},
                       info.requires_grad, FlatRuns(c, layout, k, 0, state), std::nullopt,
                       SlotTag(c, k, state));
  }
  NodeId v = value;
  for (const ScalarState& scalar : c.scalar_states()[layout.old_sub_group[k]]) {
    if (scalar.name != name) continue;
    UCFS_ASSIGN_OR_RETURN(v, ScalarStateNode(b, scalar, path));
  }
  return v;
}

// The optimizer's state: one dict per new sub-group, keys in the order rank
// 0's entry of its old sub-group has them; a state saved before the first
// step stays empty.
Status RepartitionState(TorchPickleBuilder& b, const Checkpoint& c, const ReshardLayout& layout,
                        NodeId state, const std::string& path) {
  Document& doc = b.doc();
  auto old_state = doc.MappingItems(state);
  if (!old_state || old_state->empty()) return Status::OK();
  // Each new sub-group takes the keys of its old sub-group's entry (groups
  // keep different states: Muon's momentum_buffer, Adam's exp_avg and step),
  // else of another old sub-group of its param group; none, none.
  std::map<int64_t, std::vector<std::pair<NodeId, NodeId>>> old_entries;
  for (const auto& [key, value] : *old_state) {
    auto items = doc.MappingItems(value);
    auto k = doc.AsInt(key);
    // Open read the entries keyed by a sub-group (the last of a key
    // counts, as in a dict); any other is dropped, as before.
    if (items && k) old_entries[*k] = std::move(*items);
  }
  std::vector<NodeId> kv;
  for (uint32_t k = 0; k < layout.file_buffers; ++k) {
    const std::vector<std::pair<NodeId, NodeId>>* template_items = nullptr;
    if (auto it = old_entries.find(layout.old_sub_group[k]); it != old_entries.end()) {
      template_items = &it->second;
    } else {
      for (const auto& [old_k, items] : old_entries) {
        if (old_k >= 0 && static_cast<size_t>(old_k) < c.sub_groups().size() &&
            c.sub_groups()[old_k].param_group == layout.sub_groups[k].param_group) {
          template_items = &items;
          break;
        }
      }
    }
    if (template_items == nullptr) continue;
    std::vector<NodeId> entry;
    for (const auto& [key, value] : *template_items) {
      // A copy: adding nodes below may move the string AsStr points into.
      const std::optional<std::string> name =
          doc.AsStr(key) ? std::optional<std::string>(std::string(*doc.AsStr(key))) : std::nullopt;
      NodeId v = value;
      if (name) {
        UCFS_ASSIGN_OR_RETURN(v, SubGroupStateValue(b, c, layout, k, *name, value, path));
      }
      entry.push_back(doc.AddStr(name.value_or("")));
      entry.push_back(v);
    }
    kv.push_back(doc.AddInt(k));
    kv.push_back(doc.AddDict(std::move(entry)));
  }
  doc.mutable_node(state).items = std::move(kv);
  return Status::OK();
}

// Each param group lists its new sub-groups.
Status ListNewSubGroups(Document& doc, const ReshardLayout& layout,
                        const std::vector<NodeId>& groups, const std::string& path) {
  for (uint32_t g = 0; g < groups.size(); ++g) {
    NodeId* params = ValueSlot(doc, groups[g], "params");
    if (params == nullptr) return Status::Corruption(path + ": a param group without 'params'");
    std::vector<NodeId> ids;
    for (uint32_t k = 0; k < layout.file_buffers; ++k) {
      if (layout.sub_groups[k].param_group == g) ids.push_back(doc.AddInt(k));
    }
    *params = doc.AddList(std::move(ids));
  }
  return Status::OK();
}

// AutoEP's ds_zero_partition_groups (stage3.py
// _zero3_partition_group_metadata), which DeepSpeed loads only if it
// equals its own: per new buffer, rank `rank`'s place in it at N. Each
// entry is its old buffer's, keys in their order, families and group_names
// kept.
Status RepartitionGroupsMetadata(Document& doc, const ReshardLayout& layout, uint32_t rank,
                                 NodeId* groups, const std::string& path) {
  const auto old = doc.SequenceItems(*groups);
  if (!old) return Status::OK();  // None: no expert sub-group
  std::vector<NodeId> entries;
  for (uint32_t k = 0; k < layout.file_buffers; ++k) {
    const uint32_t old_k = layout.old_sub_group[k];
    auto items = old_k < old->size() ? doc.MappingItems((*old)[old_k]) : std::nullopt;
    if (!items) {
      return Status::Corruption(path + ": ds_zero_partition_groups has no entry for sub-group " +
                                std::to_string(old_k));
    }
    const RankBuffer buffer =
        FindBufferOnRank(layout.sub_groups, k, rank).value_or(RankBuffer{k, rank});
    const SubGroupInfo& sg = layout.sub_groups[buffer.sub_group];
    const uint32_t count = sg.members.empty() ? layout.world_size : sg.partition_world();
    std::vector<NodeId> entry;
    for (const auto& [key, value] : *items) {
      const std::string name(doc.AsStr(key).value_or(""));
      entry.push_back(key);
      if (name == "sub_group") {
        entry.push_back(doc.AddInt(k));
      } else if (name == "partition_count") {
        entry.push_back(doc.AddInt(count));
      } else if (name == "partition_rank") {
        entry.push_back(doc.AddInt(buffer.part));
      } else if (name == "partition_ranks") {
        std::vector<NodeId> ranks;
        for (uint32_t r = 0; r < count; ++r) {
          ranks.push_back(doc.AddInt(sg.members.empty() ? r : sg.members[r]));
        }
        entry.push_back(doc.AddList(std::move(ranks)));
      } else {
        entry.push_back(value);
      }
    }
    entries.push_back(doc.AddDict(std::move(entry)));
  }
  *groups = doc.AddList(std::move(entries));
  return Status::OK();
}

// The pickle of ZeRO-3's optimizer file of `rank` at the layout's world
// size, the same for every rank but AutoEP's partition groups (each rank's
// partition of a param is as long as any other's), and its storages, each
// flat slot tagged with its sub-group and state (SlotTag) and holding rank
// 0's runs.
Result<TorchPickleBuilder::Parts> OptimizerFileParts(const Checkpoint& c,
                                                     const ReshardLayout& layout, uint32_t rank) {
  TorchPickleBuilder b;
  std::vector<NodeId> copied;
  UCFS_ASSIGN_OR_RETURN(NodeId root, CopyRankZeroOptimizer(c, b, &copied));
  Document& doc = b.doc();
  const std::string& path = c.rank0_optim_summary().path;
  const NodeId osd = doc.Get(root, "optimizer_state_dict");
  NodeId* partition_count = ValueSlot(doc, osd, "partition_count");
  NodeId* flats = ValueSlot(doc, osd, "fp32_flat_groups");
  const NodeId inner = doc.Get(osd, "optimizer_state_dict");
  const NodeId state = doc.Get(inner, "state");
  auto groups = doc.SequenceItems(doc.Get(inner, "param_groups"));
  if (partition_count == nullptr || flats == nullptr || !groups) {
    return Status::Corruption(path +
                              ": optimizer_state_dict lacks partition_count, "
                              "fp32_flat_groups or param_groups");
  }
  *partition_count = doc.AddInt(layout.world_size);
  if (NodeId* partition_groups = ValueSlot(doc, osd, "ds_zero_partition_groups")) {
    UCFS_RETURN_IF_ERROR(RepartitionGroupsMetadata(doc, layout, rank, partition_groups, path));
  }

  const StateInfo& fp32 = c.states()[0];
  std::vector<NodeId> new_flats;
  for (uint32_t k = 0; k < layout.file_buffers; ++k) {
    new_flats.push_back(b.NewTensor(
        fp32.dtype, {static_cast<int64_t>(layout.sub_groups[k].partition_numel)},
        fp32.requires_grad, FlatRuns(c, layout, k, 0, 0), std::nullopt, SlotTag(c, k, 0)));
  }
  *flats = doc.AddList(std::move(new_flats));

  UCFS_RETURN_IF_ERROR(RepartitionState(b, c, layout, state, path));
  UCFS_RETURN_IF_ERROR(ListNewSubGroups(doc, layout, *groups, path));
  return b.FinishParts();
}

// The pickle of ZeRO-3's model-states file of `rank` and its storages
// (each frozen fragment's tagged with its frozen param's index).
Result<TorchPickleBuilder::Parts> ModelFileParts(const Checkpoint& c, const ReshardLayout& layout,
                                                 uint32_t rank) {
  const Document& src = c.rank0_model();
  const uint32_t w = c.world_size();
  TorchPickleBuilder b;
  std::vector<NodeId> copied;
  // Rank 0's model-states file is checkpoint source W.
  UCFS_ASSIGN_OR_RETURN(NodeId root, b.Copy(src, src.root(), c.rank0_model_summary(), w, &copied));
  Document& doc = b.doc();
  doc.set_root(root);
  const std::string& path = c.rank0_model_summary().path;

  if (NodeId* dp = ValueSlot(doc, root, "dp_world_size")) *dp = doc.AddInt(layout.world_size);
  // param_shapes: one OrderedDict per new sub-group, reusing the shapes.
  std::map<std::string, NodeId> shape_of;
  const auto old_groups = doc.SequenceItems(doc.Get(root, "param_shapes"));
  if (!old_groups) return Status::Corruption(path + ": no param_shapes");
  for (NodeId group : *old_groups) {
    const auto items = doc.MappingItems(group);
    if (!items) return Status::Corruption(path + ": param_shapes holds a non-dict");
    for (const auto& [k, v] : *items) shape_of[std::string(doc.AsStr(k).value_or(""))] = v;
  }
  std::vector<NodeId> shapes;
  for (uint32_t k = 0; k < layout.file_buffers; ++k) {
    const SubGroupInfo& sg = layout.sub_groups[k];
    NodeId od = doc.AddReduce(doc.Global("collections", "OrderedDict"), doc.AddTuple({}));
    for (uint32_t p : sg.params) {
      // DeepSpeed's names here are other str objects than the module's keys.
      doc.AppendPair(od, doc.AddStr(c.params()[p].name), shape_of.at(c.params()[p].name));
    }
    shapes.push_back(od);
  }
  NodeId* param_shapes = ValueSlot(doc, root, "param_shapes");
  if (param_shapes == nullptr) return Status::Corruption(path + ": no param_shapes");
  *param_shapes = doc.AddList(std::move(shapes));

  const NodeId fragments = doc.Get(root, "frozen_param_fragments");
  for (uint32_t f = 0; f < c.frozen_params().size(); ++f) {
    const FrozenParamInfo& info = c.frozen_params()[f];
    NodeId* slot = ValueSlot(doc, fragments, info.name);
    if (slot == nullptr) return Status::Corruption(path + ": no fragment of " + info.name);
    const uint64_t part = PartitionNumel(info.numel, layout.world_size);
    *slot = b.NewTensor(info.dtype, {static_cast<int64_t>(part)}, false,
                        FrozenRuns(c, f, layout.world_size, rank), std::nullopt, f);
  }
  // Tied params are recorded on rank 0 only, as DeepSpeed does.
  if (rank != 0) {
    if (NodeId* shared = ValueSlot(doc, root, "shared_params")) *shared = doc.AddDict({});
  }
  SetAutoEpLayersRank(doc, root, layout.world_size, rank, c.data_before_expert_parallelism());
  return b.FinishParts();
}

// A pickle and its storages made once, on first use, for every rank file
// that shares them.
class OnceParts {
 public:
  Result<const TorchPickleBuilder::Parts*> Get(
      const std::function<Result<TorchPickleBuilder::Parts>()>& make) {
    std::call_once(once_, [&] {
      auto parts = make();
      status_ = parts.status();
      if (parts.ok()) parts_ = std::move(parts).value();
    });
    UCFS_RETURN_IF_ERROR(status_);
    return &parts_;
  }

 private:
  std::once_flag once_;
  Status status_;  // set in once_
  TorchPickleBuilder::Parts parts_;
};

// A rank's file from its template: each tagged storage's runs made for
// `rank` by `runs_of(tag)`.
Result<std::shared_ptr<TorchFileContent>> LayOut(
    std::shared_ptr<const Checkpoint> ckpt, const TorchPickleBuilder::Parts& parts,
    const std::string& prefix, const std::function<std::vector<StorageRun>(int64_t)>& runs_of) {
  std::vector<StorageSpec> storages;
  storages.reserve(parts.storages.size());
  for (size_t i = 0; i < parts.storages.size(); ++i) {
    const StorageSpec& from = parts.storages[i];
    if (parts.tags[i] < 0) {
      storages.push_back(from);
    } else {
      storages.push_back(StorageSpec{from.key, runs_of(parts.tags[i]), from.crc32, {}});
    }
  }
  const ContainerStyle style = ckpt->container_style();
  return TorchFileContent::Make(std::shared_ptr<const StateMapper>(std::move(ckpt)), style, prefix,
                                parts.pickle, std::move(storages));
}

}  // namespace

// ZeRO-3's rank files at N are laid out from three pickles made once: the
// optimizer file's, every rank's alike, with the rank's slots of each
// sub-group put in; and the model-states file's, rank 0's and every other
// rank's (tied params are recorded on rank 0 only), with the rank's own
// bytes of each frozen fragment. Copying rank 0's pickles cost the daemon
// 7 ms a model-states file of 723 params, and 15 ms an optimizer file of
// 723 sub-groups (bench/README.md). AutoEP's differ by rank (each says
// where the rank stands in its partition groups): made for each.
struct RankFileTemplates {
  OnceParts optim;
  OnceParts model[2];  // rank 0's, every other rank's
};

std::shared_ptr<RankFileTemplates> NewRankFileTemplates() {
  return std::make_shared<RankFileTemplates>();
}

namespace {

// The pickle of a rank's file: `once`'s, shared, or, where the pickles
// differ by rank, `make`'s own in `own`.
Result<const TorchPickleBuilder::Parts*> PartsOf(
    const Checkpoint& c, OnceParts& once,
    const std::function<Result<TorchPickleBuilder::Parts>()>& make,
    TorchPickleBuilder::Parts* own) {
  if (c.expert_parallel() == 1) return once.Get(make);
  UCFS_ASSIGN_OR_RETURN(*own, make());
  return own;
}

}  // namespace

Result<std::shared_ptr<TorchFileContent>> OptimizerFile(std::shared_ptr<const Checkpoint> ckpt,
                                                        const ReshardLayout& layout, uint32_t rank,
                                                        RankFileTemplates& templates) {
  const Checkpoint& c = *ckpt;
  TorchPickleBuilder::Parts own;
  UCFS_ASSIGN_OR_RETURN(
      const TorchPickleBuilder::Parts* parts,
      PartsOf(
          c, templates.optim, [&] { return OptimizerFileParts(c, layout, rank); }, &own));
  return LayOut(ckpt, *parts,
                ArchivePrefixFor(RankFileNameFor(RankFileName::Kind::kOptim, c.files().optim_prefix,
                                                 rank, c.files().mp_rank)),
                [&](int64_t tag) {
                  const auto [k, state] = SlotOfTag(c, tag);
                  return FlatRuns(c, layout, k, rank, state);
                });
}

Result<std::shared_ptr<TorchFileContent>> ModelFile(std::shared_ptr<const Checkpoint> ckpt,
                                                    const ReshardLayout& layout, uint32_t rank,
                                                    RankFileTemplates& templates) {
  const Checkpoint& c = *ckpt;
  TorchPickleBuilder::Parts own;
  UCFS_ASSIGN_OR_RETURN(const TorchPickleBuilder::Parts* parts,
                        PartsOf(
                            c, templates.model[rank == 0 ? 0 : 1],
                            [&] { return ModelFileParts(c, layout, rank); }, &own));
  return LayOut(
      ckpt, *parts,
      ArchivePrefixFor(RankFileNameFor(RankFileName::Kind::kModel, "", rank, c.files().mp_rank)),
      [&](int64_t tag) {
        return FrozenRuns(c, static_cast<uint32_t>(tag), layout.world_size, rank);
      });
}

}  // namespace ucfs
