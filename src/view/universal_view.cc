#include "ucfs/view/universal_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/view/consolidated_view.h"
#include "ucfs/view/torch_pickle_builder.h"
#include "view/average_slices.h"
#include "view/merged_runs.h"
#include "view/universal_files.h"

namespace ucfs {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

namespace {

// NAME_MAX of Linux file systems, and of FUSE's readdir.
constexpr size_t kMaxNameBytes = 255;

// The ranks holding a param's elements: "0-3", "0-1" when the last ranks
// hold only padding (ZeRO-3), "2" or "1-2" for a ZeRO-1/2 param in the
// middle of its group.
std::string RanksText(const Checkpoint& c, size_t param) {
  std::optional<uint32_t> first;
  uint32_t last = 0;
  const std::vector<uint64_t> counts = c.ElementsPerRank(param);
  for (uint32_t r = 0; r < counts.size(); ++r) {
    if (counts[r] == 0) continue;
    if (!first) first = r;
    last = r;
  }
  const uint32_t from = first.value_or(0);
  return from == last ? std::to_string(last) : std::to_string(from) + "-" + std::to_string(last);
}

}  // namespace

// ds_to_universal's optimizer_state.pt: rank 0's optimizer_state_dict plus
// a 'param_groups' key, its optimizer's param_groups. At ZeRO-1/2 without
// the three sharded entries (base_optimizer_state, whose param_groups it
// is, single_partition_of_fp32_groups and param_slice_mappings).
Result<std::shared_ptr<TorchFileContent>> OptimizerStateFile(std::shared_ptr<const Checkpoint> ckpt,
                                                             SourceFiles* crc_reader) {
  const Document& src = ckpt->rank0_optim();
  const TorchFileSummary& summary = ckpt->rank0_optim_summary();
  TorchPickleBuilder builder;
  std::vector<NodeId> copied;
  // Rank 0's optimizer file is checkpoint source 0.
  UCFS_ASSIGN_OR_RETURN(NodeId root, builder.Copy(src, src.Get(src.root(), "optimizer_state_dict"),
                                                  summary, 0, &copied));
  Document& doc = builder.doc();
  doc.set_root(root);
  if (doc.node(root).kind != Kind::kDict) {
    return Status::Corruption(summary.path + ": optimizer_state_dict is not a dict");
  }
  if (ckpt->partitioning() == Partitioning::kPerParam) {
    const NodeId param_groups = doc.Get(doc.Get(root, "optimizer_state_dict"), "param_groups");
    if (param_groups == pickle::kNoNode) {
      return Status::Corruption(summary.path + ": optimizer_state_dict has no param_groups");
    }
    doc.AppendPair(root, doc.AddStr("param_groups"), param_groups);
  } else {
    const NodeId param_groups = doc.Get(doc.Get(root, "base_optimizer_state"), "param_groups");
    if (param_groups == pickle::kNoNode) {
      return Status::NotSupported(
          summary.path +
          ": base_optimizer_state keeps no param_groups (an elastic_checkpoint save?); "
          "DeepSpeed's universal loader restores every group's hyper-parameters from them");
    }
    std::vector<NodeId> kept;
    const pickle::Node& n = doc.node(root);
    for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
      auto key = doc.AsStr(n.items[i]);
      if (key && (*key == "base_optimizer_state" || *key == "single_partition_of_fp32_groups" ||
                  *key == "param_slice_mappings")) {
        continue;
      }
      kept.push_back(n.items[i]);
      kept.push_back(n.items[i + 1]);
    }
    kept.push_back(doc.AddStr("param_groups"));
    kept.push_back(param_groups);
    doc.mutable_node(root).items = std::move(kept);
  }
  return builder.Finish(ckpt, "optimizer_state", crc_reader);
}

