#include "checkpoint_repair.h"

#include <optional>
#include <string>
#include <vector>

#include "pickle_surgery.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs_fuzz {

namespace {

constexpr uint64_t kMaxRepairElements = uint64_t{1} << 16;  // per flat buffer
constexpr size_t kMaxRepairGroups = 256;                    // sub-groups repair makes

// Makes tensor `id` a flat (n,) tensor at offset 0 of a storage of exactly n
// elements, and its storage record that size.
void ResizeFlat(Archive& ar, NodeId id, uint64_t n) {
  Document& doc = ar.doc;
  auto t = ucfs::MatchTensor(doc, id);
  if (!t.ok() || !t->has_value()) return;
  const NodeId call = PlainCall(doc, id);
  if (call == kNoNode) return;
  const NodeId args = doc.node(call).b;
  const Node& a = doc.node(args);
  if (a.items.size() < 5) return;
  const NodeId pid = doc.node(a.items[0]).a;
  if (pid == kNoNode || doc.node(pid).items.size() < 5) return;
  const auto ni = static_cast<int64_t>(n);
  // New nodes rather than edited ones: a shape tuple may be shared.
  const NodeId offset = doc.AddInt(0);
  const NodeId size = doc.AddTuple({doc.AddInt(ni)});
  const NodeId stride = doc.AddTuple({doc.AddInt(1)});
  const NodeId numel = doc.AddInt(ni);
  {
    Node& args_node = doc.mutable_node(args);
    args_node.items[1] = offset;
    args_node.items[2] = size;
    args_node.items[3] = stride;
  }
  doc.mutable_node(pid).items[4] = numel;
  const std::string bytes_needed(n * (*t)->element_size(), '\0');
  if (std::string* rec = ar.Storage((*t)->storage_key)) {
    rec->resize(bytes_needed.size(), '\0');
  } else {
    ar.AddStorage((*t)->storage_key, bytes_needed);
  }
  ar.dirty = true;
}

// A copy of the subgraph at `id` of `snapshot` (a copy of ar.doc: CopyFrom
// needs a source that does not grow under it) into ar.doc, globals shared;
// every storage it names gets a new key and a copy of its record.
NodeId CopyWithNewStorages(Archive& ar, const Document& snapshot, NodeId id, uint64_t* next_key) {
  Document& doc = ar.doc;
  std::vector<NodeId> copied;
  const size_t before = doc.size();
  const NodeId root = doc.CopyFrom(snapshot, id, &copied);
  for (size_t i = before; i < doc.size(); ++i) {
    const Node& n = doc.node(static_cast<NodeId>(i));
    if (n.kind != Kind::kPersistentId || n.a == kNoNode) continue;
    const NodeId tuple = n.a;
    if (doc.node(tuple).items.size() < 5) continue;
    auto key = doc.AsStr(doc.node(tuple).items[2]);
    if (!key) continue;
    const std::string* old = ar.Storage(*key);
    const std::string bytes = old ? *old : std::string();
    const std::string fresh = std::to_string((*next_key)++);
    const NodeId key_node = doc.AddStr(fresh);
    doc.mutable_node(tuple).items[2] = key_node;
    ar.AddStorage(fresh, bytes);
  }
  ar.dirty = true;
  return root;
}

uint64_t NextStorageKey(const Archive& ar) {
  uint64_t next = 0;
  const std::string data = ar.prefix + "/data/";
  for (const auto& [name, bytes] : ar.records) {
    if (!name.starts_with(data)) continue;
    const std::string key = name.substr(data.size());
    if (key.empty() || key.size() > 15 ||
        key.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    next = std::max<uint64_t>(next, std::stoull(key) + 1);
  }
  return next;
}

// Elements of a shape as ucfs counts them (ucfs::NumelOf: wrapping), so that
// a repaired checkpoint is one Checkpoint::Open would accept.
uint64_t WrappingNumel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Per sub-group: the elements of each rank's flat buffer at `world` ranks,
// from a model-states pickle's param_shapes; nullopt past kMaxRepairElements.
std::optional<std::vector<uint64_t>> FlatSizes(const Document& model, uint32_t world) {
  auto groups = model.SequenceItems(model.Get(model.root(), "param_shapes"));
  if (!groups) return std::nullopt;
  std::vector<uint64_t> sizes;
  for (NodeId g : *groups) {
    auto items = model.MappingItems(g);
    if (!items) return std::nullopt;
    uint64_t total = 0;
    for (const auto& [k, v] : *items) {
      auto shape = ucfs::MatchShape(model, v);
      if (!shape) return std::nullopt;
      const uint64_t numel = WrappingNumel(*shape);
      if (numel > kMaxRepairElements * world) return std::nullopt;
      total += (numel + world - 1) / world;
    }
    if (total > kMaxRepairElements) return std::nullopt;
    sizes.push_back(total);
  }
  return sizes;
}

void RepairOptim(Archive& ar, const std::vector<uint64_t>& sizes, uint8_t flags) {
  Document& doc = ar.doc;
  const NodeId osd = doc.Get(doc.root(), "optimizer_state_dict");
  Place flats_place = Field(doc, osd, "fp32_flat_groups");
  if (flats_place.node == kNoNode) return;
  const NodeId flats = flats_place.node;
  if (doc.node(flats).kind != Kind::kList && doc.node(flats).kind != Kind::kTuple) return;
  const NodeId inner = doc.Get(osd, "optimizer_state_dict");
  const NodeId state = doc.Get(inner, "state");
  const NodeId groups = doc.Get(inner, "param_groups");
  const size_t want = sizes.size();
  uint64_t next_key = NextStorageKey(ar);

  // The number of sub-groups.
  size_t have = doc.node(flats).items.size();
  if (have > want) {
    doc.mutable_node(flats).items.resize(want);
    if (IsMappingNode(doc, state) && doc.node(state).kind == Kind::kDict) {
      std::vector<NodeId> kept;
      const auto items = doc.node(state).items;
      for (size_t i = 0; i + 1 < items.size(); i += 2) {
        auto k = doc.AsInt(items[i]);
        if (k && *k >= 0 && static_cast<uint64_t>(*k) >= want) continue;
        kept.push_back(items[i]);
        kept.push_back(items[i + 1]);
      }
      doc.mutable_node(state).items = std::move(kept);
    }
    if (auto gs = doc.SequenceItems(groups)) {
      for (NodeId g : *gs) {
        const NodeId params = doc.Get(g, "params");
        if (params == kNoNode || doc.node(params).kind != Kind::kList) continue;
        std::vector<NodeId> kept;
        for (NodeId p : doc.node(params).items) {
          auto k = doc.AsInt(p);
          if (k && *k >= 0 && static_cast<uint64_t>(*k) >= want) continue;
          kept.push_back(p);
        }
        doc.mutable_node(params).items = std::move(kept);
      }
    }
    ar.dirty = true;
  } else if (have < want && have > 0 && want <= kMaxRepairGroups) {
    const Document snapshot = doc;
    const NodeId flat0 = doc.node(flats).items[0];
    NodeId state0 = kNoNode;
    if (auto items = doc.MappingItems(state)) {
      for (const auto& [k, v] : *items) {
        if (doc.AsInt(k) == 0) state0 = v;
      }
    }
    for (size_t k = have; k < want; ++k) {
      const NodeId t = CopyWithNewStorages(ar, snapshot, flat0, &next_key);
      doc.Append(flats, t);
      if (state0 != kNoNode && doc.node(state).kind == Kind::kDict) {
        const NodeId s = CopyWithNewStorages(ar, snapshot, state0, &next_key);
        doc.AppendPair(state, doc.AddInt(static_cast<int64_t>(k)), s);
      }
      if (auto gs = doc.SequenceItems(groups); gs && !gs->empty()) {
        // Into the last param group, or the one flags pick.
        const NodeId g = (*gs)[flags & 1 ? gs->size() - 1 : (k % gs->size())];
        const NodeId params = doc.Get(g, "params");
        if (params != kNoNode && doc.node(params).kind == Kind::kList) {
          doc.Append(params, doc.AddInt(static_cast<int64_t>(k)));
        }
      }
    }
    ar.dirty = true;
  }

  // Each sub-group's buffers at their size.
  const auto flat_items = doc.node(flats).items;
  for (size_t k = 0; k < std::min(flat_items.size(), want); ++k) {
    ResizeFlat(ar, flat_items[k], sizes[k]);
  }
  if (auto items = doc.MappingItems(state)) {
    for (const auto& [key, value] : *items) {
      auto k = doc.AsInt(key);
      if (!k || *k < 0 || static_cast<uint64_t>(*k) >= want) continue;
      auto entries = doc.MappingItems(value);
      if (!entries) continue;
      for (const auto& [name, v] : *entries) {
        auto t = ucfs::MatchTensor(doc, v);
        if (t.ok() && t->has_value() && (*t)->shape.size() == 1) {
          ResizeFlat(ar, v, sizes[static_cast<size_t>(*k)]);
        }
      }
    }
  }
}

void RepairModel(Archive& ar, const Document& model0, uint32_t world) {
  Document& doc = ar.doc;
  auto frozen = model0.MappingItems(model0.Get(model0.root(), "frozen_param_shapes"));
  if (!frozen) return;
  const NodeId fragments = doc.Get(doc.root(), "frozen_param_fragments");
  for (const auto& [k, v] : *frozen) {
    auto name = model0.AsStr(k);
    auto shape = ucfs::MatchShape(model0, v);
    if (!name || !shape) continue;
    const uint64_t numel = WrappingNumel(*shape);
    if (numel > kMaxRepairElements * world) continue;
    const NodeId t = doc.Get(fragments, *name);
    if (t != kNoNode) ResizeFlat(ar, t, (numel + world - 1) / world);
  }
}

}  // namespace

void Repair(Work& w, uint8_t flags) {
  // The repairs resize ZeRO-3 flat buffers; ZeRO-1/2 partitions follow
  // other rules (their edits stop at Checkpoint::Open, or reach the views
  // when they keep the sizes).
  if (kFlatGroups) return;
  Slot& model0_slot = w.At(ucfs::RankFileName::Kind::kModel, 0);
  Archive* model0 = w.Edit(model0_slot);
  if (model0 == nullptr) return;
  const uint32_t world = w.world();
  auto sizes = FlatSizes(model0->doc, world);
  const Document model0_doc = model0->doc;  // edits below may touch model 0 itself
  for (Slot& s : w.slots()) {
    Archive* ar = w.Edit(s);
    if (ar == nullptr) continue;
    if (s.kind == ucfs::RankFileName::Kind::kOptim) {
      if (sizes) RepairOptim(*ar, *sizes, flags);
    } else if (flags & 2) {
      RepairModel(*ar, model0_doc, world);
    }
  }
}

}  // namespace ucfs_fuzz
