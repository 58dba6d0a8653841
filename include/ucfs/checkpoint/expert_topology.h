// Which ranks hold which experts: DeepSpeed's expert-parallel (EP) and
// expert-data-parallel (EDP) groups over W data-parallel ranks
// (src/design/expert-layouts.md §0; deepspeed/utils/groups.py
// _create_expert_and_data_parallel, mp_size 1).
//
// An expert param group of EP size N (named "ep_size_N") is partitioned
// over its EDP group of D = W / N ranks, one flat buffer per EP rank e (a
// "family": the experts of EP rank e). Rank r is EP rank e and EDP rank k:
//   default                                  e = r mod N, k = r div N
//   use_data_before_expert_parallelism true  e = r div D, k = r mod D
// Dense groups are the case N = 1 (one family, k = r).
#ifndef UCFS_CHECKPOINT_EXPERT_TOPOLOGY_H_
#define UCFS_CHECKPOINT_EXPERT_TOPOLOGY_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ucfs {

struct ExpertTopology {
  uint32_t world = 1;  // W, all data-parallel ranks
  uint32_t ep = 1;     // N, experts' parallel size; W mod N = 0
  bool data_first = false;

  uint32_t edp_size() const { return ep == 0 ? 0 : world / ep; }
  uint32_t EpRank(uint32_t rank) const;
  uint32_t EdpRank(uint32_t rank) const;
  // The rank that is EP rank e and EDP rank k.
  uint32_t Rank(uint32_t e, uint32_t k) const;
  // EP rank e's EDP group, in EDP-rank order (whose partitions it holds).
  std::vector<uint32_t> Members(uint32_t e) const;
};

// N of a param group DeepSpeed named "ep_size_N"
// (moe/utils.py split_params_into_different_moe_groups_for_optimizer);
// nullopt for any other name.
std::optional<uint32_t> ExpertGroupSize(std::string_view group_name);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_EXPERT_TOPOLOGY_H_
