// Per-rank files of the frameworks, told from their names.
//
// Trainers keep state of their own per data-parallel rank beside DeepSpeed's
// rank files: HF Trainer's rng_state_{r}.pth, accelerate's
// random_states_{r}.pkl, LLaMA-Factory's dataloader/rank_{r}.pt. A family is
// a set of files in one directory whose names differ only by a decimal rank
// (no leading zeros) running exactly 0..W-1, W being the checkpoint's
// data-parallel size; a resharded view shows such a family at the new world
// size (view/rank_file_extras.h). Names alone decide, so a run's directories
// are classified from their listings without reading any file.
#ifndef UCFS_CHECKPOINT_RANK_FAMILIES_H_
#define UCFS_CHECKPOINT_RANK_FAMILIES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ucfs {

struct RankFamily {
  std::string prefix;  // "rng_state_"
  std::string suffix;  // ".pth"
  // The family's name for `rank`: prefix + rank + suffix.
  std::string NameFor(uint32_t rank) const;
};

struct RankFamilies {
  // Families whose ranks run exactly 0..world_size-1.
  std::vector<RankFamily> complete;
  // Families that look per-rank (rank 0 and at least one other) but do not
  // run exactly 0..world_size-1: "rng_state_1.pth is missing (the
  // checkpoint has 3 data-parallel ranks)". Passed through as saved.
  std::vector<std::string> problems;
};

// The families among the files `names` of one directory, for a checkpoint of
// `world_size` data-parallel ranks. DeepSpeed's own rank files are not
// families (the reshard view makes them), nor are the per-object files
// accelerate numbers by the object they hold rather than by rank
// (custom_checkpoint_{i}.pkl, scheduler_{i}.bin, ...).
RankFamilies FindRankFamilies(const std::vector<std::string>& names, uint32_t world_size);

// HF Trainer saves and reads rng_state.pth, not rng_state_0.pth, at world
// size 1: the single-rank name of `family`, or "" when it has none.
std::string SingleRankName(const RankFamily& family);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_RANK_FAMILIES_H_