Result<std::shared_ptr<TorchFileContent>> StepFile(std::shared_ptr<const StateMapper> mapper,
                                                   const ContainerStyle& style,
                                                   const ScalarState& step, uint32_t source_base,
                                                   SourceFiles* crc_reader) {
  if (!step.is_tensor) {
    UCFS_ASSIGN_OR_RETURN(std::string pkl, NumberPickle(step.value, step.dtype == DType::kFloat64));
    return TorchFileContent::Make(mapper, style, "step", std::move(pkl), {}, crc_reader);
  }
  UCFS_ASSIGN_OR_RETURN(std::string pkl, BareTensorPickle(step.dtype, {}, false));
  StorageSpec storage;
  storage.key = "0";
  StorageRun run;
  run.kind = StorageRun::Kind::kSource;
  run.source = source_base + step.extent.file;
  run.source_offset = step.extent.offset;
  run.length = step.extent.length;
  storage.runs.push_back(run);
  return TorchFileContent::Make(mapper, style, "step", std::move(pkl), {storage}, crc_reader);
}

Status CheckParamDirectoryName(const Checkpoint& c, const std::string& name) {
  if (!IsSafePathComponent(name)) {
    return Status::InvalidArgument(c.files().model_files[0] + ": parameter name '" +
                                   Printable(name) +
                                   "' cannot be a directory name (it contains '/' or NUL, or "
                                   "is empty, '.' or '..')");
  }
  // ds_to_universal.py makes the same directory; past NAME_MAX no file
  // system (and no FUSE readdir) can hold it.
  if (name.size() > kMaxNameBytes) {
    return Status::InvalidArgument(
        c.files().model_files[0] + ": parameter name '" + Printable(name, 64) + "' is " +
        std::to_string(name.size()) + " bytes, longer than a directory name may be (" +
        std::to_string(kMaxNameBytes) + "): the universal view cannot show it");
  }
  return Status::OK();
}

void WarnIfUnsafeAtAnotherTensorDegree(const ParallelCheckpoint& c) {
  if (!c.unsafe_at_another_tensor_degree()) return;
  spdlog::warn("{}: {}", TerminalSafe(c.shard(0).files().model_files[0]),
               *c.unsafe_at_another_tensor_degree());
}

Status AddLatestFile(Env& env, View& view, const CheckpointFiles& files, std::string_view name,
                     const std::string& text) {
  auto content = std::make_shared<InlineContent>(text);
  const std::string latest = JoinPath(files.root, "latest");
  auto named = files.root.empty() ? Result<std::string>(Status::NotFound("no root"))
                                  : ReadLatestTag(env, latest);
  if (!named.ok() || *named != files.tag) {
    return view.AddFile(kRootInode, name, std::move(content)).status();
  }
  return view.AddFileMadeFrom(kRootInode, name, std::move(content), latest).status();
}

Result<InodeId> AddUniversalTop(Env& env, View& view, const CheckpointFiles& files, InodeId* udir) {
  const std::string utag = UniversalTag(files.tag);
  if (!files.root.empty()) {
    view.BackRootBy(files.root);
  } else {
    // A tag directory without a root: show it as one, with its tag.
    UCFS_RETURN_IF_ERROR(view.AddSourceDirectory(kRootInode, files.tag, files.tag_dir).status());
    UCFS_RETURN_IF_ERROR(
        view.AddFile(kRootInode, "latest", std::make_shared<InlineContent>(files.tag)).status());
  }
  UCFS_RETURN_IF_ERROR(AddLatestFile(env, view, files, "latest_universal", utag));
  UCFS_ASSIGN_OR_RETURN(*udir, view.AddDirectory(kRootInode, utag));
  return view.AddDirectory(*udir, "zero");
}

