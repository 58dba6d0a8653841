#include "views/consolidated_params.h"

#include <optional>
#include <set>
#include <string>

#include "ucfs/codec/torch_tensor.h"
#include "views/cast_state.h"
#include "views/merged_runs.h"
#include "views/native_expert_names.h"

namespace ucfs {
namespace {

// Every trainable param's master weights, in the name table's order:
// where zero_to_fp32.py makes the state dict itself (a data-parallel
// checkpoint) as it makes it, each param its one slice whole (a padded
// vocabulary keeps its rows; an averaged param is its bytes); else merged
// at full shape as the universal files merge it. Cast on read where asked;
// 16-bit masters (bf16_master_weights_and_grads) widened to float32 where
// zero_to_fp32.py of the saving DeepSpeed widens every floating tensor.
// Experts (expert-layouts.md §6): an AutoEP stack whole, [experts, ...] in
// global order; a native MoE expert's params each under the global name
// its layer_*_expert_* file gives it, one layer's experts in global order.
class ParamTensors {
 public:
  ParamTensors(const ParallelCheckpoint& c, OtherTensors others, const StateDictOptions& options,
               const std::shared_ptr<SourceFiles>& files, std::vector<ConsolidatedTensor>* out)
      : c_(c), others_(others), options_(options), files_(files), out_(out) {}

  Status Add() {
    const bool as_zero_to_fp32 = c_.degrees().mp() == 1;
    for (const MergedParam& param : c_.params()) {
      std::optional<LocalExpert> local;
      if (!param.expert_families.empty() && !c_.shard(0).autoep()) {
        local = ParseLocalExpert(param.name);
        if (!local) {
          return Status::NotSupported("native MoE expert param '" + Printable(param.name) +
                                      "' has no local expert id (" +
                                      std::string(kNativeExpertPrefix) + "<id>) to name it by");
        }
      }
      if (!local || local->module != pending_module_) UCFS_RETURN_IF_ERROR(FlushExperts());
      if (local) {
        pending_module_ = local->module;
        pending_.push_back({&param, *local});
        continue;
      }
      UCFS_ASSIGN_OR_RETURN(ConsolidatedTensor t, Tensor(param, param.name));
      if (as_zero_to_fp32 && param.expert_families.empty()) {
        t.shape = param.local_shape;
        UCFS_RETURN_IF_ERROR(AppendSlice(param, param.slices[0], t.dtype, &t));
      } else if (as_zero_to_fp32) {
        t.shape = param.shape;
        for (size_t family : param.expert_families) {
          UCFS_RETURN_IF_ERROR(AppendSlice(param, family, t.dtype, &t));
        }
      } else {
        t.shape = param.shape;
        const uint64_t es =
            Info(c_.shard(param.stage * c_.degrees().tp).states()[0].dtype).element_size;
        UCFS_ASSIGN_OR_RETURN(std::vector<StorageRun> runs,
                              MergedStateRuns(c_, param, 0, es, files_));
        t.storage.runs = FirstBytesOf(std::move(runs), NumelOf(param.shape) * es);
      }
      out_->push_back(std::move(t));
    }
    return FlushExperts();
  }

 private:
  struct Pending {
    const MergedParam* param;
    LocalExpert local;
  };

  // One layer's native experts: by EP rank, its local experts in order.
  Status FlushExperts() {
    std::set<std::string> ids;
    for (const Pending& p : pending_) ids.insert(p.local.id);
    const uint64_t local_experts = ids.size();
    for (uint32_t e = 0; !pending_.empty() && e < pending_[0].param->expert_families.size(); ++e) {
      for (const Pending& p : pending_) {
        UCFS_ASSIGN_OR_RETURN(
            ConsolidatedTensor t,
            Tensor(*p.param, GlobalExpertName(p.param->name, p.local, e, local_experts)));
        t.shape = p.param->local_shape;
        UCFS_RETURN_IF_ERROR(AppendSlice(*p.param, p.param->expert_families[e], t.dtype, &t));
        out_->push_back(std::move(t));
      }
    }
    pending_.clear();
    pending_module_.clear();
    return Status::OK();
  }

  // A tensor of `param`'s dtype as the options make it, without bytes yet.
  Result<ConsolidatedTensor> Tensor(const MergedParam& param, const std::string& name) const {
    const StateInfo& fp32 = c_.shard(param.stage * c_.degrees().tp).states()[0];
    const bool cast = options_.params_dtype && *options_.params_dtype != fp32.dtype;
    if (cast && (fp32.dtype != DType::kFloat32 || (*options_.params_dtype != DType::kBFloat16 &&
                                                   *options_.params_dtype != DType::kFloat16))) {
      return Status::NotSupported(std::string("weights in ") +
                                  std::string(Info(*options_.params_dtype).torch_name) + " from " +
                                  std::string(Info(fp32.dtype).torch_name) +
                                  " master weights (float32 to bfloat16 or float16 only)");
    }
    const bool widen =
        !options_.params_dtype && fp32.dtype != DType::kFloat32 && IsFloating(fp32.dtype) &&
        (others_ == OtherTensors::kAllToFloat32 || others_ == OtherTensors::kFloatingToFloat32);
    if ((cast || widen) && c_.degrees().mp() != 1) {
      return Status::NotSupported(std::string(cast ? "weights cast" : "16-bit masters widened") +
                                  " from a tensor- or pipeline-parallel checkpoint (" +
                                  DescribeDegrees(c_.degrees()) + ")");
    }
    ConsolidatedTensor t;
    t.name = name;
    t.dtype = cast ? *options_.params_dtype : widen ? DType::kFloat32 : fp32.dtype;
    t.requires_grad = fp32.requires_grad;
    return t;
  }

  // The master weights of param `slice` of `param`'s shard group, whole,
  // appended to t's runs in t's dtype (cast or widened on read).
  Status AppendSlice(const MergedParam& param, size_t slice_index, DType dtype,
                     ConsolidatedTensor* t) const {
    const uint32_t m = param.stage * c_.degrees().tp;
    const StateInfo& fp32 = c_.shard(m).states()[0];
    const auto slice = static_cast<uint32_t>(slice_index);
    const uint64_t numel = NumelOf(param.local_shape);
    if (dtype == fp32.dtype) {
      t->storage.runs.push_back(StateRun(m, slice, 0, 0, numel * Info(fp32.dtype).element_size));
    } else if (fp32.dtype == DType::kFloat32) {
      auto computed = std::make_shared<const CastState>(c_, m, slice, numel, files_, dtype);
      const uint64_t length = computed->size();
      t->storage.runs.push_back(ComputedRun(std::move(computed), length));
    } else {
      const ParallelCheckpoint& c = c_;
      t->storage.runs.push_back(
          WidenedRun(files_, fp32.dtype, numel, param.name,
                     [&c, m, slice](uint64_t begin, uint64_t end, std::vector<Extent>* extents) {
                       return c.MapShardState(m, slice, 0, begin, end, extents);
                     }));
    }
    return Status::OK();
  }

  const ParallelCheckpoint& c_;
  OtherTensors others_;
  const StateDictOptions& options_;
  const std::shared_ptr<SourceFiles>& files_;
  std::vector<ConsolidatedTensor>* out_;
  std::vector<Pending> pending_;
  std::string pending_module_;
};

}  // namespace

Status AddParams(const ParallelCheckpoint& c, OtherTensors others, const StateDictOptions& options,
                 const std::shared_ptr<SourceFiles>& files, std::vector<ConsolidatedTensor>* out) {
  return ParamTensors(c, others, options, files, out).Add();
}

}  // namespace ucfs
