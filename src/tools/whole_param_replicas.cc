#include "tools/whole_param_replicas.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "ucfs/base/checked_math.h"
#include "ucfs/vfs/source_files.h"

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
        sources_(env, [&c](uint32_t i) { return c.sources()[i]; }) {}

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
    const uint32_t es = Info(state.dtype).element_size;
    const uint64_t numel = c_.params()[p].numel;
    const uint64_t bytes = CheckedMul<uint64_t>(numel, es).value_or(0);
    const uint64_t chunk = std::max<uint64_t>(options_.chunk_bytes / es * es, es);
    uint64_t differ = 0, first_element = 0;
    for (uint64_t begin = 0; begin < bytes; begin += chunk) {
      const uint64_t end = std::min(bytes, begin + chunk);
      if (!Read(p, s, first, begin, end, &a_) || !Read(p, s, rank, begin, end, &b_)) return;
      report_->bytes_compared += 2 * (end - begin);
      // Bytes, not values: the copies are the same all-reduced update, and
      // a -0 against +0 is a copy that was made otherwise.
      for (uint64_t i = 0; i < end - begin; i += es) {
        if (std::memcmp(a_.data() + i, b_.data() + i, es) == 0) continue;
        if (differ++ == 0) first_element = (begin + i) / es;
      }
    }
    if (differ == 0) return;
    problem_(Kind::kReplica, FileOf(rank),
             "'" + Printable(c_.params()[p].name) + "' " + Printable(state.name) + ": rank " +
                 std::to_string(rank) +
                 "'s copy of this Muon param's whole momentum differs from " + "rank " +
                 std::to_string(first) + "'s (" + FileOf(first) + ") in " + std::to_string(differ) +
                 " of " + std::to_string(numel) + " elements (the first is element " +
                 std::to_string(first_element) + "); ucfs serves rank " + std::to_string(first) +
                 "'s, and DeepSpeed would resume each rank with its own");
  }

  bool Read(size_t p, size_t s, uint32_t rank, uint64_t begin, uint64_t end,
            std::vector<char>* out) {
    std::vector<Extent> extents;
    if (Status st = c_.MapWholeParamCopy(p, s, rank, begin, end, &extents); !st.ok()) {
      problem_(Kind::kStructure, c_.files().tag_dir, st.MessageAbout(c_.files().tag_dir));
      return false;
    }
    out->resize(end - begin);
    uint64_t at = 0;
    for (const Extent& e : extents) {
      const std::string& path = c_.sources()[e.file].path;
      auto file = sources_.Get(e.file);
      Status st =
          file.ok() ? (*file)->ReadExact(e.offset, e.length, out->data() + at) : file.status();
      if (!st.ok()) {
        if (failed_.insert(e.file).second) problem_(Kind::kUnreadable, path, st.MessageAbout(path));
        return false;
      }
      at += e.length;
    }
    return at == end - begin;
  }

  // Rank r's optimizer file is source r.
  std::string FileOf(uint32_t rank) const {
    return rank < c_.world_size() ? c_.sources()[rank].path : c_.files().tag_dir;
  }

  const Checkpoint& c_;
  const VerifyOptions& options_;
  VerifyReport* report_;
  const ProblemSink& problem_;
  SourceFiles sources_;
  std::set<uint32_t> failed_;
  std::vector<char> a_, b_;
};

}  // namespace

void CheckWholeParamReplicas(Env& env, const Checkpoint& c, const VerifyOptions& options,
                             VerifyReport* report, const ProblemSink& problem) {
  WholeParamReplicas(env, c, options, report, problem).Run();
}

}  // namespace ucfs
