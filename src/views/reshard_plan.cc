// Where every param goes at N ranks (PlanReshard): the sub-groups of the
// reshard view's rank files, the expert families among them.
#include <map>
#include <utility>
#include <vector>

#include "ucfs/checkpoint/expert_topology.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/views/reshard_view.h"

namespace ucfs {

namespace {

Status CheckExpertParallel(const Checkpoint& c, const SubGroupInfo& sg, uint32_t n) {
  if (n % sg.expert_parallel == 0) return Status::OK();
  return Status::NotSupported(c.files().model_files[0] + ": param group " +
                              std::to_string(sg.param_group) + " holds experts over " +
                              std::to_string(sg.expert_parallel) +
                              " expert-parallel ranks, which DeepSpeed keeps at any world size: N "
                              "must be a multiple of " +
                              std::to_string(sg.expert_parallel) + ", not " + std::to_string(n));
}

// ZeRO-1/2: the same param groups, in the same order, each cut into N
// partitions of its own; an expert group's buffer of each EP rank into
// N / EP, over that EP rank's EDP group at N (expert_topology.h).
Result<ReshardLayout> PlanFlatGroups(const Checkpoint& c, ReshardLayout layout) {
  if (c.round_robin_gradients() && layout.world_size != c.world_size()) {
    // DeepSpeed would flatten each group in another order at N
    // (stage_1_and_2.py _round_robin_reorder), which the files do not
    // record: refused rather than guessed.
    return Status::NotSupported(
        c.files().model_files[0] +
        ": trained with zero_optimization.round_robin_gradients, which orders each param "
        "group's flat buffer by the world size; the reshard view cannot show it at another "
        "world size (the universal view and the consolidated weights can)");
  }
  for (uint32_t k = 0; k < c.sub_groups().size(); ++k) {
    SubGroupInfo sg = c.sub_groups()[k];
    UCFS_RETURN_IF_ERROR(CheckExpertParallel(c, sg, layout.world_size));
    sg.members =
        ExpertTopology{layout.world_size, sg.expert_parallel, c.data_before_expert_parallelism()}
            .Members(sg.family);
    sg.partition_numel = FlatPartitionNumel(sg.numel, sg.partition_world());
    for (uint32_t p : sg.params) {
      layout.sub_group_of[p] = k;
      layout.offset_of[p] = c.params()[p].offset;
    }
    layout.sub_groups.push_back(std::move(sg));
    layout.old_sub_group.push_back(k);
  }
  layout.file_buffers = c.file_buffer_count();
  return layout;
}

// ZeRO-3: each param group's params (its old buffers' concatenated) split
// into sub-groups again by their partitions at N, over N ranks, or, an
// expert group's, over the EDP group of D' = N / EP; then each expert
// buffer's families (EP ranks 1..EP-1), their params the same params'
// copies of that EP rank (CheckpointBuilder::AddExpertFamilies).
Result<ReshardLayout> PlanPerParam(const Checkpoint& c, ReshardLayout layout) {
  // (family-0 param, EP rank) -> that EP rank's copy of it.
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> copy_of;
  for (const SubGroupInfo& sg : c.sub_groups()) {
    if (sg.family == 0) continue;
    const SubGroupInfo& own = c.sub_groups()[sg.file_buffer];
    for (size_t i = 0; i < sg.params.size() && i < own.params.size(); ++i) {
      copy_of[{own.params[i], sg.family}] = sg.params[i];
    }
  }
  for (uint32_t g = 0; g < c.param_group_count(); ++g) {
    std::vector<uint32_t> params;
    std::vector<uint32_t> old_of;  // the old sub-group of each
    uint32_t ep = 1;
    for (uint32_t k = 0; k < c.file_buffer_count(); ++k) {
      const SubGroupInfo& old = c.sub_groups()[k];
      if (old.param_group != g) continue;
      UCFS_RETURN_IF_ERROR(CheckExpertParallel(c, old, layout.world_size));
      ep = old.expert_parallel;
      for (uint32_t p : old.params) {
        params.push_back(p);
        old_of.push_back(k);
      }
    }
    const ExpertTopology topology{layout.world_size, ep, c.data_before_expert_parallelism()};
    std::vector<uint64_t> parts;
    for (uint32_t p : params) {
      parts.push_back(PartitionNumel(c.params()[p].numel, topology.edp_size()));
    }
    size_t next = 0;
    for (uint32_t count : SplitSubGroups(parts, layout.sub_group_size)) {
      SubGroupInfo sg;
      sg.param_group = g;
      sg.expert_parallel = ep;
      if (ep > 1) sg.members = topology.Members(0);
      const auto index = static_cast<uint32_t>(layout.sub_groups.size());
      sg.file_buffer = index;
      layout.old_sub_group.push_back(old_of[next]);
      for (uint32_t i = 0; i < count; ++i, ++next) {
        const uint32_t p = params[next];
        layout.sub_group_of[p] = index;
        layout.offset_of[p] = sg.partition_numel;
        sg.partition_numel += parts[next];
        sg.params.push_back(p);
      }
      layout.sub_groups.push_back(std::move(sg));
    }
  }
  layout.file_buffers = static_cast<uint32_t>(layout.sub_groups.size());
  for (uint32_t k = 0; k < layout.file_buffers; ++k) {
    for (uint32_t e = 1; e < layout.sub_groups[k].expert_parallel; ++e) {
      // By value: adding the family moves the sub-groups.
      SubGroupInfo family = layout.sub_groups[k];
      family.family = e;
      family.members = ExpertTopology{layout.world_size, family.expert_parallel,
                                      c.data_before_expert_parallelism()}
                           .Members(e);
      const auto index = static_cast<uint32_t>(layout.sub_groups.size());
      for (uint32_t& p : family.params) {
        auto it = copy_of.find({p, e});
        if (it == copy_of.end()) {
          return Status::Corruption(c.files().model_files[0] + ": param '" + c.params()[p].name +
                                    "' has no copy of EP rank " + std::to_string(e));
        }
        layout.sub_group_of[it->second] = index;
        layout.offset_of[it->second] = layout.offset_of[p];
        p = it->second;
      }
      layout.sub_groups.push_back(std::move(family));
      layout.old_sub_group.push_back(layout.old_sub_group[k]);
    }
  }
  return layout;
}

}  // namespace

Result<ReshardLayout> PlanReshard(const Checkpoint& c, const ReshardOptions& options) {
  if (options.world_size == 0) return Status::InvalidArgument("world size must be at least 1");
  ReshardLayout layout;
  layout.world_size = options.world_size;
  layout.sub_group_size =
      c.configured_sub_group_size().value_or(options.sub_group_size.value_or(kDefaultSubGroupSize));
  layout.sub_group_of.resize(c.params().size());
  layout.offset_of.resize(c.params().size());
  if (c.partitioning() == Partitioning::kFlatGroup) return PlanFlatGroups(c, std::move(layout));
  return PlanPerParam(c, std::move(layout));
}

}  // namespace ucfs
