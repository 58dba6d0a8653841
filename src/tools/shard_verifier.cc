#include "tools/shard_verifier.h"

#include <algorithm>
#include <functional>
#include <map>

#include "tools/expert_files.h"
#include "tools/file_checks.h"
#include "tools/nonfinite_scan.h"
#include "tools/whole_param_replicas.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"

namespace ucfs {

namespace {

using pickle::Document;
using pickle::NodeId;
using Kind = VerifyProblem::Kind;

// What the cross-file checks need of one rank file. Its parsed pickle is
// not kept: at thousands of ranks they would not fit in memory together.
struct RankFile {
  std::string path;
  uint32_t rank = 0;
  bool optim = false;
  bool readable = false;
  std::optional<int64_t> world_claim;  // partition_count or dp_world_size
  const char* claim_name = "";
  std::map<int64_t, double> steps;  // sub-group -> Adam step
  bool flat_groups = false;         // an optimizer file of ZeRO-1/2
};

// Checkpoint::Open reads summaries through this: the ones the per-file
// checks made already, so no rank file is parsed twice.
class SummaryCache final : public TorchFileSource {
 public:
  explicit SummaryCache(Env& env) : env_(env) {}
  void Put(TorchFileSummary s) {
    std::string path = s.path;
    cache_[std::move(path)] = std::move(s);
  }
  Result<TorchFileSummary> Summarize(const std::string& path) override {
    // Open asks for each file once: hand the summary over.
    if (auto node = cache_.extract(path)) return std::move(node.mapped());
    return SummarizeTorchFile(env_, path);
  }

 private:
  Env& env_;
  std::map<std::string, TorchFileSummary> cache_;
};

class ShardVerifier {
 public:
  ShardVerifier(Env& env, const VerifyOptions& options, CheckpointFiles files)
      : env_(env), options_(options), cache_(env), files_(std::move(files)) {}

  ShardVerdict Run() {
    report_.tag_dir = files_.tag_dir;
    for (uint32_t r = 0; r < files_.world_size; ++r) {
      if (!files_.optim_files[r].empty()) rank_files_.push_back(ReadRankFile(r, true));
      if (!files_.model_files[r].empty()) rank_files_.push_back(ReadRankFile(r, false));
    }
    report_.files_checked = rank_files_.size();
    // Without any model-states file the names cannot tell the stage; the
    // optimizer files can: ZeRO-1/2 ones miss mp_rank_00_model_states.pt.
    bool any_model = false, all_flat = true, any_optim = false;
    for (const RankFile& f : rank_files_) {
      any_model |= !f.optim;
      if (f.optim && f.readable) {
        any_optim = true;
        all_flat &= f.flat_groups;
      }
    }
    if (!any_model && any_optim && all_flat) files_.model_per_rank = false;
    CheckWorldSize();
    CheckSteps();
    std::shared_ptr<const Checkpoint> ckpt = OpenModel();
    if (ckpt) {
      const ProblemSink sink = [this](Kind kind, const std::string& file, std::string message) {
        Problem(kind, file, std::move(message));
      };
      ScanNonFinite(env_, *ckpt, options_, files_.tag_dir, &report_, sink);
      CheckWholeParamReplicas(env_, *ckpt, options_, &report_, sink);
      CheckExpertFiles(env_, *ckpt, sink);
    }
    // In rank order, each rank's optimizer file before its model states;
    // a file's problems in the order they were found.
    auto order = [this](const VerifyProblem& p) {
      // ZeRO-1/2's one model-states file goes with rank 0's.
      if (BaseName(p.file) == SharedModelFileName(files_.mp_rank))
        return std::pair<int64_t, int>(0, 1);
      auto name = ParseRankFileName(BaseName(p.file));
      if (!name) return std::pair<int64_t, int>(-1, 0);
      return std::pair<int64_t, int>(name->dp_rank, name->kind == RankFileName::Kind::kModel);
    };
    std::stable_sort(
        report_.problems.begin(), report_.problems.end(),
        [&](const VerifyProblem& a, const VerifyProblem& b) { return order(a) < order(b); });
    return {std::move(report_), std::move(ckpt)};
  }

 private:
  void Problem(Kind kind, const std::string& file, std::string message) {
    report_.problems.push_back({kind, file, std::move(message)});
  }
  void Problem(Kind kind, const std::string& file, const Status& s) {
    Problem(kind, file, s.MessageAbout(file));
  }

