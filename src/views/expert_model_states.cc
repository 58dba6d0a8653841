#include "views/expert_model_states.h"

#include <string>
#include <vector>

#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/views/torch_pickle_builder.h"
#include "views/reshard_rank_files.h"

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
    std::shared_ptr<const Checkpoint> ckpt, SourceFiles* crc_reader) {
  const Checkpoint& c = *ckpt;
  const Document& src = c.rank0_model();
  const std::string& path = c.rank0_model_summary().path;
  TorchPickleBuilder b;
  std::vector<NodeId> copied;
  UCFS_ASSIGN_OR_RETURN(NodeId root, CopyRankZeroModelStates(c, b, &copied));
  Document& doc = b.doc();
  if (doc.node(root).kind != Kind::kDict) {
    return Status::Corruption(path + ": the model states are not a dict");
  }
  auto layers = src.SequenceItems(src.Get(src.root(), "ds_autoep_layers"));
  if (!layers) return Status::Corruption(path + ": ds_autoep_layers is not a list");

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

  NodeId info = doc.Get(root, "universal_checkpoint_info");
  if (info == pickle::kNoNode) {
    info = doc.AddDict({});
    doc.AppendPair(root, doc.AddStr("universal_checkpoint_info"), info);
  } else if (doc.node(info).kind != Kind::kDict) {
    return Status::Corruption(path + ": universal_checkpoint_info is not a dict");
  }
  SetItem(doc, info, "expert_parameter_patterns",
          doc.AddList({doc.AddStr(R"(\.experts\.w[123]$)")}));
  SetItem(doc, info, "ds_autoep_layers", doc.AddList(std::move(entries)));
  return b.Finish(ckpt, ArchivePrefixFor(SharedModelFileName(c.files().mp_rank)), crc_reader);
}

}  // namespace ucfs
