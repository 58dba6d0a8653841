#include "tools/expert_files.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/codec/torch_file.h"

namespace ucfs {
namespace {

using Kind = VerifyProblem::Kind;

std::string ExpertFileName(int64_t layer, int64_t expert, uint32_t mp_rank) {
  std::string mp = std::to_string(mp_rank);
  if (mp.size() < 2) mp.insert(0, 2 - mp.size(), '0');
  return "layer_" + std::to_string(layer) + "_expert_" + std::to_string(expert) + "_mp_rank_" + mp +
         "_model_states.pt";
}

}  // namespace

void CheckExpertFiles(Env& env, const Checkpoint& c, const ProblemSink& problem) {
  // ZeRO-3 (AutoEP) keeps its experts in the rank files, partitioned.
  if (c.expert_parallel() == 1 || c.partitioning() == Partitioning::kPerParam) return;
  const pickle::Document& doc = c.rank0_model();
  const std::string& model0 = c.files().model_files[0];
  auto layers = doc.SequenceItems(doc.Get(doc.root(), "num_experts"));
  if (!layers) {
    problem(Kind::kStructure, model0,
            "its param groups hold experts, but num_experts is " +
                doc.Repr(doc.Get(doc.root(), "num_experts"), 40) +
                ", not the list of each MoE layer's experts DeepSpeed saves beside them");
    return;
  }
  // A bound on the files looked for: counts come from the file.
  constexpr int64_t kMaxExpertFiles = int64_t{1} << 20;
  std::set<std::string> expected;
  for (size_t layer = 0; layer < layers->size(); ++layer) {
    auto count = doc.AsInt((*layers)[layer]);
    if (!count || *count < 1 || *count > kMaxExpertFiles ||
        static_cast<int64_t>(expected.size()) + *count > kMaxExpertFiles) {
      problem(Kind::kStructure, model0,
              "num_experts[" + std::to_string(layer) + "] is " + doc.Repr((*layers)[layer], 40) +
                  ", not a number of experts");
      return;
    }
    for (int64_t g = 0; g < *count; ++g) {
      const std::string name = ExpertFileName(static_cast<int64_t>(layer), g, c.files().mp_rank);
      expected.insert(name);
      const std::string path = JoinPath(c.files().tag_dir, name);
      auto summary = SummarizeTorchFile(env, path);
      if (!summary.ok()) {
        const bool missing = summary.status().code() == Status::Code::kNotFound;
        problem(missing ? Kind::kMissing : Kind::kUnreadable, path,
                missing ? "missing: expert " + std::to_string(g) + " of MoE layer " +
                              std::to_string(layer) + " (num_experts " + std::to_string(*count) +
                              "), which DeepSpeed's load_checkpoint reads"
                        : summary.status().MessageAbout(path));
        continue;
      }
      auto parsed = pickle::Parse(summary->pickle);
      if (!parsed.ok()) {
        problem(Kind::kUnreadable, path, "data.pkl: " + parsed.status().message());
        continue;
      }
      CheckFileTensors(path, *summary, *parsed, problem);
    }
  }
  auto entries = env.ListDir(c.files().tag_dir);
  if (!entries.ok()) return;
  for (const DirEntry& e : *entries) {
    if (e.is_dir || !IsExpertFileName(e.name) || expected.contains(e.name)) continue;
    problem(Kind::kStructure, JoinPath(c.files().tag_dir, e.name),
            "an expert file of no MoE layer and expert num_experts " +
                doc.Repr(doc.Get(doc.root(), "num_experts"), 40) +
                " lists (files of another run?)");
  }
}

}  // namespace ucfs
