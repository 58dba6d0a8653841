// Verify: everything ucfs can check about a checkpoint before anyone trusts
// it, all problems at once rather than the first.
//
// A tensor- and pipeline-parallel checkpoint is checked as the grid it is:
// each shard group (p, t) as the data-parallel checkpoint below, every
// layer file (present for every tensor-parallel rank, readable, its
// tensors inside their records), the steps of all shard groups against
// each other, the universal name table (ParallelCheckpoint: the shards
// agreeing on each param, the patterns matching as the converter demands),
// and the copies of each tensor-parallel replicated param (a LayerNorm's
// weight) against each other, element for element, in every state:
// ds_to_universal.py asserts they are equal and keeps tensor-parallel rank
// 0's, as ucfs's universal view does.
//
// Every rank file is looked at on its own: present, a readable torch.save
// zip with a parsable data.pkl, every tensor inside its storage record,
// partition_count / dp_world_size agreeing with the other files, the Adam
// step of each sub-group agreeing with every other rank's. Then the
// checkpoint as a whole (Checkpoint::Open: the parameter table against every
// rank's flat buffers). When that model can be built, every valid element of
// the fp32 master weights and of each per-element optimizer state (exp_avg,
// exp_avg_sq, ...) is read and checked for NaN and Inf. Padding is never
// read: DeepSpeed allocates it with torch.empty, so it may hold anything.
//
// Nothing is printed here; the report is data (src/cli/verify_command.cc
// renders it as text or JSON).
#ifndef UCFS_TOOLS_VERIFY_H_
#define UCFS_TOOLS_VERIFY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {

struct VerifyOptions {
  std::optional<std::string> tag;
  unsigned threads = 0;             // scan workers; 0: one per CPU
  uint64_t chunk_bytes = 8u << 20;  // bytes per pread of the scan
  // Called once, before the scan, with the bytes it will read (valid
  // elements only); not called when there is nothing to scan.
  std::function<void(uint64_t total_bytes)> on_scan_start;
  // Called from the scan workers (any thread) as bytes are checked.
  std::function<void(uint64_t bytes)> on_bytes;
  // universal_checkpoint_info keys laid over the saved ones (--universal-info).
  std::shared_ptr<const SuppliedUniversalInfo> universal_info;
};

struct VerifyProblem {
  enum class Kind {
    kMissing,     // a rank file that must exist does not
    kUnreadable,  // cannot be opened, is truncated, not a torch.save zip, bad data.pkl
    kWorldSize,   // partition_count / dp_world_size / the rank files disagree
    kTensor,      // a tensor is malformed, reaches past its storage or its record, or has none
    kStep,        // the Adam step differs between ranks or sub-groups
    kStructure,   // the rank files do not make one ZeRO-3 checkpoint (Checkpoint::Open)
    kNonFinite,   // NaN or Inf in a master weight or optimizer state
    kUniversal,   // no universal checkpoint can be made: the shards or patterns contradict
    kReplica,     // a replicated param's copies differ between ranks (tensor-parallel, Muon)
    // Warnings (VerifyReport::warnings), which leave the checkpoint OK:
    kUnsafeAtAnotherTensorDegree,  // a universal load at another T would be wrong
    kNoUniversalLayout,            // T > 1 without universal_checkpoint_info
  };
  Kind kind;
  std::string file;     // the file concerned (the tag directory if none is)
  std::string message;  // what is wrong, without the file name
};

// "missing", "unreadable", "world_size", ... (the JSON `kind`).
std::string_view KindName(VerifyProblem::Kind kind);

// NaN/Inf found in one state of one parameter.
struct NonFiniteCount {
  uint32_t mp_rank = 0;  // the shard group's (0 unless tensor- or pipeline-parallel)
  std::string param;
  std::string state;  // "fp32", "exp_avg", ...
  uint64_t nan = 0;
  uint64_t inf = 0;  // +Inf and -Inf
  struct PerRank {
    uint32_t rank = 0;
    std::string file;
    uint64_t nan = 0;
    uint64_t inf = 0;
    uint64_t first_element = 0;  // the first offending element, as an index of the full param
  };
  std::vector<PerRank> ranks;  // the ranks whose slices hold them, in rank order
};

struct VerifyReport {
  std::string tag_dir;
  ParallelDegrees degrees;     // P x T x D; D is world_size
  uint32_t world_size = 0;     // data-parallel: what most rank files say
  std::optional<double> step;  // the Adam step most ranks have; none before the first step
  uint64_t files_checked = 0;  // rank (and layer) files found and looked at
  // Trainable params in the model (0 if it could not be built); of a grid,
  // its universal params (each shard group's summed without the table).
  size_t params = 0;
  std::vector<std::string> states;  // per-element states scanned: "fp32", "exp_avg", ...
  // "Muon via DeepSpeedZeroOptimizer" (ds_config's optimizer type, where
  // named, and the DeepSpeed class that saved it).
  std::string optimizer;
  // Each param group's states, where the groups keep different ones (Muon's
  // and Adam's): "fp32, momentum_buffer (whole params)".
  std::vector<std::string> group_states;
  bool scanned = false;  // the NaN/Inf scan ran (it needs the model)
  // ZeRO-1/2's zero_optimization.parameter_alignment, in elements (1: off),
  // its param_alignment_paddings checked against DeepSpeed's arithmetic.
  uint64_t param_alignment = 1;
  uint64_t bytes_scanned = 0;
  // Of replicated params' copies (tensor-parallel grids, Muon's momentum).
  uint64_t bytes_compared = 0;
  std::vector<VerifyProblem> problems;
  std::vector<VerifyProblem> warnings;    // the checkpoint is still OK
  std::vector<NonFiniteCount> nonfinite;  // by shard group, param, then state

  bool ok() const { return problems.empty(); }
};

// Checks the checkpoint at `path` (a root with `latest`, or a tag
// directory). Fails only when there is no checkpoint to check (no such
// directory, no `latest` and no rank files, a bad --tag, file names that
// make no grid); everything wrong with the checkpoint itself is a problem
// in the report.
Result<VerifyReport> Verify(Env& env, const std::string& path, const VerifyOptions& options = {});

// The NaN and Inf among `count` little-endian elements of a floating-point
// dtype (float32, float64, float16, bfloat16); zero for other dtypes.
struct NonFiniteTally {
  uint64_t nan = 0;
  uint64_t inf = 0;
};
NonFiniteTally CountNonFinite(const char* data, uint64_t count, DType dtype);
// Whether one element is NaN or Inf.
bool IsNonFinite(const char* element, DType dtype);

}  // namespace ucfs

#endif  // UCFS_TOOLS_VERIFY_H_
