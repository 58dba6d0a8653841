#include "tools/replica_check.h"

#include <string>
#include <vector>

#include "tools/copy_compare.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {
namespace {

using Kind = VerifyProblem::Kind;

class ReplicaCheck {
 public:
  ReplicaCheck(Env& env, const ParallelCheckpoint& grid, const VerifyOptions& options,
               VerifyReport* report, const ProblemSink& problem)
      : grid_(grid),
        options_(options),
        report_(report),
        problem_(problem),
        comparer_(
            env, [&grid](uint32_t i) { return grid.sources()[i]; }, problem) {}

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
  // Copy `t` of state `s` of `p` against copy 0, by value (as torch.equal,
  // which ds_to_universal.py's check uses).
  void ComparePair(const MergedParam& p, size_t s, uint32_t t) {
    const uint32_t tp = grid_.degrees().tp;
    const uint32_t m0 = p.stage * tp, mt = p.stage * tp + t;
    const StateInfo& state = grid_.shard(m0).states()[s];
    const uint64_t numel = grid_.shard(m0).params()[p.slices[0]].numel;
    const std::string& tag_dir = grid_.shard(m0).files().tag_dir;
    auto map = [&](int copy, uint64_t begin, uint64_t end, std::vector<Extent>* out) {
      const uint32_t shard = copy == 0 ? m0 : mt;
      Status st = grid_.MapShardState(shard, p.slices[copy == 0 ? 0 : t], s, begin, end, out);
      if (!st.ok()) {
        const std::string& dir = grid_.shard(shard).files().tag_dir;
        problem_(Kind::kStructure, dir, st.MessageAbout(dir));
      }
      return st.ok();
    };
    auto diff = comparer_.Compare({"'" + Printable(p.name) + "' " + Printable(state.name), tag_dir},
                                  numel, state.dtype, ElementMatch::kValues, options_.chunk_bytes,
                                  map, &report_->bytes_compared);
    if (!diff || diff->differing == 0) return;
    const uint64_t first_byte = diff->first_element * Info(state.dtype).element_size;
    problem_(Kind::kReplica, FileOf(mt, p.slices[t], s, first_byte),
             "'" + Printable(p.name) + "' " + Printable(state.name) + ": tensor-parallel rank " +
                 std::to_string(t) + "'s copy of this replicated param differs from rank 0's (" +
                 FileOf(m0, p.slices[0], s, first_byte) + ") in " +
                 std::to_string(diff->differing) + " of " + std::to_string(numel) +
                 " elements (the first is element " + std::to_string(diff->first_element) + ": " +
                 diff->first_values +
                 "); ds_to_universal.py refuses the checkpoint, and a universal load resumes "
                 "every rank with rank 0's copy");
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
  CopyComparer comparer_;
};

}  // namespace

void CheckReplicas(Env& env, const ParallelCheckpoint& grid, const VerifyOptions& options,
                   VerifyReport* report, const ProblemSink& problem) {
  ReplicaCheck(env, grid, options, report, problem).Run();
}

}  // namespace ucfs
