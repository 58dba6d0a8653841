// The rank files a checkpoint is built from, and the order of the steps
// that read its parts (checkpoint_builder.h).
#include "checkpoint/checkpoint_builder.h"

#include <memory>
#include <utility>

#include "checkpoint/unserved_layouts.h"
#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/codec/zip.h"

namespace ucfs {

Result<Checkpoint> CheckpointBuilder::Build(const std::string& path,
                                            const CheckpointOptions& options) {
  UCFS_ASSIGN_OR_RETURN(CheckpointFiles files, DiscoverCheckpoint(env_, path, options.tag));
  UCFS_ASSIGN_OR_RETURN(Checkpoint c, BuildFrom(std::move(files)));
  // One mp rank here: the run's other ranks' files would be missing.
  UCFS_RETURN_IF_ERROR(
      CheckParallelDimensions({1, 1, c.world_size()}, c.rank0_model(), c.files().model_files[0]));
  c.supplied_universal_info_ = options.universal_info;
  return c;
}

Result<Checkpoint> CheckpointBuilder::BuildFrom(CheckpointFiles files) {
  c_.files_ = std::move(files);
  // DeepSpeed saves model states per rank at stage 3 only (engine.py
  // _get_ckpt_name); each rank file then says which optimizer wrote it.
  c_.partitioning_ = c_.files_.model_per_rank ? Partitioning::kPerParam : Partitioning::kFlatGroup;
  const uint32_t w = c_.world_size();
  c_.sources_.resize(2 * static_cast<size_t>(w));

  // Errors about one file say so (Status::WithFile): verify reports them
  // against it.
  const std::string& model0_path = c_.files_.model_files[0];
  UCFS_ASSIGN_OR_RETURN(ParsedRankFile model0, Load(w, model0_path));
  UCFS_RETURN_IF_ERROR(
      RefuseUnservedModelStates(*model0.doc, model0_path, c_.files_.model_per_rank));
  UCFS_RETURN_IF_ERROR(ReadModelStates(model0).WithFile(model0_path));
  for (uint32_t r = 0; r < w; ++r) {
    const std::string& optim_path = c_.files_.optim_files[r];
    UCFS_ASSIGN_OR_RETURN(ParsedRankFile optim, Load(r, optim_path));
    UCFS_RETURN_IF_ERROR((flat_groups() ? ReadFlatGroupOptimizerStates(r, optim)
                                        : ReadZero3OptimizerStates(r, optim))
                             .WithFile(optim_path));
    if (r == 0) {
      c_.rank0_optim_ = optim.doc;
      c_.container_style_ = StyleOf(optim.summary);
      c_.rank0_optim_summary_ = std::make_shared<TorchFileSummary>(std::move(optim.summary));
    }
  }
  if (flat_groups()) {
    UCFS_RETURN_IF_ERROR(ReadBuffers(model0).WithFile(model0_path));
    UCFS_RETURN_IF_ERROR(ReadWholeFrozenParams(model0).WithFile(model0_path));
  } else {
    UCFS_RETURN_IF_ERROR(ReadFrozenFragments(model0).WithFile(model0_path));
    UCFS_RETURN_IF_ERROR(ReadBuffers(model0).WithFile(model0_path));
  }
  c_.rank0_model_ = model0.doc;
  c_.rank0_model_summary_ = std::make_shared<TorchFileSummary>(std::move(model0.summary));
  UCFS_RETURN_IF_ERROR(AddUnreadModelFiles());
  return std::move(c_);
}

Result<ParsedRankFile> CheckpointBuilder::Load(uint32_t index, const std::string& path) {
  auto loaded = LoadParsedRankFile(source_, path);
  if (!loaded.ok()) return loaded.status().WithFile(path);
  ParsedRankFile tf = std::move(loaded).value();
  if (!tf.summary.legacy) {
    UCFS_RETURN_IF_ERROR(CheckRankFileIdentity(c_.files_, path, tf.summary.prefix).WithFile(path));
  }
  c_.sources_[index] = SourceFile{path, tf.summary.identity, tf.summary.access};
  return tf;
}

Status CheckpointBuilder::AddUnreadModelFiles() {
  const uint32_t w = c_.world_size();
  for (uint32_t r = 1; r < w; ++r) {
    SourceFile& src = c_.sources_[w + r];
    if (src.path.empty() && !c_.files_.model_files[r].empty()) {
      src.path = c_.files_.model_files[r];
      UCFS_ASSIGN_OR_RETURN(FileStat st, env_.Stat(src.path));
      src.identity = st.identity;
      src.access = st.access;
    }
  }
  return Status::OK();
}

Status CheckpointBuilder::CountElements(const ParsedRankFile& tf, std::string_view name,
                                        uint64_t numel) {
  auto total = CheckedAdd(total_elements_, numel, kMaxFileQuantity / 16);
  if (!total) {
    return tf.Error("the model has more than 2^58 elements in all (at '" + Printable(name) + "')");
  }
  total_elements_ = *total;
  return Status::OK();
}

bool CheckpointBuilder::HasParam(const std::string& name) const {
  for (const auto& p : c_.params_) {
    if (p.name == name) return true;
  }
  return false;
}

bool CheckpointBuilder::IsBuffer(const std::string& name) const {
  for (const auto& b : c_.buffers_) {
    if (b.name == name) return true;
  }
  return false;
}

bool CheckpointBuilder::IsTiedAlias(const std::string& name) const {
  for (const auto& t : c_.tied_) {
    if (t.alias == name) return true;
  }
  return false;
}

}  // namespace ucfs