  std::string ExpectedPath(uint32_t rank, bool optim) const {
    if (!optim && !files_.model_per_rank)
      return JoinPath(files_.tag_dir, SharedModelFileName(files_.mp_rank));
    return JoinPath(files_.tag_dir,
                    RankFileNameFor(optim ? RankFileName::Kind::kOptim : RankFileName::Kind::kModel,
                                    files_.optim_prefix, rank, files_.mp_rank));
  }

  // --- each file on its own ----------------------------------------------

  RankFile ReadRankFile(uint32_t rank, bool optim) {
    RankFile f;
    f.rank = rank;
    f.optim = optim;
    f.path = optim ? files_.optim_files[rank] : files_.model_files[rank];
    auto summary = SummarizeTorchFile(env_, f.path);
    Status readable = summary.ok() ? CheckTorchLoadable(*summary) : summary.status();
    if (readable.ok() && !summary->legacy) {
      readable = CheckRankFileIdentity(files_, f.path, summary->prefix);
    }
    if (!readable.ok()) {
      Problem(Kind::kUnreadable, f.path, readable);
      return f;
    }
    auto doc = pickle::Parse(summary->pickle);
    if (!doc.ok()) {
      Problem(Kind::kUnreadable, f.path, "data.pkl: " + doc.status().message());
      return f;
    }
    f.readable = true;
    const Document& d = *doc;
    CheckFileTensors(f.path, *summary, d,
                     [this](Kind kind, const std::string& file, std::string m) {
                       Problem(kind, file, std::move(m));
                     });
    if (optim) {
      const NodeId osd = d.Get(d.root(), "optimizer_state_dict");
      const NodeId pc = d.Get(osd, "partition_count");
      f.world_claim = d.AsInt(pc);
      if (!f.world_claim) {
        // ZeRO-1/2 style: one count per param group.
        if (auto counts = d.SequenceItems(pc); counts && !counts->empty()) {
          f.world_claim = d.AsInt(counts->front());
        }
      }
      f.claim_name = "partition_count";
      f.flat_groups = d.Get(osd, "single_partition_of_fp32_groups") != pickle::kNoNode;
      // torch's optimizer state: ZeRO-3 keeps it as optimizer_state_dict,
      // ZeRO-1/2 as base_optimizer_state (state[k] of param group k).
      NodeId state = d.Get(d.Get(osd, "optimizer_state_dict"), "state");
      if (state == pickle::kNoNode) state = d.Get(d.Get(osd, "base_optimizer_state"), "state");
      ReadSteps(f, *summary, d, state);
    } else {
      f.world_claim = d.AsInt(d.Get(d.root(), "dp_world_size"));
      f.claim_name = "dp_world_size";
    }
    // Checkpoint::Open reads every optimizer file and rank 0's model states.
    if (optim || rank == 0) cache_.Put(std::move(summary).value());
    return f;
  }

  // state[k]['step'] of every sub-group: a Python number (DeepSpeed's
  // FusedAdam) or a 0-dim tensor (torch.optim.Adam/AdamW).
  void ReadSteps(RankFile& f, const TorchFileSummary& summary, const Document& d, NodeId state) {
    auto entries = d.MappingItems(state);
    if (!entries) return;
    for (const auto& [key, per_group] : *entries) {
      auto k = d.AsInt(key);
      const NodeId v = d.Get(per_group, "step");
      if (!k || v == pickle::kNoNode) continue;
      const std::string what = "optimizer state[" + std::to_string(*k) + "]['step']";
      if (auto num = d.AsNumber(v)) {
        f.steps[*k] = *num;
        continue;
      }
      auto t = MatchTensor(d, v);
      if (!t.ok() || !t->has_value() || (*t)->numel() != 1) {
        Problem(Kind::kStep, f.path, what + " is neither a number nor a one-element tensor");
        continue;
      }
      auto value = ReadScalar(summary, **t);
      if (!value.ok()) {
        Problem(Kind::kStep, f.path, what + ": " + value.status().MessageAbout(f.path));
        continue;
      }
      f.steps[*k] = *value;
    }
  }

  Result<double> ReadScalar(const TorchFileSummary& summary, const TensorRef& t) {
    const std::string rel = "data/" + t.storage_key;
    const uint64_t end = t.byte_offset() + t.element_size();
    if (const std::string* bytes = summary.SmallRecord(rel); bytes && bytes->size() >= end) {
      return DecodeScalar(bytes->data() + t.byte_offset(), t.dtype);
    }
    const ZipRecord* rec = summary.Find(rel);
    if (rec == nullptr || rec->method != 0 || rec->size < end) {
      return Status::Corruption("no stored record '" + Printable(rel) + "' holding it");
    }
    UCFS_ASSIGN_OR_RETURN(auto file, env_.Open(summary.path));
    UCFS_ASSIGN_OR_RETURN(std::string bytes,
                          file->ReadString(rec->data_offset + t.byte_offset(), t.element_size()));
    return DecodeScalar(bytes.data(), t.dtype);
  }

