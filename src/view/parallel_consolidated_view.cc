#include "ucfs/view/parallel_consolidated_view.h"

#include <spdlog/spdlog.h>

#include <set>
#include <string>
#include <utility>

#include "ucfs/codec/torch_tensor.h"
#include "ucfs/view/source_files.h"
#include "view/merged_runs.h"

namespace ucfs {

Result<std::vector<ConsolidatedTensor>> ParallelConsolidatedStateDict(Env& env,
                                                                      const ParallelCheckpoint& c) {
  UCFS_RETURN_IF_ERROR(c.merge_status());
  const ParallelDegrees& degrees = c.degrees();
  std::vector<ConsolidatedTensor> out;
  // The rank files computed runs read (widened buffers, averaged slices),
  // each opened on its first read.
  const auto files =
      std::make_shared<SourceFiles>(env, [&c](uint32_t i) { return c.sources()[i]; });
  std::set<std::string> buffers;
  for (uint32_t p = 0; p < degrees.pp; ++p) {
    const uint32_t m = p * degrees.tp;
    const Checkpoint& lead = c.shard(m);
    for (const BufferInfo& b : lead.buffers()) {
      if (!buffers.insert(b.name).second) continue;
      const uint32_t source = c.source_base(m) + b.extent.file;
      UCFS_ASSIGN_OR_RETURN(ConsolidatedTensor t, BufferTensor(b, source, false, files));
      out.push_back(std::move(t));
    }
  }
  std::set<std::string> frozen;
  for (uint32_t p = 0; p < degrees.pp; ++p) {
    const uint32_t m = p * degrees.tp;
    const Checkpoint& lead = c.shard(m);
    for (uint32_t f = 0; f < lead.frozen_params().size(); ++f) {
      const FrozenParamInfo& info = lead.frozen_params()[f];
      if (degrees.tp > 1) {
        const std::string& file = lead.files().model_files[0];
        return Status::NotSupported(file + ": frozen param '" + Printable(info.name) + "' of a " +
                                    std::to_string(degrees.tp) +
                                    "-way tensor-parallel checkpoint: its slices are not merged")
            .WithFile(file);
      }
      if (!frozen.insert(info.name).second) continue;
      ConsolidatedTensor t;
      t.name = info.name;
      t.dtype = info.dtype;
      t.shape = info.shape;
      StorageRun run;
      run.kind = StorageRun::Kind::kFrozen;
      run.shard = m;
      run.param = f;
      run.length = info.numel * Info(info.dtype).element_size;
      t.storage.runs.push_back(run);
      out.push_back(std::move(t));
    }
  }
  for (const MergedParam& param : c.params()) {
    const StateInfo& fp32 = c.shard(param.stage * degrees.tp).states()[0];
    const uint64_t es = Info(fp32.dtype).element_size;
    UCFS_ASSIGN_OR_RETURN(std::vector<StorageRun> runs, MergedStateRuns(c, param, 0, es, files));
    ConsolidatedTensor t;
    t.name = param.name;
    t.dtype = fp32.dtype;
    t.shape = param.shape;
    t.requires_grad = fp32.requires_grad;
    t.storage.runs = FirstBytesOf(std::move(runs), NumelOf(param.shape) * es);
    out.push_back(std::move(t));
  }
  std::vector<TiedParam> tied;
  for (uint32_t p = 0; p < degrees.pp; ++p) {
    for (const TiedParam& alias : c.shard(p * degrees.tp).tied_params()) {
      bool seen = false;
      for (const TiedParam& other : tied) seen = seen || other.alias == alias.alias;
      if (!seen) tied.push_back(alias);
    }
  }
  UCFS_RETURN_IF_ERROR(FinishStateDict(tied, &out));
  return out;
}

void AddParallelConsolidatedDirOrWarn(Env& env, View& view,
                                      std::shared_ptr<const ParallelCheckpoint> c,
                                      const ConsolidatedOptions& options) {
  const Checkpoint& first = c->shard(0);
  const std::string name = ConsolidatedDirName(first.files().tag);
  Status s = [&]() -> Status {
    UCFS_ASSIGN_OR_RETURN(std::vector<ConsolidatedTensor> tensors,
                          ParallelConsolidatedStateDict(env, *c));
    UCFS_ASSIGN_OR_RETURN(InodeId dir, view.AddDirectory(kRootInode, name));
    const ConsolidatedSource source{c, first.container_style(), first.ds_version()};
    std::unique_ptr<SourceFiles> crc_reader;
    if (options.compute_crc) {
      crc_reader =
          std::make_unique<SourceFiles>(env, [p = c.get()](uint32_t i) { return p->sources()[i]; });
    }
    return AddConsolidatedFiles(view, dir, source, tensors, options, crc_reader.get());
  }();
  if (!s.ok()) spdlog::warn("no {} directory: {}", name, TerminalSafe(s.message()));
}

}  // namespace ucfs