namespace {

// The xattrs of every file of param p's directory.
std::vector<Xattr> ParamXattrs(const Checkpoint& c, size_t p) {
  const ParamInfo& param = c.params()[p];
  return {
      {"user.ucfs.param", param.name},
      {"user.ucfs.shape", ShapeString(param.shape)},
      {"user.ucfs.numel", std::to_string(param.numel)},
      {"user.ucfs.param_group", std::to_string(param.param_group)},
      {"user.ucfs.sub_group", std::to_string(param.sub_group)},
      {"user.ucfs.world_size", std::to_string(c.world_size())},
      {"user.ucfs.source_ranks", RanksText(c, p)},
  };
}

// <state>.pt of param p: its state s, whole.
// `merged`: the param's universal_checkpoint_info rule (a Megatron run at
// T = 1), or null.
Result<std::shared_ptr<TorchFileContent>> StateFile(const std::shared_ptr<const Checkpoint>& ckpt,
                                                    size_t p, size_t s, const MergedParam* merged,
                                                    const std::shared_ptr<SourceFiles>& files,
                                                    SourceFiles* crc_reader) {
  const ParamInfo& param = ckpt->params()[p];
  const StateInfo& state = ckpt->states()[s];
  const bool flat_groups = ckpt->partitioning() == Partitioning::kFlatGroup;
  const uint64_t bytes = param.numel * Info(state.dtype).element_size;
  // ZeRO-3's files are bare 1-D tensors; ZeRO-1/2's are dicts holding the
  // param at its shape (a 0-dim param as [1]: torch.cat, which
  // ds_to_universal merges with, makes no 0-dim tensors).
  std::vector<int64_t> shape = param.shape;
  if (shape.empty()) shape = {1};
  Result<std::string> pkl =
      !flat_groups
          ? BareTensorPickle(state.dtype, {static_cast<int64_t>(param.numel)}, state.requires_grad)
      : merged == nullptr
          ? UniversalParamPickle(state.dtype, shape, state.requires_grad)
          // The vocabulary's rows cut to original_vocab_size, its storage whole.
          // (A 0-dim param stays 0-dim where replicated, as the converter's slice
          // 0; no rule concatenates one: the name table refused it.)
          : UniversalDictPickle(state.dtype, merged->shape, param.numel, state.requires_grad,
                                UniversalKeysOf(merged->merge));
  UCFS_RETURN_IF_ERROR(pkl.status());
  StorageSpec storage;
  storage.key = "0";
  StorageRun run;
  run.kind = StorageRun::Kind::kState;
  run.length = bytes;
  run.param = static_cast<uint32_t>(p);
  run.state = static_cast<uint32_t>(s);
  if (merged != nullptr && merged->merge.rule == MergeRule::kAverage) {
    // The converter's mean of one slice, 0 + s0: not the slice's bytes
    // where it holds -0.0.
    if (state.dtype != DType::kFloat32) {
      return Status::NotSupported("param '" + Printable(param.name) +
                                  "': averaged (parameter_to_average_patterns) only in float32");
    }
    run.kind = StorageRun::Kind::kComputed;
    run.computed = std::make_shared<AverageSlices>(
        *ckpt, files, std::vector<AverageSlices::Slice>{{0, p}}, s, param.numel, param.name);
  }
  storage.runs.push_back(run);
  return TorchFileContent::Make(ckpt, state.name, std::move(pkl).value(), {storage}, crc_reader);
}

// zero/<param>/: a file per state, and at ZeRO-1/2 step.pt.
Status AddParamDirectory(View& view, InodeId zero, const std::shared_ptr<const Checkpoint>& ckpt,
                         size_t p, const MergedParam* merged,
                         const std::shared_ptr<SourceFiles>& files, SourceFiles* crc_reader) {
  const ParamInfo& param = ckpt->params()[p];
  UCFS_RETURN_IF_ERROR(CheckParamDirectoryName(*ckpt, param.name));
  UCFS_ASSIGN_OR_RETURN(InodeId pdir, view.AddDirectory(zero, param.name));
  const std::vector<Xattr> param_xattrs = ParamXattrs(*ckpt, p);
  for (size_t s = 0; s < ckpt->states().size(); ++s) {
    const StateInfo& state = ckpt->states()[s];
    UCFS_ASSIGN_OR_RETURN(auto content, StateFile(ckpt, p, s, merged, files, crc_reader));
    std::vector<Xattr> xattrs = param_xattrs;
    xattrs.push_back({"user.ucfs.state", state.name});
    xattrs.push_back({"user.ucfs.dtype", std::string(Info(state.dtype).torch_name)});
    UCFS_RETURN_IF_ERROR(
        view.AddFile(pdir, state.name + ".pt", std::move(content), std::move(xattrs)).status());
  }
  if (ckpt->partitioning() == Partitioning::kFlatGroup) {
    // ds_to_universal's stage-1/2 path also writes the param group's step.
    for (const ScalarState& scalar : ckpt->scalar_states()[param.sub_group]) {
      if (scalar.name != "step") continue;
      UCFS_ASSIGN_OR_RETURN(auto content,
                            StepFile(ckpt, ckpt->container_style(), scalar, 0, crc_reader));
      std::vector<Xattr> xattrs = param_xattrs;
      xattrs.push_back({"user.ucfs.state", "step"});
      UCFS_RETURN_IF_ERROR(
          view.AddFile(pdir, "step.pt", std::move(content), std::move(xattrs)).status());
    }
  }
  return Status::OK();
}

}  // namespace

