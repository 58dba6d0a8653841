#include "ucfs/tools/verify.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "tools/file_checks.h"
#include "tools/replica_check.h"
#include "tools/shard_verifier.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"

namespace ucfs {

std::string_view KindName(VerifyProblem::Kind kind) {
  switch (kind) {
    case VerifyProblem::Kind::kMissing:
      return "missing";
    case VerifyProblem::Kind::kUnreadable:
      return "unreadable";
    case VerifyProblem::Kind::kWorldSize:
      return "world_size";
    case VerifyProblem::Kind::kTensor:
      return "tensor";
    case VerifyProblem::Kind::kStep:
      return "step";
    case VerifyProblem::Kind::kStructure:
      return "structure";
    case VerifyProblem::Kind::kNonFinite:
      return "nonfinite";
    case VerifyProblem::Kind::kUniversal:
      return "universal";
    case VerifyProblem::Kind::kReplica:
      return "replica";
    case VerifyProblem::Kind::kUnsafeAtAnotherTensorDegree:
      return "unsafe_at_another_tensor_degree";
    case VerifyProblem::Kind::kNoUniversalLayout:
      return "no_universal_layout";
  }
  return "unknown";
}

namespace {

using Kind = VerifyProblem::Kind;

// A checkpoint as the grid it is: each shard group checked as the
// data-parallel checkpoint it is (a data-parallel checkpoint is the one
// shard group of a 1 x 1 x D grid), then what holds the grid together.
class GridVerifier {
 public:
  GridVerifier(Env& env, const VerifyOptions& options) : env_(env), options_(options) {}

  Result<VerifyReport> Run(const std::string& path) {
    UCFS_ASSIGN_OR_RETURN(grid_, ListParallelCheckpointFiles(env_, path, options_.tag));
    std::vector<std::shared_ptr<const Checkpoint>> opened;
    for (uint32_t m = 0; m < grid_.degrees.mp(); ++m) {
      ShardVerdict verdict = VerifyShard(env_, options_, grid_.shards[m]);
      Add(m, std::move(verdict.report));
      opened.push_back(std::move(verdict.checkpoint));
    }
    report_.tag_dir = grid_.shards[0].tag_dir;
    report_.degrees = grid_.degrees;
    report_.degrees.dp = report_.world_size;
    CheckLayerFiles();
    CheckStepsAcrossShards();
    for (const auto& shard : opened) {
      if (!shard) continue;
      const std::string& model = shard->files().model_files[0];
      if (Status s = CheckParallelDimensions(grid_.degrees, shard->rank0_model(), model); !s.ok()) {
        Problem(Kind::kStructure, model, s.MessageAbout(model));
      }
    }
    if (std::find(opened.begin(), opened.end(), nullptr) == opened.end()) {
      CheckUniversal(
          ParallelCheckpoint::FromShards(grid_, std::move(opened), options_.universal_info));
    }
    return std::move(report_);
  }

 private:
  void Problem(Kind kind, const std::string& file, std::string message) {
    report_.problems.push_back({kind, file, std::move(message)});
  }
  ProblemSink Sink() {
    return [this](Kind kind, const std::string& file, std::string message) {
      Problem(kind, file, std::move(message));
    };
  }

  // Shard group m's report into the grid's.
  void Add(uint32_t m, VerifyReport shard) {
    if (m == 0) {
      report_.world_size = shard.world_size;
      report_.states = shard.states;
      report_.optimizer = shard.optimizer;
      report_.group_states = shard.group_states;
      report_.scanned = shard.scanned;
      report_.param_alignment = shard.param_alignment;
    }
    report_.scanned = report_.scanned && shard.scanned;
    report_.files_checked += shard.files_checked;
    report_.params += shard.params;
    report_.bytes_scanned += shard.bytes_scanned;
    report_.bytes_compared += shard.bytes_compared;
    for (auto* list : {&shard.problems, &shard.warnings}) {
      auto& into = list == &shard.problems ? report_.problems : report_.warnings;
      into.insert(into.end(), std::make_move_iterator(list->begin()),
                  std::make_move_iterator(list->end()));
    }
    for (NonFiniteCount& n : shard.nonfinite) {
      n.mp_rank = m;
      report_.nonfinite.push_back(std::move(n));
    }
    steps_.push_back(shard.step);
  }

