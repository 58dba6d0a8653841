#include "ucfs/checkpoint/parallel_checkpoint.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "ucfs/base/checked_math.h"

namespace ucfs {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The merged shapes of `p` from its local shape and rule (tp-pp.md 3.2).
Status MergedShapes(const UniversalInfo& info, uint32_t tp, const std::string& file,
                    MergedParam* p) {
  const auto& local = p->local_shape;
  auto fail = [&](const std::string& why) {
    return Status::Corruption(file + ": param '" + p->name + "' of local shape " +
                              ShapeText(local) + " " + why)
        .WithFile(file);
  };
  p->storage_shape = local;
  switch (p->merge.rule) {
    case MergeRule::kReplicated:
    case MergeRule::kAverage:
      break;
    case MergeRule::kAffine:
      p->storage_shape = p->merge.affine->logical_shape;
      break;
    case MergeRule::kTwoSubParamsDim0:
      if (local.empty() || local[0] % 2 != 0) return fail("has no two halves along dim 0");
      p->storage_shape[0] *= tp;
      break;
    case MergeRule::kConcat:
      if (static_cast<int>(local.size()) <= p->merge.cat_dim) {
        return fail("cannot be concatenated along dim " + std::to_string(p->merge.cat_dim) +
                    " (row parallel)");
      }
      p->storage_shape[static_cast<size_t>(p->merge.cat_dim)] *= tp;
      break;
    case MergeRule::kSubParams: {
      const SubParamShape& s = *p->merge.sub_param_shape;
      // Sizes from the pickle: summed and multiplied checked (the local
      // shape's numel is bounded already).
      std::vector<int64_t> full;
      for (const auto& sizes : s.shape) {
        std::optional<int64_t> sum = 0;
        for (int64_t d : sizes) sum = d < 1 || !sum ? std::nullopt : CheckedAdd(*sum, d);
        if (!sum) return fail("has a SubparamShape dimension that is not a positive size");
        full.push_back(*sum);
      }
      for (int64_t size : s.shape[static_cast<size_t>(s.partition_dim)]) {
        if (size % tp != 0) {
          return fail("has a sub-param of " + std::to_string(size) +
                      " along its SubparamShape's partition_dim, which does not split over " +
                      std::to_string(tp) + " tensor-parallel ranks");
        }
      }
      std::vector<int64_t> part = full;
      part[static_cast<size_t>(s.partition_dim)] /= tp;
      std::optional<int64_t> local_numel = 1, part_numel = 1;
      for (int64_t d : local)
        local_numel = local_numel ? CheckedMul(*local_numel, d) : std::nullopt;
      for (int64_t d : part) part_numel = part_numel ? CheckedMul(*part_numel, d) : std::nullopt;
      if (!local_numel || !part_numel || *local_numel != *part_numel) {
        return fail("is not a slice of its SubparamShape " + ShapeText(full) + " at " +
                    std::to_string(tp) + " tensor-parallel ranks");
      }
      p->storage_shape = full;
      break;
    }
  }
  p->shape = p->storage_shape;
  if (p->merge.vocab) {
    const int64_t rows = *info.original_vocab_size;
    if (p->shape.size() != 2 || rows < 1 || rows > p->shape[0]) {
      return fail("is no vocabulary of " + std::to_string(rows) + " rows (merged " +
                  ShapeText(p->storage_shape) + ")");
    }
    p->shape[0] = rows;
  }
  return Status::OK();
}

}  // namespace

namespace {

// Shard-local extents into the grid's sources (mapped apart: MapState
// merges into the extent before it, which names another shard's file).
void Renumber(const std::vector<Extent>& local, uint32_t base, std::vector<Extent>* out) {
  for (Extent e : local) {
    e.file += base;
    out->push_back(e);
  }
}

}  // namespace

Status ParallelCheckpoint::MapShardState(uint32_t shard, size_t param, size_t state, uint64_t begin,
                                         uint64_t end, std::vector<Extent>* out) const {
  if (shard >= shards_.size()) {
    return Status::InvalidArgument("no shard group " + std::to_string(shard));
  }
  std::vector<Extent> local;
  UCFS_RETURN_IF_ERROR(shards_[shard]->MapState(param, state, begin, end, &local));
  Renumber(local, source_base_[shard], out);
  return Status::OK();
}