  // --- across files ------------------------------------------------------

  // The world size is what most rank files say (partition_count,
  // dp_world_size), the number of ranks with files counting as one more
  // voice and winning ties: one edited or stray file is then named as the
  // odd one out, and a missing last rank is a missing file, not a smaller
  // world.
  void CheckWorldSize() {
    const WorldVote vote = VoteWorldSize();
    report_.world_size = static_cast<uint32_t>(vote.world);
    CheckMissingRanks(report_.world_size);
    CheckWorldClaims(vote);
  }

  struct WorldVote {
    int64_t world;   // the world size that won
    uint64_t agree;  // the rank files that claim it
  };

  WorldVote VoteWorldSize() const {
    std::map<int64_t, uint64_t> votes;
    const auto by_files = static_cast<int64_t>(files_.world_size);
    ++votes[by_files];
    for (const RankFile& f : rank_files_) {
      if (f.world_claim) ++votes[*f.world_claim];
    }
    int64_t w = by_files;
    uint64_t best = votes[by_files];
    for (const auto& [value, count] : votes) {
      if (value > 0 && value <= UINT32_MAX && count > best) {
        w = value;
        best = count;
      }
    }
    return {w, best - (w == by_files ? 1 : 0)};
  }

  // Every rank below `world` has its optimizer file and model states.
  void CheckMissingRanks(uint32_t world) {
    bool any_model_beyond_rank0 = false;
    for (uint32_t r = 1; r < files_.world_size; ++r) {
      any_model_beyond_rank0 |= !files_.model_files[r].empty();
    }
    // Ranks past the files are missing one by one up to a point, then as one
    // range: files may claim a world of 2^31 (found by checkpoint_fuzz).
    constexpr uint32_t kListedBeyondFiles = 64;
    const auto listed = static_cast<uint32_t>(
        std::min<uint64_t>(world, uint64_t{files_.world_size} + kListedBeyondFiles));
    if (listed < world) {
      Problem(Kind::kMissing, files_.tag_dir,
              "missing: the files of ranks " + std::to_string(listed) + " to " +
                  std::to_string(world - 1) + " of world size " + std::to_string(world) + " (" +
                  std::to_string(world - listed) + " ranks)");
    }
    for (uint32_t r = 0; r < listed; ++r) {
      const bool have_optim = r < files_.world_size && !files_.optim_files[r].empty();
      // ZeRO-1/2 save the model states once, beside rank 0's optimizer file.
      const bool have_model = (r < files_.world_size && !files_.model_files[r].empty()) ||
                              (r > 0 && !files_.model_per_rank);
      if (!have_optim) {
        Problem(Kind::kMissing, ExpectedPath(r, true),
                "missing: rank " + std::to_string(r) + " of world size " + std::to_string(world));
      }
      if (!have_model) {
        std::string why =
            "missing: rank " + std::to_string(r) + " of world size " + std::to_string(world);
        if (r > 0 && !any_model_beyond_rank0 && !files_.model_files[0].empty()) {
          why +=
              " (only rank 0's model states exist, as DeepSpeed 0.14.5 to 0.17 leave them when "
              "saving with checkpoint.load_universal set; a plain load_checkpoint at this world "
              "size needs every rank's)";
        } else if (r == 0) {
          why += "; rank 0's model states hold the parameter shapes (" +
                 SharedModelFileName(files_.mp_rank) + " at ZeRO stages 1 and 2)";
        }
        Problem(Kind::kMissing, ExpectedPath(r, false), why);
      }
    }
  }

  // Each rank file of a rank past the world size, or claiming another one.
  void CheckWorldClaims(const WorldVote& vote) {
    const int64_t w = vote.world;
    const uint32_t world = report_.world_size;
    const uint64_t agree = vote.agree;
    for (const RankFile& f : rank_files_) {
      if (f.rank >= world) {
        Problem(Kind::kWorldSize, f.path,
                "a file of rank " + std::to_string(f.rank) +
                    ", but the checkpoint's world size is " + std::to_string(world) + " (" +
                    std::to_string(agree) + " rank files' partition_count / dp_world_size say so)");
      } else if (f.world_claim && *f.world_claim != w) {
        Problem(Kind::kWorldSize, f.path,
                std::string(f.claim_name) + " is " + std::to_string(*f.world_claim) +
                    ", but the checkpoint's world size is " + std::to_string(world) + " (" +
                    std::to_string(files_.world_size) + " ranks have files; " +
                    std::to_string(agree) + " rank files say " + std::to_string(world) + ")");
      }
    }
  }

