// The frameworks' per-rank files at a new world size
// (checkpoint/rank_families.h): what a directory of a resharded checkpoint
// shows besides its own entries.
//
// A family saved at W ranks is shown at N: ranks below min(W, N) as saved,
// a new rank r >= W as a byte copy of rank (r mod W)'s file (or not at all
// when copies are off), ranks >= N hidden, as DeepSpeed's rank files are;
// at N = 1 also rng_state.pth, the name HF Trainer reads at world size 1. A
// new rank's copy repeats rank (r mod W)'s random streams, which is what
// the man page warns of.
#ifndef UCFS_VIEWS_RANK_FILE_EXTRAS_H_
#define UCFS_VIEWS_RANK_FILE_EXTRAS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

struct RankFileOptions {
  uint32_t saved_world_size = 0;  // W, the checkpoint's
  uint32_t world_size = 0;        // N, the view's
  // New ranks get rank (r mod W)'s file; else they get none (HF Trainer
  // and accelerate then start those ranks unseeded, saying so at info).
  bool copy_new_ranks = true;
};

// For `entries`, the listing of `dir`; a family with a gap is passed
// through as saved, with a warning naming the file that is missing.
View::SourceDirExtras RankFileExtras(const std::string& dir, const std::vector<DirEntry>& entries,
                                     const RankFileOptions& options);

}  // namespace ucfs

#endif  // UCFS_VIEWS_RANK_FILE_EXTRAS_H_
