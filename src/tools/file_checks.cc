#include "tools/file_checks.h"

#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ucfs/base/checked_math.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::NodeId;

// At most this many tensor problems are listed per file; a file whose
// pickle is wrong throughout would otherwise bury everything else.
constexpr int kMaxTensorProblemsPerFile = 5;

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

}  // namespace

std::string ExactNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void CheckFileTensors(const std::string& path, const TorchFileSummary& summary,
                      const pickle::Document& d, const ProblemSink& problem) {
  const StorageRecords records = DataRecords(summary);
  int reported = 0;
  uint64_t unreported = 0;
  auto bad = [&](const std::string& where, const std::string& what) {
    if (reported < kMaxTensorProblemsPerFile) {
      problem(VerifyProblem::Kind::kTensor, path, where + ": " + what);
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
    problem(VerifyProblem::Kind::kTensor, path,
            "and " + std::to_string(unreported) + " more tensors with problems");
  }
}

}  // namespace ucfs
