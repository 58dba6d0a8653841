// Finding a ZeRO checkpoint's files on disk.
//
// A user may name the checkpoint root (the save_dir holding `latest`), or a
// tag directory (`global_step100/`). DiscoverCheckpoint resolves either to
// the tag directory and the per-rank files in it, in rank order, and
// checks that no rank is missing.
#ifndef UCFS_CHECKPOINT_CHECKPOINT_LAYOUT_H_
#define UCFS_CHECKPOINT_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"

namespace ucfs {

struct CheckpointFiles {
  std::string root;                      // the directory with `latest`; empty if there is none
  std::string tag;                       // "global_step100"
  std::string tag_dir;                   // root/tag, or the directory the user named
  std::string optim_prefix;              // "bf16_" when the run trained in bf16, else ""
  uint32_t world_size = 0;               // from the file names
  std::vector<std::string> optim_files;  // by DP rank, full paths (see ListCheckpointFiles)
  // ZeRO-3 saves one model-states file per DP rank; stages 0-2 save the
  // whole model once, in mp_rank_00_model_states.pt.
  bool model_per_rank = true;
  // By DP rank; "" where a rank's model-states file is absent (DeepSpeed
  // 0.14.5 to 0.17 with load_universal set at save time writes only rank
  // 0's). When !model_per_rank, [0] is mp_rank_00_model_states.pt and the
  // others are "".
  std::vector<std::string> model_files;
  // The model-parallel rank whose shard group these are (parallel
  // checkpoints: ParallelCheckpointFiles); 0 for a data-parallel one.
  uint32_t mp_rank = 0;
};

// How a checkpoint is parallel, as its file names say.
struct ParallelDegrees {
  uint32_t pp = 1;  // P: pipeline stages
  uint32_t tp = 1;  // T: tensor-parallel ranks
  uint32_t dp = 0;  // D: data-parallel ranks
  uint32_t mp() const { return pp * tp; }
  bool operator==(const ParallelDegrees&) const = default;
};

// A pipeline's layer file: "layer_03-model_01-model_states.pt" is layer 3
// of tensor-parallel rank 1; "layer_03-model_states.pt" (a topology without
// a model axis) has no rank.
struct LayerFileName {
  uint32_t layer = 0;
  std::optional<uint32_t> tp_rank;
};
std::optional<LayerFileName> ParseLayerFileName(std::string_view name);
// The name DeepSpeed gives it (two digits at least, as its "{:02d}").
std::string LayerFileNameFor(uint32_t layer, std::optional<uint32_t> tp_rank);

// A tag's files as the grid a tensor-, pipeline- and data-parallel run
// saves (../shared/reference/tp-pp.md 1.1, 1.2). Model-parallel rank m —
// the `mp_rank_NN` of the names — is stage p = m / T, tensor-parallel rank
// t = m % T, as DeepSpeed's PipelineParallelGrid numbers them and
// ds_to_universal.py reads them (m = t without pipeline, m = p without a
// model axis). Each shard group m is a data-parallel checkpoint of D ranks,
// as ucfs reads one: shards[m] (mp_rank m).
//
// The degrees come from the names alone: D from the highest DP rank, M =
// P·T from the highest mp rank; with layer files T from their highest
// `model_NN` (1 without it) and P = M / T; without them T = M, P = 1.
struct ParallelCheckpointFiles {
  ParallelDegrees degrees;
  std::vector<CheckpointFiles> shards;                               // by mp rank m
  std::map<std::pair<uint32_t, uint32_t>, std::string> layer_files;  // (layer, t) -> path
  uint32_t Stage(uint32_t m) const { return m / degrees.tp; }
  uint32_t TpRank(uint32_t m) const { return m % degrees.tp; }
};

// The grid of the tag DiscoverCheckpoint would find, without completeness
// checks: a missing file is "" in its shard (or absent from layer_files).
Result<ParallelCheckpointFiles> ListParallelCheckpointFiles(
    Env& env, const std::string& path, const std::optional<std::string>& tag = std::nullopt);
// NotFound naming the first missing file of the grid: a rank file of any
// (m, d), a shard's model states, a layer file of some tensor-parallel
// rank that another rank has.
Status CheckNoParallelFileMissing(const ParallelCheckpointFiles& files);
// What a P×T×D grid is, for messages: "2 pipeline stages × 2 tensor-parallel
// ranks × 2 data-parallel ranks".
std::string DescribeDegrees(const ParallelDegrees& degrees);

// The model-states file of ZeRO stages 0-2: "mp_rank_00_model_states.pt".
std::string SharedModelFileName(uint32_t mp_rank = 0);

// A rank file name taken apart: "bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt".
struct RankFileName {
  enum class Kind { kOptim, kModel };
  Kind kind;
  std::string prefix;  // "bf16_" or ""
  uint32_t dp_rank;
  uint32_t mp_rank;
};
std::optional<RankFileName> ParseRankFileName(std::string_view name);

// A MoE expert's file (engine.py _get_expert_ckpt_name):
// "layer_<L>_expert_<E>_mp_rank_<MM>_model_states.pt", one per MoE layer and
// global expert, whatever the world size; an older DeepSpeed's
// "expert_<E>_mp_rank_<MM>_model_states.pt" too.
bool IsExpertFileName(std::string_view name);

// The file name DeepSpeed uses for a rank's file.
std::string RankFileNameFor(RankFileName::Kind kind, std::string_view prefix, uint32_t dp_rank,
                            uint32_t mp_rank = 0);

// torch.save names a zip archive's top folder after the file it writes
// ("zero_pp_rank_1_mp_rank_00_optim_states/data.pkl"), so a rank file
// renamed or swapped with another still says which it was. An error naming
// both files when `archive_prefix` names another rank file than `path`'s
// own name; OK when it names none ("archive", from a save to a file object;
// legacy files have no folder).
Status CheckRankFileIdentity(const CheckpointFiles& files, const std::string& path,
                             std::string_view archive_prefix);

// Whether `path` is a checkpoint root (it has a `latest` file) or a tag
// directory (it holds optimizer rank files), as DiscoverCheckpoint takes
// them; else it may be a run directory with roots below it (run_layout.h).
bool IsCheckpointDirectory(Env& env, const std::string& path);

Result<CheckpointFiles> DiscoverCheckpoint(Env& env, const std::string& path,
                                           const std::optional<std::string>& tag = std::nullopt);

// DiscoverCheckpoint without its completeness checks: a missing rank file
// of either kind is "" in optim_files / model_files (world_size is still
// one more than the highest rank present). For `ucfs verify`, which names
// every missing file rather than the first.
Result<CheckpointFiles> ListCheckpointFiles(Env& env, const std::string& path,
                                            const std::optional<std::string>& tag = std::nullopt);

// The directory a checkpoint at `path` (a root or a tag directory) is
// confined to, resolved through `host` (Env::RealPath): the directory
// itself, or the parent of a tag directory whose parent holds `latest`
// (DeepSpeed's rule: `latest` names a directory beside it). Reads no file's
// contents.
Result<std::string> ResolveCheckpointRoot(Env& host, const std::string& path);

// The tag a `latest` file names (surrounding whitespace dropped), or
// Corruption when it names none.
Result<std::string> ReadLatestTag(Env& env, const std::string& latest);

// DiscoverCheckpoint's completeness checks: NotFound naming the first
// missing rank file.
Status CheckNoRankFileMissing(const CheckpointFiles& files);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_CHECKPOINT_LAYOUT_H_
