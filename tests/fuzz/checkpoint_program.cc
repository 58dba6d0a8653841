#include "checkpoint_program.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint_repair.h"
#include "pickle_edits.h"
#include "pickle_surgery.h"
#include "pickle_values.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs_fuzz {

namespace {

// Named places (NamedPlace): "*" takes the next operand as an element index.
const NamedPath kPaths[] = {
    {"optimizer_state_dict"},
    {"optimizer_state_dict", "zero_stage"},
    {"optimizer_state_dict", "partition_count"},
    {"optimizer_state_dict", "fp32_flat_groups"},
    {"optimizer_state_dict", "fp32_flat_groups", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "state"},
    {"optimizer_state_dict", "optimizer_state_dict", "state", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "state", "*", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "param_groups"},
    {"optimizer_state_dict", "optimizer_state_dict", "param_groups", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "param_groups", "*", "params"},
    {"optimizer_state_dict", "loss_scaler"},
    {"ds_config", "zero_optimization"},
    {"ds_config", "zero_optimization", "sub_group_size"},
    {"ds_version"},
    {"module"},
    {"module", "*"},
    {"param_shapes"},
    {"param_shapes", "*"},
    {"param_shapes", "*", "*"},
    {"frozen_param_shapes"},
    {"frozen_param_shapes", "*"},
    {"frozen_param_fragments"},
    {"frozen_param_fragments", "*"},
    {"shared_params"},
    {"buffer_names"},
    {"dp_world_size"},
    {"global_steps"},
};

// The same for ZeRO-1/2 files (a table of its own: checkpoint_fuzz's
// inputs index kPaths, whose size must not change under them).
const NamedPath kFlatGroupPaths[] = {
    {"optimizer_state_dict"},
    {"optimizer_state_dict", "zero_stage"},
    {"optimizer_state_dict", "partition_count"},
    {"optimizer_state_dict", "partition_count", "*"},
    {"optimizer_state_dict", "single_partition_of_fp32_groups"},
    {"optimizer_state_dict", "single_partition_of_fp32_groups", "*"},
    {"optimizer_state_dict", "base_optimizer_state"},
    {"optimizer_state_dict", "base_optimizer_state", "state"},
    {"optimizer_state_dict", "base_optimizer_state", "state", "*"},
    {"optimizer_state_dict", "base_optimizer_state", "state", "*", "*"},
    {"optimizer_state_dict", "base_optimizer_state", "param_groups"},
    {"optimizer_state_dict", "base_optimizer_state", "param_groups", "*", "params"},
    {"optimizer_state_dict", "group_paddings"},
    {"optimizer_state_dict", "param_slice_mappings"},
    {"optimizer_state_dict", "param_slice_mappings", "*"},
    {"optimizer_state_dict", "param_slice_mappings", "*", "*"},
    {"optimizer_state_dict", "loss_scaler"},
    {"ds_config", "zero_optimization"},
    {"ds_config", "zero_optimization", "stage"},
    {"ds_config", "zero_optimization", "round_robin_gradients"},
    {"ds_version"},
    {"module"},
    {"module", "*"},
    {"param_shapes"},
    {"param_shapes", "*"},
    {"param_shapes", "*", "*"},
    {"frozen_param_shapes"},
    {"frozen_param_shapes", "*"},
    {"frozen_param_fragments", "*"},
    {"shared_params"},
    {"buffer_names"},
    {"dp_world_size"},
};

enum Op : uint8_t {
  kEdit,
  kEdit2,  // twice as likely as the rest: edits are the point
  kRepair,
  kReplaceFile,
  kTruncate,
  kRemove,
  kFlipByte,
  kRecord,
  kLatest,
  kAddRank,
  kRetype,
  kAddRecord,
  kNumOps,
};

// A family of tensors of a rank file, for retyping them all at once (a
// checkpoint in another dtype is many consistent edits).
std::vector<NodeId> TensorFamily(const Document& doc, uint8_t which) {
  const NodeId root = doc.root();
  const NodeId osd = doc.Get(root, "optimizer_state_dict");
  const NodeId state =
      doc.Get(doc.Get(osd, kFlatGroups ? "base_optimizer_state" : "optimizer_state_dict"), "state");
  std::vector<NodeId> out;
  auto state_entries = [&](std::optional<std::string_view> name) {
    for (const auto& [k, per_group] :
         doc.MappingItems(state).value_or(std::vector<std::pair<NodeId, NodeId>>{})) {
      for (const auto& [key, v] :
           doc.MappingItems(per_group).value_or(std::vector<std::pair<NodeId, NodeId>>{})) {
        auto t = ucfs::MatchTensor(doc, v);
        if (!t.ok() || !t->has_value()) continue;
        if (name ? doc.AsStr(key) == name : (*t)->shape.size() == 1) out.push_back(v);
      }
    }
  };
  switch (which % 8) {
    case 0:
      return TensorsBelow(
          doc, doc.Get(osd, kFlatGroups ? "single_partition_of_fp32_groups" : "fp32_flat_groups"));
    case 1:
      state_entries("exp_avg");
      return out;
    case 2:
      state_entries("exp_avg_sq");
      return out;
    case 3:
      state_entries(std::nullopt);  // every per-element state
      return out;
    case 4:
      return TensorsBelow(doc, root);
    case 5:
      return TensorsBelow(doc, doc.Get(root, "module"));
    case 6:
      return TensorsBelow(doc, doc.Get(root, "frozen_param_fragments"));
    default:
      for (NodeId n :
           doc.SequenceItems(doc.Get(root, "buffer_names")).value_or(std::vector<NodeId>{})) {
        if (auto name = doc.AsStr(n)) {
          const NodeId t = doc.Get(doc.Get(root, "module"), *name);
          if (IsTensorCall(doc, t)) out.push_back(t);
        }
      }
      return out;
  }
}

// Sets the storage class of a tensor (new pid tuple items, as a shared tuple
// would otherwise change other tensors too).
void SetStorageClass(Document& doc, NodeId tensor, NodeId cls) {
  const NodeId call = PlainCall(doc, tensor);
  if (call == kNoNode) return;
  auto args = doc.SequenceItems(doc.node(call).b);
  if (!args || args->empty() || doc.node((*args)[0]).kind != Kind::kPersistentId) return;
  const NodeId pid = (*args)[0];
  const NodeId tuple = doc.node(pid).a;
  if (tuple == kNoNode || doc.node(tuple).items.size() < 5) return;
  doc.mutable_node(tuple).items[1] = cls;
}

// Zip records a torch.save container may have besides data.pkl and data/*.
constexpr const char* kRecordNames[] = {"byteorder",
                                        ".format_version",
                                        ".storage_alignment",
                                        ".data/serialization_id",
                                        ".data/version",
                                        "version",
                                        "data/99",
                                        "extra/x"};
constexpr const char* kRecordContents[] = {"little", "big", "1",   "64",    "4096", "65535", "3",
                                           "0",      "",    "3\n", "65536", "\xff", "2",     "08"};

}  // namespace

