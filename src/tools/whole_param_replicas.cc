#include "tools/whole_param_replicas.h"

#include <string>
#include <vector>

#include "tools/copy_compare.h"

namespace ucfs {
namespace {

using Kind = VerifyProblem::Kind;

class WholeParamReplicas {
 public:
  WholeParamReplicas(Env& env, const Checkpoint& c, const VerifyOptions& options,
                     VerifyReport* report, const ProblemSink& problem)
      : c_(c),
        options_(options),
        report_(report),
        problem_(problem),
        comparer_(
            env, [&c](uint32_t i) { return c.sources()[i]; }, problem) {}

  void Run() {
    for (size_t p = 0; p < c_.params().size(); ++p) {
      for (const SubGroupState& gs : c_.StatesOf(p)) {
        if (gs.layout != StateLayout::kWholeParams) continue;
        const std::vector<uint32_t> ranks = c_.WholeParamRanks(p);
        for (size_t i = 1; i < ranks.size(); ++i) Compare(p, gs.state, ranks[0], ranks[i]);
      }
    }
  }

 private:
  void Compare(size_t p, size_t s, uint32_t first, uint32_t rank) {
    const StateInfo& state = c_.states()[s];
    const std::string& name = c_.params()[p].name;
    const std::string& tag_dir = c_.files().tag_dir;
    auto map = [&](int copy, uint64_t begin, uint64_t end, std::vector<Extent>* out) {
      Status st = c_.MapWholeParamCopy(p, s, copy == 0 ? first : rank, begin, end, out);
      if (!st.ok()) problem_(Kind::kStructure, tag_dir, st.MessageAbout(tag_dir));
      return st.ok();
    };
    const uint64_t numel = c_.params()[p].numel;
    // Bytes, not values: the copies are the same all-reduced update.
    auto diff = comparer_.Compare({"'" + Printable(name) + "' " + Printable(state.name), tag_dir},
                                  numel, state.dtype, ElementMatch::kBytes, options_.chunk_bytes,
                                  map, &report_->bytes_compared);
    if (!diff || diff->differing == 0) return;
    problem_(Kind::kReplica, FileOf(rank),
             "'" + Printable(name) + "' " + Printable(state.name) + ": rank " +
                 std::to_string(rank) +
                 "'s copy of this Muon param's whole momentum differs from " + "rank " +
                 std::to_string(first) + "'s (" + FileOf(first) + ") in " +
                 std::to_string(diff->differing) + " of " + std::to_string(numel) +
                 " elements (the first is element " + std::to_string(diff->first_element) +
                 "); ucfs serves rank " + std::to_string(first) +
                 "'s, and DeepSpeed would resume each rank with its own");
  }

  // Rank r's optimizer file is source r.
  std::string FileOf(uint32_t rank) const {
    return rank < c_.world_size() ? c_.sources()[rank].path : c_.files().tag_dir;
  }

  const Checkpoint& c_;
  const VerifyOptions& options_;
  VerifyReport* report_;
  const ProblemSink& problem_;
  CopyComparer comparer_;
};

}  // namespace

void CheckWholeParamReplicas(Env& env, const Checkpoint& c, const VerifyOptions& options,
                             VerifyReport* report, const ProblemSink& problem) {
  WholeParamReplicas(env, c, options, report, problem).Run();
}

}  // namespace ucfs
