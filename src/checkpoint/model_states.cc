// Rank 0's model states: the parameter table, frozen params, buffers and
// tied aliases, and the run's metadata (checkpoint_builder.h).
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include "checkpoint/checkpoint_builder.h"
#include "checkpoint/unserved_layouts.h"
#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/partition.h"

namespace ucfs {

using pickle::Document;
using pickle::NodeId;

Status CheckpointBuilder::ReadModelStates(const ParsedRankFile& tf) {
  if (!tf.doc->MappingItems(tf.doc->root())) return tf.Error("top-level object is not a dict");
  UCFS_RETURN_IF_ERROR(ReadParamShapes(tf));
  UCFS_RETURN_IF_ERROR(ReadFrozenParamShapes(tf));
  UCFS_RETURN_IF_ERROR(ReadTiedParams(tf));
  UCFS_RETURN_IF_ERROR(ReadRunMetadata(tf));
  return ReadTrainingDtype(tf);
}

Status CheckpointBuilder::ReadParamShapes(const ParsedRankFile& tf) {
  const Document& doc = *tf.doc;
  const NodeId root = doc.root();
  const NodeId shapes = doc.Get(root, "param_shapes");
  auto groups = doc.SequenceItems(shapes);
  if (!groups) {
    return tf.Error("no 'param_shapes' list: not the model states of a ZeRO checkpoint");
  }
  for (NodeId group : *groups) {
    auto items = doc.MappingItems(group);
    if (!items) return tf.Error("param_shapes holds a " + doc.Repr(group, 60) + ", not a dict");
    SubGroupInfo sg;
    sg.file_buffer = static_cast<uint32_t>(c_.sub_groups_.size());
    uint64_t offset = 0;
    for (const auto& [k, v] : *items) {
      auto name = doc.AsStr(k);
      auto shape = MatchShape(doc, v);
      if (!name || !shape) {
        return tf.Error("param_shapes entry " + doc.Repr(k, 60) + " is not name -> torch.Size");
      }
      if (HasParam(std::string(*name))) {
        return tf.Error("param_shapes lists '" + Printable(*name) + "' twice");
      }
      auto numel = CheckedNumel(*shape);
      if (!numel) {
        return tf.Error("param '" + Printable(*name) + "' of shape " + ShapeString(*shape) +
                        " has more than 2^58 elements");
      }
      UCFS_RETURN_IF_ERROR(CountElements(tf, *name, *numel));
      ParamInfo p;
      p.name = std::string(*name);
      p.shape = std::move(*shape);
      p.numel = *numel;
      p.partition_numel = PartitionNumel(p.numel, c_.world_size());
      p.sub_group = static_cast<uint32_t>(c_.sub_groups_.size());
      p.offset = offset;
      // ZeRO-3 packs each param's slot, ZeRO-1/2 the whole param.
      auto next =
          CheckedAdd(offset, flat_groups() ? p.numel : p.partition_numel, kMaxFileQuantity / 16);
      if (!next) {
        return tf.Error("sub-group " + std::to_string(c_.sub_groups_.size()) +
                        " holds more than 2^58 elements per rank (at '" + Printable(p.name) + "')");
      }
      offset = *next;
      sg.params.push_back(static_cast<uint32_t>(c_.params_.size()));
      c_.params_.push_back(std::move(p));
    }
    if (sg.params.empty()) {
      // DeepSpeed makes no empty sub-group (stage3.py) and cannot flatten
      // an empty param group (stage_1_and_2.py): the views could not
      // write this checkpoint back (found by checkpoint_fuzz: a reshard
      // view at N=1 dropped it, and its files no longer opened).
      return tf.Error("param_shapes[" + std::to_string(c_.sub_groups_.size()) +
                      "] lists no parameter");
    }
    if (flat_groups()) {
      // Stage 1/2: one flat buffer per param group, sub-group k = group k.
      sg.param_group = static_cast<uint32_t>(c_.sub_groups_.size());
      sg.numel = offset;
      // Over every rank, until the optimizer files name an expert group.
      for (uint32_t r = 0; r < c_.world_size(); ++r) sg.members.push_back(r);
      sg.partition_numel = FlatPartitionNumel(offset, sg.partition_world());
      for (uint32_t p : sg.params) {
        c_.params_[p].partition_numel = sg.partition_numel;
        c_.params_[p].param_group = sg.param_group;
      }
    } else {
      sg.partition_numel = offset;
      for (uint32_t p : sg.params) sg.numel += c_.params_[p].numel;
    }
    c_.sub_groups_.push_back(std::move(sg));
  }
  if (flat_groups()) c_.param_group_count_ = static_cast<uint32_t>(c_.sub_groups_.size());
  c_.file_buffer_count_ = static_cast<uint32_t>(c_.sub_groups_.size());
  return Status::OK();
}

Status CheckpointBuilder::ReadFrozenParamShapes(const ParsedRankFile& tf) {
  const Document& doc = *tf.doc;
  const NodeId root = doc.root();
  if (auto frozen = doc.MappingItems(doc.Get(root, "frozen_param_shapes"))) {
    for (const auto& [k, v] : *frozen) {
      auto name = doc.AsStr(k);
      auto shape = MatchShape(doc, v);
      if (!name || !shape) return tf.Error("frozen_param_shapes entry is not name -> torch.Size");
      auto numel = CheckedNumel(*shape);
      if (!numel) {
        return tf.Error("frozen param '" + Printable(*name) + "' of shape " + ShapeString(*shape) +
                        " has more than 2^58 elements");
      }
      UCFS_RETURN_IF_ERROR(CountElements(tf, *name, *numel));
      FrozenParamInfo f;
      f.name = std::string(*name);
      f.shape = std::move(*shape);
      f.numel = *numel;
      f.partition_numel = flat_groups() ? f.numel : PartitionNumel(f.numel, c_.world_size());
      c_.frozen_.push_back(std::move(f));
    }
  }
  return Status::OK();
}

Status CheckpointBuilder::ReadTiedParams(const ParsedRankFile& tf) {
  const Document& doc = *tf.doc;
  const NodeId root = doc.root();
  if (auto shared = doc.MappingItems(doc.Get(root, "shared_params"))) {
    for (const auto& [k, v] : *shared) {
      auto alias = doc.AsStr(k);
      auto canonical = doc.AsStr(v);
      if (!alias || !canonical) return tf.Error("shared_params is not a dict of names");
      c_.tied_.push_back({std::string(*alias), std::string(*canonical)});
    }
  }
  return Status::OK();
}

Status CheckpointBuilder::ReadRunMetadata(const ParsedRankFile& tf) {
  const Document& doc = *tf.doc;
  const NodeId root = doc.root();
  if (auto v = doc.AsStr(doc.Get(root, "ds_version"))) c_.ds_version_ = std::string(*v);
  c_.global_steps_ = doc.AsInt(doc.Get(root, "global_steps"));
  if (auto dp = doc.AsInt(doc.Get(root, "dp_world_size"))) {
    // ZeRO-1/2 have no model file per rank to show a missing last rank:
    // the world size the files imply is then one too small.
    if (flat_groups() && *dp > static_cast<int64_t>(c_.world_size())) {
      const std::string missing = JoinPath(
          c_.files_.tag_dir, RankFileNameFor(RankFileName::Kind::kOptim, c_.files_.optim_prefix,
                                             c_.world_size(), c_.files_.mp_rank));
      return Status::NotFound(missing + ": missing: " + std::string(BaseName(tf.path())) +
                              " says dp_world_size " + std::to_string(*dp))
          .WithFile(missing);
    }
    if (*dp != static_cast<int64_t>(c_.world_size())) {
      return tf.Error("inconsistent world size: dp_world_size is " + std::to_string(*dp) +
                      " but the tag directory has optimizer files for " +
                      std::to_string(c_.world_size()) + " ranks");
    }
  }
  c_.autoep_ = doc.SequenceItems(doc.Get(root, "ds_autoep_layers")).has_value();
  const NodeId ds_config = doc.Get(root, "ds_config");
  UCFS_RETURN_IF_ERROR(RefuseUnservedConfig(doc, ds_config, tf.path()));
  // A positive whole number, else unknown (HF's "auto" left unfilled).
  auto count = [&doc, ds_config](const char* key) -> std::optional<int64_t> {
    auto v = doc.AsNumber(doc.Get(ds_config, key));
    if (!v || !(*v >= 1 && *v < 0x1p62) || *v != static_cast<double>(static_cast<int64_t>(*v))) {
      return std::nullopt;
    }
    return static_cast<int64_t>(*v);
  };
  c_.batch_ = {count("train_batch_size"), count("train_micro_batch_size_per_gpu"),
               count("gradient_accumulation_steps")};
  if (auto type = doc.AsStr(doc.Get(doc.Get(ds_config, "optimizer"), "type"))) {
    c_.optimizer_type_ = std::string(*type);
  }
  NodeId zero_cfg = doc.Get(ds_config, "zero_optimization");
  if (auto sgs = doc.AsNumber(doc.Get(zero_cfg, "sub_group_size")); sgs && *sgs >= 0) {
    // A float in the JSON (1e20: never split) may not fit: as good as infinite.
    c_.sub_group_size_ = *sgs < 0x1p64 ? static_cast<uint64_t>(*sgs) : UINT64_MAX;
  }
  // A top-level key (runtime/constants.py), read by groups.py.
  c_.data_before_expert_parallelism_ =
      doc.AsInt(doc.Get(ds_config, "use_data_before_expert_parallelism")).value_or(0) != 0;
  c_.round_robin_gradients_ =
      doc.AsInt(doc.Get(zero_cfg, "round_robin_gradients")).value_or(0) != 0;
  if (auto aligned = doc.AsInt(doc.Get(zero_cfg, "parameter_alignment"))) {
    c_.parameter_alignment_config_ = *aligned != 0;
  }
  return Status::OK();
}

Status CheckpointBuilder::ReadTrainingDtype(const ParsedRankFile& tf) {
  const Document& doc = *tf.doc;
  const NodeId root = doc.root();
  // The module's entries are placeholders in the training dtype.
  if (auto module = doc.MappingItems(doc.Get(root, "module"))) {
    for (const auto& [k, v] : *module) {
      auto name = doc.AsStr(k);
      if (!name || !HasParam(std::string(*name))) continue;
      UCFS_ASSIGN_OR_RETURN(auto t, tf.MatchTensor(v));
      if (t) {
        c_.lp_dtype_ = t->dtype;
        break;
      }
    }
  }
  return Status::OK();
}

// Persistent buffers are real tensors in rank 0's module.
Status CheckpointBuilder::ReadBuffers(const ParsedRankFile& model0) {
  const Document& doc = *model0.doc;
  auto names = doc.SequenceItems(doc.Get(doc.root(), "buffer_names"));
  if (!names) return Status::OK();
  const NodeId module = doc.Get(doc.root(), "module");
  for (NodeId n : *names) {
    auto name = doc.AsStr(n);
    if (!name) return model0.Error("buffer_names holds a non-string");
    const std::string what = "module['" + Printable(*name) + "']";
    const NodeId v = doc.Get(module, *name);
    if (v == pickle::kNoNode) return model0.Error("buffer " + what + " is missing");
    UCFS_ASSIGN_OR_RETURN(TensorRef t, model0.RequireTensor(v, what));
    if (!t.contiguous()) return model0.Error("buffer " + what + " is not contiguous");
    UCFS_RETURN_IF_ERROR(CountElements(model0, *name, t.numel()));
    UCFS_ASSIGN_OR_RETURN(uint64_t offset, model0.DataOffset(t));
    c_.buffers_.push_back(
        {std::string(*name), t.shape, t.dtype, Extent{c_.world_size(), offset, t.byte_size()}});
  }
  return Status::OK();
}

// Each rank's frozen_param_fragments: this rank's partition of each frozen
// param, in the model-states file.
Status CheckpointBuilder::ReadFrozenFragments(const ParsedRankFile& model0) {
  const uint32_t w = c_.world_size();
  auto slots = CheckedMul<uint64_t>(c_.frozen_.size(), w, kMaxSlots);
  if (!slots) {
    return model0.Error(std::to_string(c_.frozen_.size()) + " frozen params at world size " +
                        std::to_string(w) + " are more than " + std::to_string(kMaxSlots) +
                        " fragments in all");
  }
  c_.frozen_slots_.resize(*slots);
  if (c_.frozen_.empty()) return Status::OK();
  for (uint32_t r = 0; r < w; ++r) {
    const std::string& path = c_.files_.model_files[r];
    if (path.empty()) {
      spdlog::warn("{}: missing, so frozen parameters cannot be read",
                   JoinPath(c_.files_.tag_dir, RankFileNameFor(RankFileName::Kind::kModel, "", r)));
      continue;
    }
    ParsedRankFile loaded;
    const ParsedRankFile* tf = &model0;
    if (r > 0) {
      UCFS_ASSIGN_OR_RETURN(loaded, Load(w + r, path));
      tf = &loaded;
    }
    const NodeId fragments = tf->doc->Get(tf->doc->root(), "frozen_param_fragments");
    for (size_t f = 0; f < c_.frozen_.size(); ++f) {
      FrozenParamInfo& info = c_.frozen_[f];
      const std::string what = "frozen_param_fragments['" + Printable(info.name) + "']";
      const NodeId v = tf->doc->Get(fragments, info.name);
      if (v == pickle::kNoNode) return tf->Error("no " + what);
      UCFS_ASSIGN_OR_RETURN(TensorRef t, tf->RequireTensor(v, what));
      if (t.numel() < info.partition_numel || !t.contiguous()) {
        return tf->Error(what + " has " + std::to_string(t.numel()) +
                         " elements, the partition of " + std::to_string(info.numel) + " over " +
                         std::to_string(w) + " ranks needs " +
                         std::to_string(info.partition_numel));
      }
      if (r == 0) {
        info.dtype = t.dtype;
      } else if (t.dtype != info.dtype) {
        return tf->Error(what + " dtype differs from rank 0's");
      }
      UCFS_ASSIGN_OR_RETURN(uint64_t offset, tf->DataOffset(t));
      c_.frozen_slots_[f * w + r] = {w + r, offset, true};
    }
  }
  return Status::OK();
}

// ZeRO-1/2 model states hold the whole model: a frozen parameter is its
// module entry (stage 2 also lists it in frozen_param_shapes and keeps a
// copy in frozen_param_fragments; stage 1 and BF16_Optimizer do neither,
// so there every module entry that is no trainable param, buffer or tied
// alias is one).
Status CheckpointBuilder::ReadWholeFrozenParams(const ParsedRankFile& model0) {
  const Document& doc = *model0.doc;
  const NodeId root = doc.root();
  auto module = doc.MappingItems(doc.Get(root, "module"));
  std::vector<Checkpoint::Slot> found(c_.frozen_.size());
  if (module) {
    for (const auto& [k, v] : *module) {
      auto name = doc.AsStr(k);
      if (!name) return model0.Error("module holds a key that is not a string");
      const std::string n(*name);
      if (HasParam(n) || IsBuffer(n) || IsTiedAlias(n)) continue;
      const std::string what = "module['" + Printable(n) + "']";
      UCFS_ASSIGN_OR_RETURN(TensorRef t, model0.RequireTensor(v, what));
      auto f = c_.FindFrozen(n);
      if (!f) {
        auto numel = CheckedNumel(t.shape);
        if (!numel) return model0.Error(what + " has more than 2^58 elements");
        UCFS_RETURN_IF_ERROR(CountElements(model0, n, *numel));
        FrozenParamInfo info;
        info.name = n;
        info.shape = t.shape;
        info.numel = *numel;
        info.partition_numel = *numel;
        c_.frozen_.push_back(std::move(info));
        found.emplace_back();
        f = c_.frozen_.size() - 1;
      }
      FrozenParamInfo& info = c_.frozen_[*f];
      if (t.shape != info.shape || !t.contiguous()) {
        return model0.Error("frozen param " + what + " has shape " + ShapeString(t.shape) +
                            (t.contiguous() ? "" : " (not contiguous)") +
                            ", but frozen_param_shapes says " + ShapeString(info.shape));
      }
      info.dtype = t.dtype;
      UCFS_ASSIGN_OR_RETURN(uint64_t offset, model0.DataOffset(t));
      found[*f] = {c_.world_size(), offset, true};  // rank 0's model file is source W
    }
  }
  for (size_t f = 0; f < c_.frozen_.size(); ++f) {
    if (!found[f].present) {
      return model0.Error("frozen param '" + Printable(c_.frozen_[f].name) +
                          "' of frozen_param_shapes is not in module");
    }
  }
  // The whole tensor is "rank 0's fragment" (FlatGroup placement with
  // P = numel puts every element on rank 0).
  const uint32_t w = c_.world_size();
  auto slots = CheckedMul<uint64_t>(c_.frozen_.size(), w, kMaxSlots);
  if (!slots) {
    return model0.Error(std::to_string(c_.frozen_.size()) + " frozen params at world size " +
                        std::to_string(w) + " are more than " + std::to_string(kMaxSlots) +
                        " fragments in all");
  }
  c_.frozen_slots_.assign(*slots, Checkpoint::Slot{});
  for (size_t f = 0; f < c_.frozen_.size(); ++f) c_.frozen_slots_[f * w] = found[f];
  return Status::OK();
}

}  // namespace ucfs