Status ParallelCheckpoint::MapShardFrozen(uint32_t shard, size_t frozen, uint64_t begin,
                                          uint64_t end, std::vector<Extent>* out) const {
  if (shard >= shards_.size()) {
    return Status::InvalidArgument("no shard group " + std::to_string(shard));
  }
  std::vector<Extent> local;
  UCFS_RETURN_IF_ERROR(shards_[shard]->MapFrozen(frozen, begin, end, &local));
  Renumber(local, source_base_[shard], out);
  return Status::OK();
}

Status CheckParallelDimensions(const ParallelDegrees& degrees, const pickle::Document& model_states,
                               const std::string& file) {
  const pickle::NodeId dims =
      model_states.Get(model_states.root(), "checkpoint_parallel_dimensions");
  if (dims == pickle::kNoNode) return Status::OK();
  const auto pp = model_states.AsInt(model_states.Get(dims, "pp_degree"));
  const auto tp = model_states.AsInt(model_states.Get(dims, "tp_degree"));
  if (!pp || !tp) {
    return Status::Corruption(file +
                              ": checkpoint_parallel_dimensions has no int pp_degree and tp_degree")
        .WithFile(file);
  }
  if (*pp == degrees.pp && *tp == degrees.tp) return Status::OK();
  const std::string saved =
      *pp >= 1 && *tp >= 1 && *pp <= UINT32_MAX && *tp <= UINT32_MAX
          ? DescribeDegrees({static_cast<uint32_t>(*pp), static_cast<uint32_t>(*tp), degrees.dp})
          : "pp_degree " + std::to_string(*pp) + ", tp_degree " + std::to_string(*tp);
  return Status::Corruption(file + ": checkpoint_parallel_dimensions says the run saved " + saved +
                            ", but the files here make " + DescribeDegrees(degrees) +
                            " (a pipeline stage's or a tensor-parallel rank's files missing?)")
      .WithFile(file);
}

Result<ParallelCheckpoint> ParallelCheckpoint::Open(Env& env, const std::string& path,
                                                    const CheckpointOptions& options) {
  UCFS_ASSIGN_OR_RETURN(ParallelCheckpointFiles files,
                        ListParallelCheckpointFiles(env, path, options.tag));
  return OpenListed(env, std::move(files), options);
}

Result<ParallelCheckpoint> ParallelCheckpoint::OpenListed(Env& env, ParallelCheckpointFiles files,
                                                          const CheckpointOptions& options) {
  UCFS_RETURN_IF_ERROR(CheckNoParallelFileMissing(files));
  std::vector<std::shared_ptr<const Checkpoint>> shards;
  for (const CheckpointFiles& shard : files.shards) {
    UCFS_ASSIGN_OR_RETURN(Checkpoint opened, Checkpoint::OpenShard(env, shard, options.source));
    UCFS_RETURN_IF_ERROR(CheckParallelDimensions(files.degrees, opened.rank0_model(),
                                                 opened.files().model_files[0]));
    shards.push_back(std::make_shared<const Checkpoint>(std::move(opened)));
  }
  return FromShards(std::move(files), std::move(shards), options.universal_info);
}

ParallelCheckpoint ParallelCheckpoint::FromShards(
    ParallelCheckpointFiles files, std::vector<std::shared_ptr<const Checkpoint>> shards,
    std::shared_ptr<const SuppliedUniversalInfo> supplied) {
  ParallelCheckpoint c;
  c.files_ = std::move(files);
  c.shards_ = std::move(shards);
  for (const auto& shard : c.shards_) {
    c.source_base_.push_back(static_cast<uint32_t>(c.sources_.size()));
    c.sources_.insert(c.sources_.end(), shard->sources().begin(), shard->sources().end());
  }
  c.supplied_info_ = std::move(supplied);
  c.merge_status_ = c.MakeNameTable();
  if (!c.merge_status_.ok()) c.params_.clear();  // no half a table
  return c;
}

ParallelCheckpoint ParallelCheckpoint::OfDataParallel(
    std::shared_ptr<const Checkpoint> checkpoint) {
  ParallelCheckpointFiles files;
  files.degrees = {1, 1, checkpoint->world_size()};
  files.shards.push_back(checkpoint->files());
  auto supplied = checkpoint->supplied_universal_info();
  return FromShards(std::move(files), {std::move(checkpoint)}, std::move(supplied));
}

