#include "ucfs/views/universal_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "ucfs/checkpoint/ds_version.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/torch_pickle_builder.h"
#include "views/average_slices.h"
#include "views/expert_model_states.h"
#include "views/merged_runs.h"
#include "views/universal_files.h"

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
    // ZeROCheckpoint._update_partition_count: every group's count is the
    // data-parallel degree, an expert group's (saved W / EP) too.
    if (NodeId* counts = ValueSlot(doc, root, "partition_count");
        counts != nullptr && doc.SequenceItems(*counts)) {
      std::vector<NodeId> w(doc.SequenceItems(*counts)->size());
      for (NodeId& v : w) v = doc.AddInt(ckpt->world_size());
      *counts = doc.AddList(std::move(w));
    }
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

std::string UniversalTag(const std::string& tag) { return tag + "_universal"; }

namespace {

// The xattrs of every file of merged param p's directory: the slices'
// (tensor rank 0's of its stage) group and ranks.
std::vector<Xattr> ParamXattrs(const ParallelCheckpoint& c, const MergedParam& p) {
  const Checkpoint& lead = c.shard(p.stage * c.degrees().tp);
  const ParamInfo& local = lead.params()[p.slices[0]];
  return {
      {"user.ucfs.param", p.name},
      {"user.ucfs.shape", ShapeString(p.shape)},
      {"user.ucfs.numel", std::to_string(NumelOf(p.shape))},
      {"user.ucfs.param_group", std::to_string(local.param_group)},
      {"user.ucfs.sub_group", std::to_string(local.sub_group)},
      {"user.ucfs.stage", std::to_string(p.stage)},
      {"user.ucfs.tensor_parallel", std::to_string(c.degrees().tp)},
      {"user.ucfs.world_size", std::to_string(c.degrees().dp)},
      {"user.ucfs.source_ranks", RanksText(lead, p.slices[0])},
  };
}

// How the converter writes a param's state files.
enum class StateFileForm {
  kBare,  // ZeRO-3 at T = 1: a 1-D tensor of exactly numel elements
  kDict,  // {cat_dim?, param_n_sub_params?, vocab_tensor?, 'param': the merged tensor}
};

StateFileForm FormOf(const ParallelCheckpoint& c) {
  // ZeRO-3's path of ds_to_universal.py writes bare tensors; with tensor
  // parallelism it writes wrong ones (tp-pp.md), and ucfs lays the merge
  // out as the stage-1/2 path does.
  return c.shard(0).partitioning() == Partitioning::kPerParam && c.degrees().tp == 1
             ? StateFileForm::kBare
             : StateFileForm::kDict;
}

// <state>.pt of merged param p: its state s, whole.
Result<std::shared_ptr<TorchFileContent>> StateFile(
    const std::shared_ptr<const ParallelCheckpoint>& c, const MergedParam& p, size_t s,
    const std::shared_ptr<SourceFiles>& files, SourceFiles* crc_reader) {
  const Checkpoint& lead = c->shard(p.stage * c->degrees().tp);
  const StateInfo& state = lead.states()[s];
  const uint64_t es = Info(state.dtype).element_size;
  StorageSpec storage;
  storage.key = "0";
  std::string pkl;
  if (FormOf(*c) == StateFileForm::kBare && p.expert_families.empty()) {
    // ZeRO-3's bare tensors take no merge rule at T = 1 (its expert stacks
    // are the dicts ZeRO-1/2's are: ds_to_universal.py
    // _consolidate_zero3_autoep_expert_states).
    const uint64_t numel = NumelOf(p.local_shape);
    UCFS_ASSIGN_OR_RETURN(
        pkl, BareTensorPickle(state.dtype, {static_cast<int64_t>(numel)}, state.requires_grad));
    storage.runs.push_back(
        StateRun(0, static_cast<uint32_t>(p.slices[0]), static_cast<uint32_t>(s), 0, numel * es));
  } else {
    // Without universal_checkpoint_info (T = 1) a param is its one slice,
    // {'cat_dim': 0, 'param': ...}, a 0-dim one as [1]: torch.cat, which
    // the converter merges with, makes no 0-dim tensors. (A 0-dim param
    // stays 0-dim where a rule replicates it, as the converter's slice 0;
    // no rule concatenates one: the name table refused it.)
    std::vector<int64_t> shape = p.shape;
    if (shape.empty() && !c->has_universal_info()) shape = {1};
    if (!p.expert_families.empty()) {
      UCFS_ASSIGN_OR_RETURN(
          pkl, UniversalExpertPickle(state.dtype, shape, state.requires_grad, p.ep_num_experts));
    } else {
      UCFS_ASSIGN_OR_RETURN(pkl,
                            UniversalDictPickle(state.dtype, shape, NumelOf(p.storage_shape),
                                                state.requires_grad, UniversalKeysOf(p.merge)));
    }
    UCFS_ASSIGN_OR_RETURN(storage.runs, MergedStateRuns(*c, p, s, es, files));
  }
  return TorchFileContent::Make(c, lead.container_style(), state.name, std::move(pkl),
                                {std::move(storage)}, crc_reader);
}

// Whether the converter of the saving DeepSpeed writes step.pt: its
// stage-1/2 path does; its ZeRO-3 path extracts no step. With tensor
// parallelism at ZeRO-3, the converters before DeepSpeed #8168 (AutoTP
// ZeRO-3 consolidation, merged after 0.19.2: 0.19.3 is the first release
// that can hold it [I]) wrote wrong files, and ucfs lays such a merge out as
// the stage-1/2 path, step.pt included; from it on, the converter merges
// ZeRO-3 slices itself, without a step.
bool WritesStep(const ParallelCheckpoint& c) {
  const Checkpoint& shard0 = c.shard(0);
  if (shard0.partitioning() != Partitioning::kPerParam) return true;
  return c.degrees().tp > 1 && !VersionAtLeast(shard0.ds_version(), {0, 19, 3});
}

// zero/<param>/: a file per state, and the param group's step.pt where the
// converter writes it (WritesStep).
Status AddParamDirectory(View& view, InodeId zero,
                         const std::shared_ptr<const ParallelCheckpoint>& c, const MergedParam& p,
                         const std::shared_ptr<SourceFiles>& files, SourceFiles* crc_reader) {
  const uint32_t lead_shard = p.stage * c->degrees().tp;
  const Checkpoint& lead = c->shard(lead_shard);
  const ParamInfo& local = lead.params()[p.slices[0]];
  UCFS_RETURN_IF_ERROR(CheckParamDirectoryName(lead, p.name));
  UCFS_ASSIGN_OR_RETURN(InodeId dir, view.AddDirectory(zero, p.name));
  const std::vector<Xattr> param_xattrs = ParamXattrs(*c, p);
  // One file per state of the param's group, named by its key (Adam's
  // exp_avg, Muon's momentum_buffer, ...), each the whole param's state.
  for (const SubGroupState& gs : lead.StatesOf(p.slices[0])) {
    const size_t s = gs.state;
    const StateInfo& state = lead.states()[s];
    UCFS_ASSIGN_OR_RETURN(auto content, StateFile(c, p, s, files, crc_reader));
    std::vector<Xattr> xattrs = param_xattrs;
    xattrs.push_back({"user.ucfs.state", state.name});
    xattrs.push_back({"user.ucfs.dtype", std::string(Info(state.dtype).torch_name)});
    UCFS_RETURN_IF_ERROR(
        view.AddFile(dir, state.name + ".pt", std::move(content), std::move(xattrs)).status());
  }
  if (!WritesStep(*c)) return Status::OK();
  // The step of the param's group, from tensor rank 0 of its stage.
  for (const ScalarState& scalar : lead.scalar_states()[local.sub_group]) {
    if (scalar.name != "step") continue;
    UCFS_ASSIGN_OR_RETURN(auto content, StepFile(c, lead.container_style(), scalar,
                                                 c->source_base(lead_shard), crc_reader));
    std::vector<Xattr> xattrs = param_xattrs;
    xattrs.push_back({"user.ucfs.state", "step"});
    UCFS_RETURN_IF_ERROR(
        view.AddFile(dir, "step.pt", std::move(content), std::move(xattrs)).status());
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<View>> BuildUniversalView(Env& env,
                                                 std::shared_ptr<const ParallelCheckpoint> c,
                                                 const UniversalViewOptions& options) {
  UCFS_RETURN_IF_ERROR(c->merge_status());
  WarnIfUnsafeAtAnotherTensorDegree(*c);
  int64_t mtime = 0;
  for (const auto& s : c->sources()) mtime = std::max(mtime, s.identity.mtime_ns);
  auto view = std::make_unique<View>(env, mtime);
  // The grid's sources keep their indices, so its mapped extents are view
  // sources as they are.
  for (const auto& s : c->sources()) view->AddSource(s);
  std::unique_ptr<SourceFiles> crc_reader;
  if (options.compute_crc) {
    crc_reader =
        std::make_unique<SourceFiles>(env, [p = c.get()](uint32_t i) { return p->sources()[i]; });
  }
  // Shard group 0's sources are the grid's first: its own indices hold.
  std::shared_ptr<const Checkpoint> shard0(c, &c->shard(0));
  InodeId udir = 0;
  UCFS_ASSIGN_OR_RETURN(InodeId zero, AddUniversalTop(env, *view, shard0->files(), &udir));
  const auto files =
      std::make_shared<SourceFiles>(env, [p = c.get()](uint32_t i) { return p->sources()[i]; });
  for (const MergedParam& p : c->params()) {
    UCFS_RETURN_IF_ERROR(AddParamDirectory(*view, zero, c, p, files, crc_reader.get()));
  }
  if (c->degrees().mp() == 1) {
    UCFS_RETURN_IF_ERROR(AddModuleTensorFiles(*view, zero, shard0, files, crc_reader.get()));
  }
  UCFS_ASSIGN_OR_RETURN(auto optimizer_state, OptimizerStateFile(shard0, crc_reader.get()));
  UCFS_RETURN_IF_ERROR(
      view->AddFile(zero, "optimizer_state.pt", std::move(optimizer_state)).status());
  // Every model-states file, as the converter copies mp_rank_* (and, for
  // ZeRO-3, as it lists every model file).
  for (uint32_t m = 0; m < c->degrees().mp(); ++m) {
    const Checkpoint& shard = c->shard(m);
    const uint32_t w = shard.world_size();
    for (uint32_t r = 0; r < w; ++r) {
      const SourceFile& model = shard.sources()[w + r];
      if (model.path.empty()) continue;
      if (shard.autoep() && c->degrees().mp() == 1) {
        // Re-saved with AutoEP's universal metadata: ZeRO-1/2's one file, or
        // each rank's at ZeRO-3 (rank 0's parsed already, the others here).
        std::optional<TorchFileSummary> summary;
        std::optional<Document> doc;
        if (r > 0) {
          UCFS_ASSIGN_OR_RETURN(summary, SummarizeTorchFile(env, model.path));
          auto parsed = pickle::Parse(summary->pickle);
          if (!parsed.ok()) return parsed.status().Annotate(model.path + ": data.pkl");
          doc = std::move(parsed).value();
        }
        UCFS_ASSIGN_OR_RETURN(auto rewritten, AutoEpUniversalModelStates(
                                                  shard0, r > 0 ? *doc : shard.rank0_model(),
                                                  r > 0 ? *summary : shard.rank0_model_summary(),
                                                  w + r, crc_reader.get()));
        UCFS_RETURN_IF_ERROR(
            view->AddFile(udir, std::string(BaseName(model.path)), std::move(rewritten)).status());
        continue;
      }
      const uint32_t index = c->source_base(m) + w + r;
      UCFS_RETURN_IF_ERROR(
          view->AddFile(udir, std::string(BaseName(model.path)),
                        std::make_shared<SourceContent>(index, model.identity.size))
              .status());
    }
  }
  if (options.consolidated) AddConsolidatedDirOrWarn(env, *view, c, *options.consolidated);
  return view;
}

Result<std::unique_ptr<View>> BuildUniversalView(Env& env,
                                                 std::shared_ptr<const Checkpoint> checkpoint,
                                                 const UniversalViewOptions& options) {
  return BuildUniversalView(env, ParallelCheckpoint::SharedOfDataParallel(std::move(checkpoint)),
                            options);
}

}  // namespace ucfs
