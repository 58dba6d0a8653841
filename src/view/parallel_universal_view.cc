#include "ucfs/view/parallel_universal_view.h"

#include <algorithm>
#include <utility>

#include "ucfs/view/parallel_consolidated_view.h"
#include "ucfs/view/storage_spec.h"
#include "ucfs/view/torch_pickle_builder.h"
#include "view/merged_runs.h"
#include "view/universal_files.h"

namespace ucfs {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// `files` reads the sources of averaged merges.
Status AddMergedParam(View& view, InodeId zero, const std::shared_ptr<const ParallelCheckpoint>& c,
                      const MergedParam& p, const std::shared_ptr<SourceFiles>& files,
                      SourceFiles* crc_reader) {
  const uint32_t lead_shard = p.stage * c->degrees().tp;
  const Checkpoint& lead = c->shard(lead_shard);
  const ParamInfo& local = lead.params()[p.slices[0]];
  UCFS_RETURN_IF_ERROR(CheckParamDirectoryName(lead, local.name));
  UCFS_ASSIGN_OR_RETURN(InodeId dir, view.AddDirectory(zero, p.name));
  const ContainerStyle& style = lead.container_style();
  const std::vector<Xattr> base_xattrs = {
      {"user.ucfs.param", p.name},
      {"user.ucfs.shape", ShapeString(p.shape)},
      {"user.ucfs.numel", std::to_string(Numel(p.shape))},
      {"user.ucfs.param_group", std::to_string(local.param_group)},
      {"user.ucfs.stage", std::to_string(p.stage)},
      {"user.ucfs.tensor_parallel", std::to_string(c->degrees().tp)},
      {"user.ucfs.world_size", std::to_string(c->degrees().dp)},
  };
  for (size_t s = 0; s < lead.states().size(); ++s) {
    const StateInfo& state = lead.states()[s];
    const uint64_t es = Info(state.dtype).element_size;
    UCFS_ASSIGN_OR_RETURN(std::vector<StorageRun> runs, MergedStateRuns(*c, p, s, es, files));
    UCFS_ASSIGN_OR_RETURN(
        std::string pkl,
        UniversalDictPickle(state.dtype, p.shape, static_cast<uint64_t>(Numel(p.storage_shape)),
                            state.requires_grad, UniversalKeysOf(p.merge)));
    StorageSpec storage;
    storage.key = "0";
    storage.runs = std::move(runs);
    UCFS_ASSIGN_OR_RETURN(auto content, TorchFileContent::Make(c, style, state.name, std::move(pkl),
                                                               {std::move(storage)}, crc_reader));
    std::vector<Xattr> xattrs = base_xattrs;
    xattrs.push_back({"user.ucfs.state", state.name});
    xattrs.push_back({"user.ucfs.dtype", std::string(Info(state.dtype).torch_name)});
    UCFS_RETURN_IF_ERROR(
        view.AddFile(dir, state.name + ".pt", std::move(content), std::move(xattrs)).status());
  }
  // The step of the param's group, from tensor rank 0 of its stage.
  for (const ScalarState& scalar : lead.scalar_states()[local.sub_group]) {
    if (scalar.name != "step") continue;
    UCFS_ASSIGN_OR_RETURN(auto content,
                          StepFile(c, style, scalar, c->source_base(lead_shard), crc_reader));
    std::vector<Xattr> xattrs = base_xattrs;
    xattrs.push_back({"user.ucfs.state", "step"});
    UCFS_RETURN_IF_ERROR(
        view.AddFile(dir, "step.pt", std::move(content), std::move(xattrs)).status());
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<View>> BuildParallelUniversalView(
    Env& env, std::shared_ptr<const ParallelCheckpoint> c, const UniversalViewOptions& options) {
  UCFS_RETURN_IF_ERROR(c->merge_status());
  WarnIfUnsafeAtAnotherTensorDegree(*c);
  int64_t mtime = 0;
  for (const auto& s : c->sources()) mtime = std::max(mtime, s.identity.mtime_ns);
  auto view = std::make_unique<View>(env, mtime);
  for (const auto& s : c->sources()) view->AddSource(s);
  std::unique_ptr<SourceFiles> crc_reader;
  if (options.compute_crc) {
    crc_reader =
        std::make_unique<SourceFiles>(env, [p = c.get()](uint32_t i) { return p->sources()[i]; });
  }
  const Checkpoint& first = c->shard(0);
  InodeId udir = 0;
  UCFS_ASSIGN_OR_RETURN(InodeId zero, AddUniversalTop(env, *view, first.files(), &udir));
  const auto files =
      std::make_shared<SourceFiles>(env, [p = c.get()](uint32_t i) { return p->sources()[i]; });
  for (const MergedParam& p : c->params()) {
    UCFS_RETURN_IF_ERROR(AddMergedParam(*view, zero, c, p, files, crc_reader.get()));
  }
  // Shard group 0's sources are the grid's first: its own indices hold.
  std::shared_ptr<const Checkpoint> shard0(c, &first);
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
      const uint32_t index = c->source_base(m) + w + r;
      UCFS_RETURN_IF_ERROR(
          view->AddFile(udir, std::string(BaseName(model.path)),
                        std::make_shared<SourceContent>(index, model.identity.size))
              .status());
    }
  }
  if (options.consolidated) AddParallelConsolidatedDirOrWarn(env, *view, c, *options.consolidated);
  return view;
}

}  // namespace ucfs