  // Every rank's step of every sub-group equals the step most have.
  void CheckSteps() {
    std::map<double, uint64_t> votes;
    std::map<int64_t, uint64_t> groups;  // sub-group -> files that have its step
    for (const RankFile& f : rank_files_) {
      if (!f.optim || f.rank >= report_.world_size) continue;
      for (const auto& [k, v] : f.steps) {
        ++votes[v];
        ++groups[k];
      }
    }
    if (votes.empty()) return;
    double step = votes.begin()->first;
    uint64_t best = 0;
    for (const auto& [v, count] : votes) {
      if (count > best) {
        step = v;
        best = count;
      }
    }
    report_.step = step;
    for (const RankFile& f : rank_files_) {
      if (!f.optim || !f.readable || f.rank >= report_.world_size) continue;
      std::string odd;
      for (const auto& [k, v] : f.steps) {
        if (v != step) {
          odd += std::string(odd.empty() ? "" : ", ") + ExactNumber(v) + " in sub-group " +
                 std::to_string(k);
        }
      }
      for (const auto& [k, count] : groups) {
        if (!f.steps.contains(k)) {
          odd += std::string(odd.empty() ? "" : ", ") + "none in sub-group " + std::to_string(k);
        }
      }
      if (!odd.empty()) {
        Problem(Kind::kStep, f.path,
                "Adam step is " + odd + "; the other ranks' step is " + ExactNumber(step));
      }
    }
  }

  // The checkpoint as a whole. Its error is reported unless the per-file
  // checks already explain it: a problem of the file it names, or a missing
  // file or world-size disagreement (Open takes the world size from the
  // file names, so anything it says then follows from those).
  std::shared_ptr<const Checkpoint> OpenModel() {
    Status complete = CheckNoRankFileMissing(files_);
    auto ckpt = complete.ok() ? Checkpoint::OpenShard(env_, files_, &cache_)
                              : Result<Checkpoint>(std::move(complete));
    if (ckpt.ok()) {
      report_.params = ckpt->params().size();
      report_.param_alignment = ckpt->param_alignment();
      for (const StateInfo& s : ckpt->states()) report_.states.push_back(s.name);
      report_.optimizer = ckpt->optimizer_type().empty()
                              ? ckpt->optimizer_class()
                              : ckpt->optimizer_type() + " via " + ckpt->optimizer_class();
      // Each param group's states, where they are not all the same.
      std::vector<std::string> by_group(ckpt->param_group_count());
      for (const SubGroupInfo& sg : ckpt->sub_groups()) {
        if (sg.param_group >= by_group.size() || !by_group[sg.param_group].empty()) continue;
        for (const SubGroupState& gs : ckpt->sub_group_states(&sg - ckpt->sub_groups().data())) {
          by_group[sg.param_group] +=
              (by_group[sg.param_group].empty() ? "" : ", ") + ckpt->states()[gs.state].name +
              (gs.layout == StateLayout::kWholeParams ? " (whole params)" : "");
        }
      }
      if (std::adjacent_find(by_group.begin(), by_group.end(), std::not_equal_to<>()) !=
          by_group.end()) {
        report_.group_states = std::move(by_group);
      }
      return std::make_shared<const Checkpoint>(std::move(ckpt).value());
    }
    // The file the error is about, as Checkpoint::Open says (else the tag
    // directory: an error about the checkpoint as a whole).
    const std::string file = ckpt.status().file().empty() ? files_.tag_dir : ckpt.status().file();
    bool explained = false;
    for (const VerifyProblem& p : report_.problems) {
      const bool blocking = p.kind == Kind::kUnreadable || p.kind == Kind::kTensor;
      explained |=
          p.kind == Kind::kMissing || p.kind == Kind::kWorldSize || (blocking && p.file == file);
    }
    if (!explained) Problem(Kind::kStructure, file, ckpt.status());
    return nullptr;
  }

  Env& env_;
  const VerifyOptions& options_;
  SummaryCache cache_;
  CheckpointFiles files_;
  std::vector<RankFile> rank_files_;
  VerifyReport report_;
};

}  // namespace

ShardVerdict VerifyShard(Env& env, const VerifyOptions& options, CheckpointFiles files) {
  return ShardVerifier(env, options, std::move(files)).Run();
}

}  // namespace ucfs