std::shared_ptr<const ParallelCheckpoint> ParallelCheckpoint::SharedOfDataParallel(
    std::shared_ptr<const Checkpoint> checkpoint) {
  return std::make_shared<const ParallelCheckpoint>(OfDataParallel(std::move(checkpoint)));
}

namespace {

// The runs of an affine-mapped param, checked against the saved slices and
// against the category rule a pattern also names (issue 37, item 4).
Status LayOutAffine(const std::vector<std::vector<int64_t>>& slice_shapes, const std::string& file,
                    MergedParam* m) {
  const auto fail = [&](const Status& why) {
    std::string msg = file + ": param '" + m->name + "': its affine map: " + why.message();
    return (why.code() == Status::Code::kNotSupported ? Status::NotSupported(std::move(msg))
                                                      : Status::Corruption(std::move(msg)))
        .WithFile(file);
  };
  auto blocks = LayOutAffineMap(*m->merge.affine, slice_shapes);
  if (!blocks.ok()) return fail(blocks.status());
  if (m->merge.category) {
    const bool replicated = *m->merge.category == MergeRule::kReplicated;
    if (!AffineLayoutIsCategory(
            *blocks, slice_shapes, m->merge.affine->logical_shape,
            replicated ? std::nullopt : std::optional<size_t>(m->merge.cat_dim))) {
      return fail(Status::Corruption(
          std::string("disagrees with its ") +
          (replicated ? "tp_replicated pattern (each slice the whole param)"
                      : "row-parallel pattern (the slices concatenated along dim 1)")));
    }
  }
  m->affine_blocks = std::make_shared<const std::vector<AffineBlock>>(std::move(blocks).value());
  return Status::OK();
}

// Expert param i of `lead` (its family-0 copy) as the concatenation of its
// EP ranks' copies (expert-layouts.md §3.4, §4).
Status StackExperts(const Checkpoint& lead, size_t i, uint32_t tp, MergedParam* m) {
  const ParamInfo& param = lead.params()[i];
  const std::string& file = lead.files().model_files[0];
  if (tp > 1) {
    return Status::NotSupported(file + ": param '" + param.name +
                                "' is an expert param of a tensor-parallel run, whose experts "
                                "DeepSpeed places otherwise")
        .WithFile(file);
  }
  const SubGroupInfo& own = lead.sub_groups()[param.sub_group];
  const uint32_t ep = own.expert_parallel;
  m->expert_families.assign(ep, i);
  // Each family lists its copies in the buffer's order (AddExpertFamilies).
  const auto at = static_cast<size_t>(
      std::find(own.params.begin(), own.params.end(), static_cast<uint32_t>(i)) -
      own.params.begin());
  for (const SubGroupInfo& family : lead.sub_groups()) {
    if (family.file_buffer != own.file_buffer || family.family == 0) continue;
    if (family.family >= ep || at >= family.params.size() ||
        lead.params()[family.params[at]].name != param.name) {
      return Status::Corruption(file + ": expert param '" + param.name +
                                "' has no copy for EP rank " + std::to_string(family.family))
          .WithFile(file);
    }
    m->expert_families[family.family] = family.params[at];
  }
  if (lead.autoep()) {
    // [local experts, ...] by EP rank: every expert in global order.
    if (param.shape.empty()) {
      return Status::Corruption(file + ": AutoEP expert param '" + param.name +
                                "' is 0-dim, not a stack of local experts")
          .WithFile(file);
    }
    m->shape = param.shape;
    m->shape[0] *= ep;
    m->ep_num_experts = m->shape[0];
  } else {
    // One local expert's param by EP rank: dim 0 counts the EP ranks.
    m->shape = param.shape;
    m->shape.insert(m->shape.begin(), ep);
    m->ep_num_experts = ep;
  }
  m->storage_shape = m->shape;
  return Status::OK();
}

}  // namespace

