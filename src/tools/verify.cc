#include "ucfs/tools/verify.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "tools/nonfinite_scan.h"
#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/zip.h"

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
  }
  return "unknown";
}

namespace {

using pickle::Document;
using pickle::NodeId;
using Kind = VerifyProblem::Kind;

// At most this many tensor problems are listed per file; a file whose
// pickle is wrong throughout would otherwise bury everything else.
constexpr int kMaxTensorProblemsPerFile = 5;

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

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

// A rank file's storage records, by storage key (the name past
// "<prefix>/data/").
using StorageRecords = std::unordered_map<std::string_view, const ZipRecord*>;

StorageRecords DataRecords(const TorchFileSummary& summary) {
  StorageRecords records;
  const std::string data_prefix = summary.prefix + "/data/";
  for (const ZipRecord& rec : summary.records) {
    if (std::string_view(rec.name).starts_with(data_prefix)) {
      records.emplace(std::string_view(rec.name).substr(data_prefix.size()), &rec);
    }
  }
  return records;
}

// What is wrong with the storage record of tensor `ref`, if anything.
std::optional<std::string> StorageProblem(const TensorRef& ref, const StorageRecords& records) {
  auto it = records.find(ref.storage_key);
  // MatchTensor bounds the storage to 2^62 bytes.
  const uint64_t need = CheckedMul(ref.storage_numel, ref.element_size()).value_or(UINT64_MAX);
  if (it == records.end()) {
    return "its storage record 'data/" + Printable(ref.storage_key) + "' is not in the archive";
  }
  if (it->second->size < need) {
    return "storage record 'data/" + Printable(ref.storage_key) + "' holds " +
           std::to_string(it->second->size) + " bytes, but its " +
           std::string(Info(ref.dtype).torch_name) + " storage of " +
           std::to_string(ref.storage_numel) + " elements needs " + std::to_string(need);
  }
  return std::nullopt;
}

// Depth-first from the root of a pickle, each node once, naming each by
// its path. A path is kept as a label and its parent's index, and spelled
// out only for a problem: building every node's full path would cost its
// depth in bytes per node (a pickle nested 1000 deep took verify 13-19 s).
class TensorWalk {
 public:
  explicit TensorWalk(const Document& d) : d_(d), seen_(d.size()) {}

  // The next node not seen yet, and its path step; false when done.
  bool Next(NodeId* id, size_t* step) {
    while (!stack_.empty()) {
      auto [next, next_step] = stack_.back();
      stack_.pop_back();
      if (next == pickle::kNoNode || next >= d_.size() || seen_[next]) continue;
      seen_[next] = true;
      *id = next;
      *step = next_step;
      return true;
    }
    return false;
  }

  // Queues what node `id` (at path step `step`) holds: its items, and an
  // object's arguments and state.
  void PushChildren(NodeId id, size_t step) {
    const pickle::Node& n = d_.node(id);
    if (auto items = d_.MappingItems(id)) {
      for (auto it = items->rbegin(); it != items->rend(); ++it) {
        if (!MayHoldTensors(it->second)) continue;
        auto key = d_.AsStr(it->first);
        stack_.emplace_back(
            it->second,
            Child(step,
                  "[" + (key ? "'" + Printable(*key, 64) + "'" : d_.Repr(it->first, 40)) + "]"));
      }
    } else if (auto seq = d_.SequenceItems(id)) {
      for (size_t i = seq->size(); i-- > 0;) {
        if (!MayHoldTensors((*seq)[i])) continue;
        stack_.emplace_back((*seq)[i], Child(step, "[" + std::to_string(i) + "]"));
      }
    }
    // Objects (loss scalers, ...): their arguments and state.
    if (n.kind == pickle::Kind::kReduce || n.kind == pickle::Kind::kNewObj) {
      stack_.emplace_back(n.b, step);
      stack_.emplace_back(n.state, step);
    }
  }

  // The path of `step`, cut past kMaxPathChars.
  std::string PathOf(size_t step) const {
    std::vector<const std::string*> labels;
    for (size_t i = step; i != SIZE_MAX; i = steps_[i].parent) labels.push_back(&steps_[i].label);
    std::string where;
    for (auto it = labels.rbegin(); it != labels.rend(); ++it) {
      if (where.size() > kMaxPathChars) {
        where += "[...]";
        break;
      }
      where += **it;
    }
    return where;
  }

 private:
  // A tensor's path in a message is cut past this many characters.
  static constexpr size_t kMaxPathChars = 400;

  struct PathStep {
    size_t parent;  // index into `steps_`; SIZE_MAX for the root
    std::string label;
  };

  // Only containers and objects can be or hold tensors: scalars and
  // strings are never pushed (a list of millions of them would otherwise
  // cost a path step each).
  bool MayHoldTensors(NodeId id) const {
    if (id >= d_.size() || seen_[id]) return false;
    switch (d_.node(id).kind) {
      case pickle::Kind::kTuple:
      case pickle::Kind::kList:
      case pickle::Kind::kDict:
      case pickle::Kind::kSet:
      case pickle::Kind::kFrozenSet:
      case pickle::Kind::kReduce:
      case pickle::Kind::kNewObj:
        return true;
      default:
        return false;
    }
  }

