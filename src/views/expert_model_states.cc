#include "views/expert_model_states.h"

#include <string>
#include <utility>
#include <vector>

#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/expert_topology.h"
#include "ucfs/views/torch_pickle_builder.h"

namespace ucfs {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

namespace {

// deepspeed/checkpoint/deepspeed_checkpoint.py AUTOEP_METADATA_FIELDS.
constexpr const char* kLightweightFields[] = {"moe_layer_id",      "module_path",
                                              "expert_key_prefix", "num_experts",
                                              "num_local_experts", "ep_size"};

// Sets `key` of dict `dict` to `value`, in its place or appended, as
// Python's d[key] = value does.
void SetItem(Document& doc, NodeId dict, const std::string& key, NodeId value) {
  if (NodeId* slot = ValueSlot(doc, dict, key)) {
    *slot = value;
  } else {
    doc.AppendPair(dict, doc.AddStr(key), value);
  }
}

}  // namespace

Result<std::shared_ptr<TorchFileContent>> AutoEpUniversalModelStates(
    std::shared_ptr<const Checkpoint> ckpt, const Document& src, const TorchFileSummary& summary,
    uint32_t source, SourceFiles* crc_reader) {
  const std::string& path = summary.path;
  TorchPickleBuilder b;
  std::vector<NodeId> copied;
  UCFS_ASSIGN_OR_RETURN(NodeId root, b.Copy(src, src.root(), summary, source, &copied));
  Document& doc = b.doc();
  doc.set_root(root);
  if (doc.node(root).kind != Kind::kDict) {
    return Status::Corruption(path + ": the model states are not a dict");
  }
  const NodeId saved_layers = src.Get(src.root(), "ds_autoep_layers");
  auto layers = src.SequenceItems(saved_layers);
  if (!layers) return Status::Corruption(path + ": ds_autoep_layers is not a list");

  const bool zero3 = ckpt->partitioning() == Partitioning::kPerParam;
  NodeId metadata = pickle::kNoNode;
  if (zero3) {
    // _get_autoep_metadata(model_state): the loaded list itself.
    if (saved_layers >= copied.size() || copied[saved_layers] == pickle::kNoNode) {
      return Status::Corruption(path + ": ds_autoep_layers was not copied");
    }
    metadata = copied[saved_layers];
  } else {
    // The converter takes the metadata from a torch.load of its own: its
    // objects are not the rewritten file's, so they are copied afresh (one
    // copy of each, as that load shares them), and its keys are the
    // module's constants, one str object each.
    std::vector<NodeId> fresh;
    std::vector<NodeId> keys;
    for (const char* field : kLightweightFields) keys.push_back(doc.AddStr(field));
    std::vector<NodeId> entries;
    for (NodeId entry : *layers) {
      if (!src.MappingItems(entry)) {
        return Status::Corruption(path + ": ds_autoep_layers holds " + src.Repr(entry, 60) +
                                  ", not a layer's dict");
      }
      std::vector<NodeId> kv;
      for (size_t i = 0; i < std::size(kLightweightFields); ++i) {
        const NodeId v = src.Get(entry, kLightweightFields[i]);
        if (v == pickle::kNoNode) continue;
        kv.push_back(keys[i]);
        kv.push_back(doc.CopyFrom(src, v, &fresh));
      }
      entries.push_back(doc.AddDict(std::move(kv)));
    }
    metadata = doc.AddList(std::move(entries));
  }

  NodeId info = doc.Get(root, "universal_checkpoint_info");
  if (info == pickle::kNoNode) {
    info = doc.AddDict({});
    doc.AppendPair(root, doc.AddStr("universal_checkpoint_info"), info);
  } else if (doc.node(info).kind != Kind::kDict) {
    return Status::Corruption(path + ": universal_checkpoint_info is not a dict");
  }
  SetItem(doc, info, "expert_parameter_patterns",
          doc.AddList({doc.AddStr(zero3 ? R"(.*\.experts\.w[123]$)" : R"(\.experts\.w[123]$)")}));
  SetItem(doc, info, "ds_autoep_layers", metadata);
  return b.Finish(ckpt, ArchivePrefixFor(std::string(BaseName(path))), crc_reader);
}

void SetAutoEpLayersRank(Document& doc, NodeId root, uint32_t world, uint32_t rank,
                         bool data_before_expert_parallelism) {
  for (NodeId layers : {doc.Get(root, "ds_autoep_layers"),
                        doc.Get(doc.Get(root, "universal_checkpoint_info"), "ds_autoep_layers")}) {
    auto entries = doc.SequenceItems(layers);
    if (!entries) continue;
    for (NodeId entry : std::vector<NodeId>(*entries)) {
      auto ep = doc.AsInt(doc.Get(entry, "ep_size"));
      if (!ep || *ep <= 0 || world % *ep != 0) continue;
      const ExpertTopology topology{world, static_cast<uint32_t>(*ep),
                                    data_before_expert_parallelism};
      const int64_t ep_rank = topology.EpRank(rank);
      const std::pair<const char*, int64_t> values[] = {
          {"ep_rank", ep_rank},
          {"expert_data_parallel_rank", topology.EdpRank(rank)},
          {"expert_data_parallel_world_size", topology.edp_size()},
      };
      for (const auto& [key, value] : values) {
        if (NodeId* slot = ValueSlot(doc, entry, key)) *slot = doc.AddInt(value);
      }
      if (auto local = doc.AsInt(doc.Get(entry, "num_local_experts"))) {
        if (NodeId* start = ValueSlot(doc, entry, "global_expert_start")) {
          *start = doc.AddInt(ep_rank * *local);
        }
        if (NodeId* end = ValueSlot(doc, entry, "global_expert_end")) {
          *end = doc.AddInt((ep_rank + 1) * *local);
        }
      }
    }
  }
}

}  // namespace ucfs
