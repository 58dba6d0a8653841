#include "tools/replica_check.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "ucfs/base/checked_math.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs {
namespace {

using Kind = VerifyProblem::Kind;

std::string Value(const char* element, DType dtype) {
  auto v = DecodeScalar(element, dtype);
  if (!v.ok()) return "?";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", *v);
  return buf;
}

// Whether two elements are equal as torch.equal takes them: by value, so
// that -0 and +0 agree; NaN agrees with the same NaN (the NaN scan reports
// it).
bool SameElement(const char* a, const char* b, uint32_t size, DType dtype) {
  if (std::memcmp(a, b, size) == 0) return true;
  auto x = DecodeScalar(a, dtype);
  auto y = DecodeScalar(b, dtype);
  return x.ok() && y.ok() && *x == *y;
}

class ReplicaCheck {
 public:
  ReplicaCheck(Env& env, const ParallelCheckpoint& grid, const VerifyOptions& options,
               VerifyReport* report, const ProblemSink& problem)
      : grid_(grid),
        options_(options),
        report_(report),
        problem_(problem),
        sources_(env, [&grid](uint32_t i) { return grid.sources()[i]; }) {}

  void Run() {
    const uint32_t tp = grid_.degrees().tp;
    if (tp < 2) return;
    for (const MergedParam& p : grid_.params()) {
      // Replicated by its rule, or by the affine map its pattern agrees with.
      if (p.merge.rule != MergeRule::kReplicated && p.merge.category != MergeRule::kReplicated) {
        continue;
      }
      const Checkpoint& lead = grid_.shard(p.stage * tp);
      for (const SubGroupState& gs : lead.StatesOf(p.slices[0])) {
        for (uint32_t t = 1; t < tp; ++t) ComparePair(p, gs.state, t);
      }
    }
  }

 private:
  // Copy `t` of state `s` of `p` against copy 0, chunk by chunk.
  void ComparePair(const MergedParam& p, size_t s, uint32_t t) {
    const uint32_t tp = grid_.degrees().tp;
    const uint32_t m0 = p.stage * tp, mt = p.stage * tp + t;
    const StateInfo& state = grid_.shard(m0).states()[s];
    const uint32_t es = Info(state.dtype).element_size;
    const uint64_t numel = grid_.shard(m0).params()[p.slices[0]].numel;
    const uint64_t bytes = CheckedMul<uint64_t>(numel, es).value_or(0);
    const uint64_t chunk = std::max<uint64_t>(options_.chunk_bytes / es * es, es);
    uint64_t differ = 0, first = UINT64_MAX;
    std::string first_values;
    for (uint64_t begin = 0; begin < bytes; begin += chunk) {
      const uint64_t end = std::min(bytes, begin + chunk);
      if (!Read(m0, p.slices[0], s, begin, end, &a_) ||
          !Read(mt, p.slices[t], s, begin, end, &b_)) {
        return;
      }
      report_->bytes_compared += 2 * (end - begin);
      for (uint64_t i = 0; i < end - begin; i += es) {
        if (SameElement(a_.data() + i, b_.data() + i, es, state.dtype)) continue;
        if (differ++ == 0) {
          first = (begin + i) / es;
          first_values =
              Value(b_.data() + i, state.dtype) + " against " + Value(a_.data() + i, state.dtype);
        }
      }
    }
    if (differ == 0) return;
    problem_(Kind::kReplica, FileOf(mt, p.slices[t], s, first * es),
             "'" + Printable(p.name) + "' " + Printable(state.name) + ": tensor-parallel rank " +
                 std::to_string(t) + "'s copy of this replicated param differs from rank 0's (" +
                 FileOf(m0, p.slices[0], s, first * es) + ") in " + std::to_string(differ) +
                 " of " + std::to_string(numel) + " elements (the first is element " +
                 std::to_string(first) + ": " + first_values +
                 "); ds_to_universal.py refuses the checkpoint, and a universal load resumes "
                 "every rank with rank 0's copy");
  }

  // Bytes [begin, end) of the state into *out; false (reported once per
  // file) when a file cannot be read.
  bool Read(uint32_t shard, size_t param, size_t state, uint64_t begin, uint64_t end,
            std::vector<char>* out) {
    std::vector<Extent> extents;
    if (Status st = grid_.MapShardState(shard, param, state, begin, end, &extents); !st.ok()) {
      const std::string& tag_dir = grid_.shard(shard).files().tag_dir;
      problem_(Kind::kStructure, tag_dir, st.MessageAbout(tag_dir));
      return false;
    }
    out->resize(end - begin);
    uint64_t at = 0;
    for (const Extent& e : extents) {
      const std::string& path = grid_.sources()[e.file].path;
      auto file = sources_.Get(e.file);
      Status st =
          file.ok() ? (*file)->ReadExact(e.offset, e.length, out->data() + at) : file.status();
      if (!st.ok()) {
        if (failed_.insert(e.file).second) problem_(Kind::kUnreadable, path, st.MessageAbout(path));
        return false;
      }
      at += e.length;
    }
    if (at != end - begin) {
      const std::string& tag_dir = grid_.shard(shard).files().tag_dir;
      problem_(Kind::kStructure, tag_dir,
               "'" + Printable(grid_.shard(shard).params()[param].name) +
                   "': bytes of a state mapped to " + std::to_string(at) + " of the " +
                   std::to_string(end - begin) + " asked for");
      return false;
    }
    return true;
  }

  // The file holding byte `offset` of the state.
  std::string FileOf(uint32_t shard, size_t param, size_t state, uint64_t offset) const {
    std::vector<Extent> extents;
    if (!grid_.MapShardState(shard, param, state, offset, offset + 1, &extents).ok() ||
        extents.empty()) {
      return grid_.shard(shard).files().tag_dir;
    }
    return grid_.sources()[extents.front().file].path;
  }

  const ParallelCheckpoint& grid_;
  const VerifyOptions& options_;
  VerifyReport* report_;
  const ProblemSink& problem_;
  SourceFiles sources_;
  std::set<uint32_t> failed_;
  std::vector<char> a_, b_;
};

}  // namespace

void CheckReplicas(Env& env, const ParallelCheckpoint& grid, const VerifyOptions& options,
                   VerifyReport* report, const ProblemSink& problem) {
  ReplicaCheck(env, grid, options, report, problem).Run();
}

}  // namespace ucfs
