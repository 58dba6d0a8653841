// ZeRO-1/2's zero_optimization.parameter_alignment (DeepSpeed 0.19.x): the
// paddings between the params of each flat buffer, read from every optimizer
// file's param_alignment_paddings, checked against ucfs's own arithmetic
// (partition.h) and laid into the params' offsets (checkpoint_builder.h).
#include <string>
#include <vector>

#include "checkpoint/checkpoint_builder.h"
#include "checkpoint/unserved_layouts.h"
#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/partition.h"

namespace ucfs {

using pickle::Document;
using pickle::NodeId;

namespace {

bool Absent(const Document& doc, NodeId id) {
  return id == pickle::kNoNode || doc.node(id).kind == pickle::Kind::kNone;
}

// The first param of `got` whose padding is not `want`'s, or -1.
int64_t FirstDifference(const std::vector<uint64_t>& got, const std::vector<uint64_t>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

std::vector<uint64_t> CheckpointBuilder::GroupNumels(size_t k) const {
  std::vector<uint64_t> numels;
  for (uint32_t p : c_.sub_groups_[k].params) numels.push_back(c_.params_[p].numel);
  return numels;
}

std::vector<uint64_t> CheckpointBuilder::GroupPaddings(size_t k) const {
  // The gap between each param and the next: what the offsets hold.
  const std::vector<uint32_t>& params = c_.sub_groups_[k].params;
  std::vector<uint64_t> paddings;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = c_.params_[params[i]];
    const uint64_t end =
        i + 1 < params.size() ? c_.params_[params[i + 1]].offset : p.offset + p.numel;
    paddings.push_back(end - p.offset - p.numel);
  }
  return paddings;
}

Status CheckpointBuilder::ReadParamAlignment(uint32_t rank, const ParsedRankFile& tf, NodeId osd) {
  const Document& doc = *tf.doc;
  // The file's groups: an expert group's other families are copies of it.
  const size_t groups = c_.param_group_count_;
  // DeepSpeedZeroOptimizer pads by the training dtype's element size
  // (bit16_groups[i][0]); BF16_Optimizer and ZeRO-3 ignore the setting.
  const uint64_t es = c_.lp_dtype_ ? Info(*c_.lp_dtype_).element_size : 4;
  const bool pads = c_.optimizer_class_ == "DeepSpeedZeroOptimizer";
  const uint64_t aligned = ParamAlignmentElements(es);
  const std::string dtype = c_.lp_dtype_ ? std::string(Info(*c_.lp_dtype_).torch_name) : "float32";

  const NodeId node = doc.Get(osd, "param_alignment_paddings");
  if (Absent(doc, node)) {
    // DeepSpeed before 0.19 writes no paddings and pads nothing; 0.19.x
    // writes them whenever it pads, in every rank's file.
    for (size_t k = 0; rank > 0 && k < groups; ++k) {
      for (uint64_t padding : GroupPaddings(k)) {
        if (padding == 0) continue;
        return tf.Error("no param_alignment_paddings, but rank 0's pad param group " +
                        std::to_string(k) + ": files of different runs");
      }
    }
    if (rank == 0 && pads && c_.parameter_alignment_config_.value_or(false)) {
      for (size_t k = 0; k < groups; ++k) {
        for (uint64_t padding : ParamAlignmentPaddings(GroupNumels(k), aligned)) {
          if (padding == 0) continue;
          return tf.Error(
              "no param_alignment_paddings, but its ds_config sets "
              "zero_optimization.parameter_alignment, by which DeepSpeed pads param group " +
              std::to_string(k) + " of " + dtype + " params");
        }
      }
    }
    return Status::OK();
  }

  auto items = doc.SequenceItems(node);
  if (!items || items->size() != groups) {
    return tf.Error("param_alignment_paddings holds " + doc.Repr(node, 60) + ", not a list of " +
                    std::to_string(groups) + " param groups' paddings");
  }
  std::vector<std::vector<uint64_t>> file(groups);
  for (size_t k = 0; k < groups; ++k) {
    const size_t params = c_.sub_groups_[k].params.size();
    auto list = doc.SequenceItems((*items)[k]);
    if (!list || list->size() != params) {
      return tf.Error("param_alignment_paddings[" + std::to_string(k) + "] holds " +
                      doc.Repr((*items)[k], 60) + ", but param group " + std::to_string(k) +
                      " has " + std::to_string(params) + " params (param_shapes)");
    }
    for (NodeId v : *list) {
      auto padding = doc.AsInt(v);
      // A padding is less than 16 elements; more is no rule's.
      if (!padding || *padding < 0 || *padding >= 16) {
        return tf.Error("param_alignment_paddings[" + std::to_string(k) + "] holds " +
                        doc.Repr(v, 40) + ", not a padding of fewer than 16 elements");
      }
      file[k].push_back(static_cast<uint64_t>(*padding));
    }
  }

  if (rank > 0) {
    // Every rank saves the same list (round_robin_bit16_padding).
    for (size_t k = 0; k < groups; ++k) {
      if (const int64_t i = FirstDifference(file[k], GroupPaddings(k)); i >= 0) {
        return tf.Error("param_alignment_paddings[" + std::to_string(k) + "][" + std::to_string(i) +
                        "] (param '" + Printable(c_.params_[c_.sub_groups_[k].params[i]].name) +
                        "') is " + std::to_string(file[k][i]) + ", but rank 0's is " +
                        std::to_string(GroupPaddings(k)[i]) + ": files of different runs");
      }
    }
    return Status::OK();
  }

  // Rank 0: the alignment the run's settings make; where the ds_config does
  // not say, whichever of on and off the paddings follow.
  uint64_t alignment = 1;
  if (c_.parameter_alignment_config_) {
    alignment = pads && *c_.parameter_alignment_config_ ? aligned : 1;
  } else {
    bool all_zero = true;
    for (const auto& g : file) {
      for (uint64_t padding : g) all_zero = all_zero && padding == 0;
    }
    alignment = all_zero || !pads ? 1 : aligned;
  }
  for (size_t k = 0; k < groups; ++k) {
    const std::vector<uint64_t> want = ParamAlignmentPaddings(GroupNumels(k), alignment);
    const int64_t i = FirstDifference(file[k], want);
    if (i < 0) continue;
    const std::string where = "param_alignment_paddings[" + std::to_string(k) + "][" +
                              std::to_string(i) + "] (param '" +
                              Printable(c_.params_[c_.sub_groups_[k].params[i]].name) + "') is " +
                              std::to_string(file[k][i]);
    if (!c_.parameter_alignment_config_ && pads) {
      return RefuseUnmatchedParamAlignment(
          tf.path(), where + ", which neither no alignment nor DeepSpeed's " +
                         std::to_string(aligned) + "-element alignment of " + dtype +
                         " params makes");
    }
    const std::string setting =
        !pads ? c_.optimizer_class_ + ", which pads no param,"
              : std::string("zero_optimization.parameter_alignment ") +
                    (alignment > 1 ? "on, with " + dtype + " params," : "off");
    return tf.Error(where + ", but " + setting + " pads it by " + std::to_string(want[i]));
  }

  // Lay the paddings into the offsets: each param after its predecessor's
  // padding, the group's length with them (its end padding follows).
  c_.param_alignment_ = alignment;
  for (size_t k = 0; k < groups; ++k) {
    SubGroupInfo& sg = c_.sub_groups_[k];
    uint64_t offset = 0;
    for (size_t i = 0; i < sg.params.size(); ++i) {
      ParamInfo& p = c_.params_[sg.params[i]];
      p.offset = offset;
      auto next = CheckedAdd(offset, p.numel + file[k][i], kMaxFileQuantity / 16);
      if (!next) return tf.Error("param group " + std::to_string(k) + " is too large");
      offset = *next;
    }
    sg.numel = offset;
    sg.partition_numel = FlatPartitionNumel(offset, sg.partition_world());
    for (uint32_t p : sg.params) c_.params_[p].partition_numel = sg.partition_numel;
  }
  return Status::OK();
}

}  // namespace ucfs