Status ParallelCheckpoint::MakeNameTable() {
  ParallelCheckpoint& c = *this;
  const uint32_t tp = c.files_.degrees.tp;
  const Checkpoint& first = *c.shards_[0];
  const std::string& first_model = first.files().model_files[0];
  auto info = ResolveUniversalInfo(first.rank0_model(), first_model, c.supplied_info_.get());
  c.has_universal_info_ = !info.ok() || info->has_value();
  if (!info.ok()) return info.status();
  if (info->has_value()) c.unsafe_ = UnsafeAtAnotherTensorDegree(**info, tp);
  if (!info->has_value() && tp > 1) {
    return Status::NotSupported(
               first_model + ": no universal_checkpoint_info, so how its " + std::to_string(tp) +
               " tensor-parallel slices merge is unknown (Megatron-DeepSpeed saves it; "
               "ds_to_universal.py --inject_missing_state concatenates every param on dim 0, which "
               "doubles replicated ones: DeepSpeed #6503); supply the patterns with "
               "--universal-info FILE")
        .WithFile(first_model);
  }
  auto rules = MergeRules::Compile(info->value_or(UniversalInfo{}));
  if (!rules.ok()) return rules.status().Annotate(first_model).WithFile(first_model);
  c.rules_ = std::make_shared<MergeRules>(std::move(rules).value());

  // Names in the order the stages list them; a later stage's copy of a
  // name is skipped (the converter skips pipeline_replicated ones, and
  // without a pattern its stages race: the lowest is taken).
  std::map<std::string, size_t> seen;
  for (uint32_t p = 0; p < c.files_.degrees.pp; ++p) {
    const Checkpoint& lead = *c.shards_[static_cast<size_t>(p) * tp];
    for (size_t i = 0; i < lead.params().size(); ++i) {
      const ParamInfo& param = lead.params()[i];
      // An expert param's other EP ranks' copies are merged with family 0.
      if (param.family != 0) continue;
      if (auto it = seen.find(param.name); it != seen.end()) {
        if (c.params_[it->second].stage == p) {
          return Status::Corruption(lead.files().model_files[0] + ": param '" + param.name +
                                    "' is in param_shapes twice")
              .WithFile(lead.files().model_files[0]);
        }
        c.params_[it->second].copies_on.push_back(p);
        continue;
      }
      MergedParam m;
      m.name = param.name;
      m.stage = p;
      m.local_shape = param.shape;
      m.slices.push_back(i);
      if (lead.sub_groups()[param.sub_group].expert_parallel > 1) {
        UCFS_RETURN_IF_ERROR(StackExperts(lead, i, tp, &m));
        seen.emplace(m.name, c.params_.size());
        c.params_.push_back(std::move(m));
        continue;
      }
      auto merge = c.rules_->Decide(param.name);
      if (!merge.ok()) return merge.status().Annotate(first_model).WithFile(first_model);
      m.merge = std::move(merge).value();
      std::vector<std::vector<int64_t>> slice_shapes = {param.shape};
      for (uint32_t t = 1; t < tp; ++t) {
        const Checkpoint& other = *c.shards_[static_cast<size_t>(p) * tp + t];
        const std::string& file = other.files().model_files[0];
        auto j = other.FindParam(param.name);
        if (!j) {
          return Status::Corruption(file + ": no param '" + param.name +
                                    "', which tensor-parallel rank 0 of its stage has")
              .WithFile(file);
        }
        // Slices differ in shape only where an affine map says how (an
        // uneven split).
        if (other.params()[*j].shape != param.shape && m.merge.rule != MergeRule::kAffine) {
          return Status::Corruption(file + ": param '" + param.name + "' has local shape " +
                                    ShapeText(other.params()[*j].shape) + ", rank 0's " +
                                    ShapeText(param.shape))
              .WithFile(file);
        }
        m.slices.push_back(*j);
        slice_shapes.push_back(other.params()[*j].shape);
      }
      if (m.merge.rule == MergeRule::kAffine) {
        UCFS_RETURN_IF_ERROR(LayOutAffine(slice_shapes, first_model, &m));
      }
      if (info->has_value()) {
        UCFS_RETURN_IF_ERROR(MergedShapes(c.rules_->info(), tp, lead.files().model_files[0], &m));
      } else {
        // T = 1 without rules: each param is its one slice, as saved (a
        // 0-dim one too, which no rule concatenates).
        m.storage_shape = m.shape = m.local_shape;
      }
      seen.emplace(m.name, c.params_.size());
      c.params_.push_back(std::move(m));
    }
  }
  if (std::vector<std::string> unused = c.rules_->UnusedPatterns(); !unused.empty()) {
    std::string list;
    for (const std::string& u : unused) list += (list.empty() ? "'" : ", '") + u + "'";
    return Status::Corruption(first_model + ": universal_checkpoint_info patterns no param " +
                              "matches: " + list +
                              " (ds_to_universal.py refuses them without --no_strict: a pattern "
                              "naming no param is a pattern for another model)")
        .WithFile(first_model);
  }
  return Status::OK();
}

}  // namespace ucfs
