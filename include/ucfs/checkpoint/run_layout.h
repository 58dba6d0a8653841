// The DeepSpeed roots of a training run, told from directory listings.
//
// Trainers nest the root DeepSpeed saves into (the directory with `latest`)
// inside run directories of their own: HF Trainer's checkpoint-N/,
// OpenRLHF's _actor/ and _critic/, verl's step_N/, Lightning's
// epoch=E-step=S.ckpt/, accelerate's root with a tag per model. ListRoot
// says whether a directory is such a root and which of its subdirectories
// are tags, reading nothing but directory listings, stats and `latest`, so
// that a run of hundreds of checkpoints is found as fast as it is listed
// (src/design/run-directories.md).
#ifndef UCFS_CHECKPOINT_RUN_LAYOUT_H_
#define UCFS_CHECKPOINT_RUN_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint_layout.h"

namespace ucfs {

// A subdirectory of a root that holds optimizer rank files: a tag, whatever
// its name ("global_step4", "pytorch_model_1", "checkpoint", "4").
struct TagListing {
  std::string name;
  std::string dir;
  int64_t mtime_ns = 0;  // the tag directory's
  FileAccess access;     // the tag directory's
  // Every rank's files are there (DiscoverCheckpoint would find them);
  // else `problem` says which is missing.
  bool complete = false;
  std::string problem;
  // What ListParallelCheckpointFiles found: a tensor- or pipeline-parallel
  // tag's grid (degrees.mp() > 1), else the 1 x 1 x D grid of its files;
  // no shard group where the tag is not served.
  ParallelCheckpointFiles grid;
  // Shard group 0's files (a data-parallel tag's own); empty if none.
  const CheckpointFiles& files() const {
    static const CheckpointFiles kNone;
    return grid.shards.empty() ? kNone : grid.shards.front();
  }
};

struct RootListing {
  std::string dir;
  // The tag `latest` names, when it names one of `tags`.
  std::optional<std::string> latest;
  std::vector<TagListing> tags;  // sorted by name
};

// `dir` as a DeepSpeed root: a directory with a `latest` file and at least
// one tag directory below it; nullopt when it is none. `entries` is `dir`'s
// listing (the caller has it already).
std::optional<RootListing> ListRoot(Env& env, const std::string& dir,
                                    const std::vector<DirEntry>& entries);

// How far a search for roots looks ahead: this many directories listed,
// at any depth. Trainers nest roots one to four levels deep
// (output_dir/checkpoint-N, ckpt/_actor, Lightning's
// lightning_logs/version_0/checkpoints/epoch=E-step=S.ckpt); the bound is
// on the cost, a listing each, not on the depth.
inline constexpr size_t kRootSearchDirectories = 4096;

// The first root found in `dir` or below it, breadth first, listing at most
// `max_directories` directories; NotFound, saying what a root is, when
// there is none, and how far it looked when it stopped at the bound.
Result<RootListing> FindFirstRoot(Env& env, const std::string& dir,
                                  size_t max_directories = kRootSearchDirectories);

// Every root in `dir` or below it, in the order a breadth-first walk meets
// them (siblings by name); nothing below a root is searched. NotFound as
// FindFirstRoot's when there is none; an error, not a partial answer, when
// the walk would list more than `max_directories` directories.
Result<std::vector<RootListing>> FindRoots(Env& env, const std::string& dir,
                                           size_t max_directories = kRootSearchDirectories);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_RUN_LAYOUT_H_