  // Every layer of a pipeline saved by every tensor-parallel rank, and
  // each file a readable torch.save file whose tensors lie in their records.
  void CheckLayerFiles() {
    std::set<uint32_t> layers;
    for (const auto& [key, path] : grid_.layer_files) {
      layers.insert(key.first);
      ++report_.files_checked;
      auto summary = SummarizeTorchFile(env_, path);
      Status readable = summary.ok() ? CheckTorchLoadable(*summary) : summary.status();
      if (!readable.ok()) {
        Problem(Kind::kUnreadable, path, readable.MessageAbout(path));
        continue;
      }
      auto doc = pickle::Parse(summary->pickle);
      if (!doc.ok()) {
        Problem(Kind::kUnreadable, path, "data.pkl: " + doc.status().message());
        continue;
      }
      CheckFileTensors(path, *summary, *doc, Sink());
    }
    const std::string& tag_dir = grid_.shards[0].tag_dir;
    for (uint32_t layer : layers) {
      for (uint32_t t = 0; t < grid_.degrees.tp; ++t) {
        if (grid_.layer_files.contains({layer, t})) continue;
        Problem(Kind::kMissing, JoinPath(tag_dir, LayerFileNameFor(layer, t)),
                "missing: tensor-parallel rank " + std::to_string(t) + "'s part of layer " +
                    std::to_string(layer) + ", which the other tensor-parallel ranks saved");
      }
    }
  }

  // Every shard group took the same number of steps: the most common
  // step is the grid's, the others are named by their first rank file.
  void CheckStepsAcrossShards() {
    std::map<double, uint32_t> votes;
    for (const auto& s : steps_) {
      if (s) ++votes[*s];
    }
    if (votes.empty()) return;
    auto best = std::max_element(votes.begin(), votes.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    report_.step = best->first;
    for (uint32_t m = 0; m < steps_.size(); ++m) {
      if (!steps_[m] || *steps_[m] == best->first) continue;
      std::string file = grid_.shards[m].tag_dir;
      for (const std::string& f : grid_.shards[m].optim_files) {
        if (!f.empty()) {
          file = f;
          break;
        }
      }
      Problem(Kind::kStep, file,
              "Adam step is " + ExactNumber(*steps_[m]) + " in shard group " + std::to_string(m) +
                  " (stage " + std::to_string(grid_.Stage(m)) + ", tensor-parallel rank " +
                  std::to_string(grid_.TpRank(m)) + "); the other shard groups' step is " +
                  ExactNumber(best->first));
    }
  }

  // The universal name table, its warnings, and the replicated params'
  // copies. A data-parallel checkpoint without universal_checkpoint_info
  // has no table to check.
  void CheckUniversal(const ParallelCheckpoint& g) {
    const bool grid = g.degrees().mp() > 1;
    if (!grid && !g.has_universal_info()) return;
    const Status& merge = g.merge_status();
    if (!merge.ok()) {
      const std::string file = merge.file().empty() ? report_.tag_dir : merge.file();
      if (merge.code() == Status::Code::kNotSupported) {
        report_.warnings.push_back(
            {Kind::kNoUniversalLayout, file,
             merge.MessageAbout(file) + "; ucfs serves it at its own tensor-parallel degree only"});
      } else {
        Problem(Kind::kUniversal, file, merge.MessageAbout(file));
      }
      return;
    }
    if (const auto& unsafe = g.unsafe_at_another_tensor_degree()) {
      report_.warnings.push_back(
          {Kind::kUnsafeAtAnotherTensorDegree, g.shard(0).files().model_files[0], *unsafe});
    }
    if (grid) report_.params = g.params().size();
    CheckReplicas(env_, g, options_, &report_, Sink());
  }

  Env& env_;
  const VerifyOptions& options_;
  ParallelCheckpointFiles grid_;
  std::vector<std::optional<double>> steps_;  // by shard group
  VerifyReport report_;
};

}  // namespace

Result<VerifyReport> Verify(Env& env, const std::string& path, const VerifyOptions& options) {
  return GridVerifier(env, options).Run(path);
}

}  // namespace ucfs