void RunProgram(Program& prog, Work& w) {
  const std::span<const NamedPath> paths = kFlatGroups ? std::span<const NamedPath>(kFlatGroupPaths)
                                                       : std::span<const NamedPath>(kPaths);
  for (size_t ops = 0; ops < kMaxOps && !prog.done(); ++ops) {
    switch (prog.U8() % kNumOps) {
      case kEdit:
      case kEdit2: {
        const Edit e = ReadEdit(prog);
        for (Slot* s : Targets(w, e.target)) {
          Archive* ar = w.Edit(*s);
          if (ar == nullptr) continue;
          // The same file of the next rank, for copying nodes across ranks.
          Slot& peer = w.At(s->kind, s->rank + 1);
          const Document* other = nullptr;
          if (&peer != s) {
            if (Archive* p = w.Edit(peer)) other = &p->doc;
          }
          if (ApplyEdit(ar->doc, e, other, paths)) ar->dirty = true;
        }
        break;
      }
      case kRepair:
        Repair(w, prog.U8());
        break;
      case kReplaceFile: {
        Slot& dst = OneTarget(w, prog.U8());
        Slot& src = OneTarget(w, prog.U8());
        if (&dst == &src) break;
        w.Flush(src);
        w.SetBytes(dst, src.bytes);
        break;
      }
      case kTruncate: {
        Slot& s = OneTarget(w, prog.U8());
        const uint16_t keep = prog.U16();
        w.Flush(s);
        if (!s.bytes) break;
        const size_t n = static_cast<size_t>(s.bytes->size() * uint64_t{keep} / 65536);
        w.SetBytes(s, s.bytes->substr(0, n));
        break;
      }
      case kRemove:
        w.SetBytes(OneTarget(w, prog.U8()), std::nullopt);
        break;
      case kFlipByte: {
        Slot& s = OneTarget(w, prog.U8());
        const uint16_t where = prog.U16();
        const uint8_t x = prog.U8();
        w.Flush(s);
        if (!s.bytes || s.bytes->empty() || x == 0) break;
        std::string bytes = *s.bytes;
        // Mostly near the end, where the zip directory is.
        const size_t at =
            where & 0x8000 ? bytes.size() - 1 - std::min<size_t>(where & 0x7fff, bytes.size() - 1)
                           : static_cast<size_t>(bytes.size() * uint64_t{where} / 32768);
        bytes[at] = static_cast<char>(bytes[at] ^ x);
        w.SetBytes(s, std::move(bytes));
        break;
      }
      case kRecord: {  // a storage record resized or dropped
        Slot& s = OneTarget(w, prog.U8());
        const uint8_t which = prog.U8();
        const uint8_t mode = prog.U8();
        Archive* ar = w.Edit(s);
        if (ar == nullptr || ar->records.size() < 2) break;
        const size_t i = which % ar->records.size();
        if (i == ar->pickle) break;
        std::string& bytes = ar->records[i].second;
        switch (mode % 6) {
          case 0:
            bytes.clear();
            break;
          case 1:
            bytes.resize(bytes.size() / 2);
            break;
          case 2:
            if (!bytes.empty()) bytes.pop_back();
            break;
          case 3:
            bytes.append(static_cast<size_t>(mode / 6 + 1) * 4, '\x7f');
            break;
          case 4:
            ar->records.erase(ar->records.begin() + static_cast<std::ptrdiff_t>(i));
            if (i < ar->pickle) --ar->pickle;
            break;
          default:  // NaN and Inf floats, then whatever bfloat16 makes of them
            for (size_t k = 0; k + 4 <= bytes.size(); k += 4) {
              std::memcpy(bytes.data() + k, (k / 4) % 2 ? "\x00\x00\x80\x7f" : "\x00\x00\xc0\x7f",
                          4);
            }
            break;
        }
        Work::Touch(*ar);
        break;
      }
      case kLatest: {
        static const char* const kLatestValues[] = {"",
                                                    "global_step4\n",
                                                    "nope",
                                                    "../ckpt/global_step4",
                                                    "global_step4/",
                                                    "latest",
                                                    ".",
                                                    "/",
                                                    "global_step4_universal"};
        // One past the values: no `latest` at all (a tag directory alone).
        const size_t which = prog.U8() % (std::size(kLatestValues) + 1);
        if (which == std::size(kLatestValues)) {
          w.RemoveOther(kRoot + "/latest");
        } else {
          w.SetOther(kRoot + "/latest", kLatestValues[which]);
        }
        break;
      }
      case kAddRank:
        w.AddRank(prog.U8());
        break;
      case kRetype: {  // a family of tensors in another dtype, in one or all files
        const uint8_t target = prog.U8();
        const uint8_t family = prog.U8();
        auto [module, name] = GlobalValue(prog.U8() % 19);  // the storage classes
        for (Slot* s : Targets(w, target)) {
          Archive* ar = w.Edit(*s);
          if (ar == nullptr) continue;
          const NodeId cls = ar->doc.Global(module, name);
          for (NodeId t : TensorFamily(ar->doc, family)) SetStorageClass(ar->doc, t, cls);
          ar->dirty = true;
        }
        break;
      }
      case kAddRecord: {  // a record torch >= 2.1 writes, or another, added or rewritten
        Slot& s = OneTarget(w, prog.U8());
        const std::string name = kRecordNames[prog.U8() % std::size(kRecordNames)];
        const std::string contents = kRecordContents[prog.U8() % std::size(kRecordContents)];
        Archive* ar = w.Edit(s);
        if (ar == nullptr) break;
        const std::string full = ar->prefix + "/" + name;
        auto it = std::find_if(ar->records.begin(), ar->records.end(),
                               [&](const auto& r) { return r.first == full; });
        if (it != ar->records.end()) {
          it->second = contents;
        } else {
          // After data.pkl, where torch puts them (the order is torch's to choose).
          ar->records.insert(ar->records.begin() + static_cast<std::ptrdiff_t>(ar->pickle) + 1,
                             {full, contents});
        }
        ar->dirty = true;
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace ucfs_fuzz