std::string UniversalTag(const std::string& tag) { return tag + "_universal"; }

Result<std::unique_ptr<View>> BuildUniversalView(Env& env, std::shared_ptr<const Checkpoint> ckpt,
                                                 const UniversalViewOptions& options) {
  int64_t mtime = 0;
  for (const auto& s : ckpt->sources()) mtime = std::max(mtime, s.identity.mtime_ns);
  auto view = std::make_unique<View>(env, mtime);
  // Checkpoint sources keep their indices, so MapState's extents are view
  // sources as they are.
  for (const auto& s : ckpt->sources()) view->AddSource(s);

  std::unique_ptr<SourceFiles> crc_reader;
  if (options.compute_crc) {
    crc_reader = std::make_unique<SourceFiles>(
        env, [c = ckpt.get()](uint32_t i) { return c->sources()[i]; });
  }

  InodeId udir = 0;
  UCFS_ASSIGN_OR_RETURN(InodeId zero, AddUniversalTop(env, *view, ckpt->files(), &udir));

  // A Megatron-DeepSpeed run saved at T = 1 carries universal_checkpoint_info,
  // by whose rules the converter writes each ZeRO-1/2 param's dict (ZeRO-3's
  // bare tensors take none at T = 1).
  std::optional<ParallelCheckpoint> rules;
  if (ckpt->partitioning() == Partitioning::kFlatGroup) {
    const std::string& model0 = ckpt->files().model_files[0];
    UCFS_ASSIGN_OR_RETURN(
        std::optional<UniversalInfo> info,
        ResolveUniversalInfo(ckpt->rank0_model(), model0, ckpt->supplied_universal_info().get()));
    if (info) {
      rules = ParallelCheckpoint::OfDataParallel(ckpt);
      UCFS_RETURN_IF_ERROR(rules->merge_status());
      WarnIfUnsafeAtAnotherTensorDegree(*rules);
      // One shard group: its name table is the checkpoint's params, in order.
      if (rules->params().size() != ckpt->params().size()) {
        return Status::Corruption(model0 + ": a param name is in param_shapes twice")
            .WithFile(model0);
      }
    }
  }
  const auto files =
      std::make_shared<SourceFiles>(env, [c = ckpt.get()](uint32_t i) { return c->sources()[i]; });
  for (size_t p = 0; p < ckpt->params().size(); ++p) {
    const MergedParam* merged = rules ? &rules->params()[p] : nullptr;
    UCFS_RETURN_IF_ERROR(AddParamDirectory(*view, zero, ckpt, p, merged, files, crc_reader.get()));
  }
  UCFS_RETURN_IF_ERROR(AddModuleTensorFiles(*view, zero, ckpt, files, crc_reader.get()));

  UCFS_ASSIGN_OR_RETURN(auto optimizer_state, OptimizerStateFile(ckpt, crc_reader.get()));
  UCFS_RETURN_IF_ERROR(
      view->AddFile(zero, "optimizer_state.pt", std::move(optimizer_state)).status());

  const uint32_t w = ckpt->world_size();
  for (uint32_t r = 0; r < w; ++r) {
    const SourceFile& model = ckpt->sources()[w + r];
    if (model.path.empty()) continue;
    UCFS_RETURN_IF_ERROR(view->AddFile(udir, std::string(BaseName(model.path)),
                                       std::make_shared<SourceContent>(w + r, model.identity.size))
                             .status());
  }
  if (options.consolidated) AddConsolidatedDirOrWarn(env, *view, ckpt, *options.consolidated);
  return view;
}

}  // namespace ucfs