  size_t Child(size_t parent, std::string label) {
    steps_.push_back({parent, std::move(label)});
    return steps_.size() - 1;
  }

  const Document& d_;
  std::vector<PathStep> steps_{{SIZE_MAX, ""}};
  std::vector<bool> seen_;
  std::vector<std::pair<NodeId, size_t>> stack_{{d_.root(), 0}};
};

class Verifier {
 public:
  Verifier(Env& env, const VerifyOptions& options) : env_(env), options_(options), cache_(env) {}

  Result<VerifyReport> Run(const std::string& path) {
    UCFS_ASSIGN_OR_RETURN(files_, ListCheckpointFiles(env_, path, options_.tag));
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
    auto ckpt = OpenModel(path);
    if (ckpt) {
      ScanNonFinite(env_, *ckpt, options_, files_.tag_dir, &report_,
                    [this](Kind kind, const std::string& file, std::string message) {
                      Problem(kind, file, std::move(message));
                    });
    }
    // In rank order, each rank's optimizer file before its model states;
    // a file's problems in the order they were found.
    auto order = [](const VerifyProblem& p) {
      // ZeRO-1/2's one model-states file goes with rank 0's.
      if (BaseName(p.file) == SharedModelFileName()) return std::pair<int64_t, int>(0, 1);
      auto name = ParseRankFileName(BaseName(p.file));
      if (!name) return std::pair<int64_t, int>(-1, 0);
      return std::pair<int64_t, int>(name->dp_rank, name->kind == RankFileName::Kind::kModel);
    };
    std::stable_sort(
        report_.problems.begin(), report_.problems.end(),
        [&](const VerifyProblem& a, const VerifyProblem& b) { return order(a) < order(b); });
    return std::move(report_);
  }

 private:
  void Problem(Kind kind, const std::string& file, std::string message) {
    report_.problems.push_back({kind, file, std::move(message)});
  }
  void Problem(Kind kind, const std::string& file, const Status& s) {
    Problem(kind, file, s.MessageAbout(file));
  }

  std::string ExpectedPath(uint32_t rank, bool optim) const {
    if (!optim && !files_.model_per_rank) return JoinPath(files_.tag_dir, SharedModelFileName());
    return JoinPath(files_.tag_dir,
                    RankFileNameFor(optim ? RankFileName::Kind::kOptim : RankFileName::Kind::kModel,
                                    files_.optim_prefix, rank));
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
    CheckTensors(f, *summary, d);
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

  // Every tensor in the file, wherever it is in the pickle: its storage
  // record exists and holds the whole storage, and the tensor lies inside
  // its storage (MatchTensor). Checkpoint::Open checks the tensors it uses;
  // this covers every tensor of every rank file.
  void CheckTensors(const RankFile& f, const TorchFileSummary& summary, const Document& d) {
    const StorageRecords records = DataRecords(summary);
    int reported = 0;
    uint64_t unreported = 0;
    auto bad = [&](const std::string& where, const std::string& what) {
      if (reported < kMaxTensorProblemsPerFile) {
        Problem(Kind::kTensor, f.path, where + ": " + what);
        ++reported;
      } else {
        ++unreported;
      }
    };
    TensorWalk walk(d);
    NodeId id = pickle::kNoNode;
    size_t step = 0;
    while (walk.Next(&id, &step)) {
      // MatchTensor knows torch's rebuild calls: a tensor, a malformed one,
      // or (nullopt) some other object to look inside.
      auto t = MatchTensor(d, id);
      if (!t.ok()) {
        bad(walk.PathOf(step), t.status().message());
        continue;
      }
      if (t->has_value()) {
        if (auto what = StorageProblem(**t, records)) bad(walk.PathOf(step), *what);
        continue;
      }
      walk.PushChildren(id, step);
    }
    if (unreported > 0) {
      Problem(Kind::kTensor, f.path,
              "and " + std::to_string(unreported) + " more tensors with problems");
    }
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
          why += "; rank 0's model states hold the parameter shapes (" + SharedModelFileName() +
                 " at ZeRO stages 1 and 2)";
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
          odd += std::string(odd.empty() ? "" : ", ") + Number(v) + " in sub-group " +
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
                "Adam step is " + odd + "; the other ranks' step is " + Number(step));
      }
    }
  }

  // The checkpoint as a whole. Its error is reported unless the per-file
  // checks already explain it: a problem of the file it names, or a missing
  // file or world-size disagreement (Open takes the world size from the
  // file names, so anything it says then follows from those).
  std::optional<Checkpoint> OpenModel(const std::string& path) {
    CheckpointOptions options;
    options.tag = options_.tag;
    options.source = &cache_;
    auto ckpt = Checkpoint::Open(env_, path, options);
    if (ckpt.ok()) {
      report_.params = ckpt->params().size();
      for (const StateInfo& s : ckpt->states()) report_.states.push_back(s.name);
      return std::move(ckpt).value();
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
    return std::nullopt;
  }

  Env& env_;
  const VerifyOptions& options_;
  SummaryCache cache_;
  CheckpointFiles files_;
  std::vector<RankFile> rank_files_;
  VerifyReport report_;
};

}  // namespace

Result<VerifyReport> Verify(Env& env, const std::string& path, const VerifyOptions& options) {
  return Verifier(env, options).Run(path);
}

}  // namespace ucfs
