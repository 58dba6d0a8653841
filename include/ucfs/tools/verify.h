// Verify: everything ucfs can check about a checkpoint before anyone trusts
// it, all problems at once rather than the first.
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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
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
  };
  Kind kind;
  std::string file;     // the file concerned (the tag directory if none is)
  std::string message;  // what is wrong, without the file name
};

// "missing", "unreadable", "world_size", ... (the JSON `kind`).
std::string_view KindName(VerifyProblem::Kind kind);

// NaN/Inf found in one state of one parameter.
struct NonFiniteCount {
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
  uint32_t world_size = 0;          // what most rank files say
  std::optional<double> step;       // the Adam step most ranks have; none before the first step
  uint64_t files_checked = 0;       // rank files found and looked at
  size_t params = 0;                // trainable params in the model (0 if it could not be built)
  std::vector<std::string> states;  // per-element states scanned: "fp32", "exp_avg", ...
  bool scanned = false;             // the NaN/Inf scan ran (it needs the model)
  uint64_t bytes_scanned = 0;
  std::vector<VerifyProblem> problems;
  std::vector<NonFiniteCount> nonfinite;  // by param, then state

  bool ok() const { return problems.empty(); }
};

// Checks the checkpoint at `path` (a root with `latest`, or a tag
// directory). Fails only when there is no checkpoint to check (no such
// directory, no `latest` and no rank files, a bad --tag); everything wrong
// with the checkpoint itself is a problem in the report.
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
