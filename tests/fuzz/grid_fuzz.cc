// Fuzz target: tensor- and pipeline-parallel grids. As checkpoint_fuzz, the
// input is a small mutation program applied to a real DeepSpeed checkpoint
// (one of tests/data/tp_fixtures, held in a MemEnv), here aimed at what
// holds a grid together: which files there are and what they are named,
// and the universal_checkpoint_info patterns every param's merge is decided
// by.
//
//   byte 0      which fixture (bits 0-5, mod their number); bit 6: open the
//               tag directory instead of the root; bit 7: also build the
//               universal view with real CRCs
//   then ops    an opcode byte (mod kNumOps) and its operands, at most
//               kMaxOps; a program that runs out of bytes reads zeros. Files
//               are picked by index into the tag directory's sorted names.
//
//   kRemove     a file gone: a missing mp rank, a missing layer file
//   kRename     a file renamed (or, with kCopy, copied) to another mp rank,
//   kCopy       data-parallel rank, layer number or tensor-parallel rank of
//               a layer file (a layer file of another T), or to a name of
//               the other kind (bf16_ prefix, model for optimizer states)
//   kPattern    a pattern added to one universal_checkpoint_info list of
//               mp_rank_00 (or of every model-states file): one matching
//               nothing, everything, a param's exact name, a duplicate of
//               the list's first, Python-only syntax, an unbalanced one, a
//               long one, one with a NUL
//   kInfo       a key of universal_checkpoint_info set to another value (the
//               vocabulary sizes to 0, -1, 1, 2^62, off by one; a list to a
//               string or None; the version to a string) or removed
//   kShape      one dimension of one param_shapes entry of one model-states
//               file changed: shards that disagree on a param
//   kInt        the k-th int of a file's pickle set to another value
//   kFlipByte, kTruncate   a file's bytes
//
// Then: ParallelCheckpoint::Open, inspect (text and JSON) and verify; when
// it opens, the universal view (its <tag>_fp32 with it) and the view at a
// new data-parallel size (1 and D + 1) are built and every file read, as
// checkpoint_fuzz reads them (view_reader.h), with its invariants. An
// unmutated fixture must open, verify OK and build every view.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mutation_support.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/inspect_report.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/tools/verify.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"
#include "view_reader.h"

#ifndef UCFS_FUZZ_TP_FIXTURES
#error "UCFS_FUZZ_TP_FIXTURES must name tests/data/tp_fixtures"
#endif

namespace {

using ucfs::pickle::Document;
using ucfs::pickle::Kind;
using ucfs::pickle::kNoNode;
using ucfs::pickle::Node;
using ucfs::pickle::NodeId;
using ucfs_fuzz::Fail;
using ucfs_fuzz::ParseArchive;
using ucfs_fuzz::Program;
using ucfs_fuzz::Reader;
using ucfs_fuzz::Serialize;

constexpr size_t kMaxOps = 24;
const std::string kRoot = "/ckpt";

struct Fixture {
  std::string name;
  std::string tag_dir;                       // "/ckpt/global_step4"
  std::map<std::string, std::string> files;  // every file: path -> bytes
};

std::vector<Fixture> LoadFixtures() {
  namespace fs = std::filesystem;
  std::vector<Fixture> out;
  for (const fs::path& fixture_dir :
       ucfs_fuzz::FixtureDirs("UCFS_FUZZ_TP_FIXTURES", UCFS_FUZZ_TP_FIXTURES)) {
    Fixture f;
    f.name = fixture_dir.filename().string();
    const fs::path root = fixture_dir / "checkpoint";
    f.tag_dir = kRoot + "/" + ucfs_fuzz::LatestTag(root);
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.is_regular_file()) {
        f.files[kRoot + "/" + fs::relative(e.path(), root).string()] =
            ucfs_fuzz::ReadWhole(e.path());
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

const std::vector<Fixture>& Fixtures() {
  static const std::vector<Fixture> fixtures = LoadFixtures();
  return fixtures;
}

enum Op : uint8_t {
  kRemove,
  kRename,
  kCopy,
  kPattern,
  kInfo,
  kShape,
  kInt,
  kFlipByte,
  kTruncate,
  kNumOps
};

class Work {
 public:
  explicit Work(const Fixture& f) : fixture_(f), files_(f.files) {}

  // The k-th file of the tag directory (by name), or "" when there is none.
  std::string TagFile(uint8_t k) const {
    std::vector<std::string> in_tag;
    for (const auto& [path, bytes] : files_) {
      if (path.starts_with(fixture_.tag_dir + "/")) in_tag.push_back(path);
    }
    return in_tag.empty() ? "" : in_tag[k % in_tag.size()];
  }
  std::map<std::string, std::string>& files() { return files_; }
  const std::string& tag_dir() const { return fixture_.tag_dir; }

  // Applies `edit` to the pickle of `path`; the file is unchanged when it
  // does not parse or the edit cannot be written.
  void EditPickle(const std::string& path, const std::function<bool(Document&)>& edit) {
    auto it = files_.find(path);
    if (it == files_.end()) return;
    auto ar = ParseArchive(it->second);
    if (!ar || !edit(ar->doc)) return;
    ar->dirty = true;
    if (auto bytes = Serialize(*ar)) it->second = std::move(*bytes);
  }

  bool Mutated() const { return files_ != fixture_.files; }

 private:
  const Fixture& fixture_;
  std::map<std::string, std::string> files_;
};

// A rank or layer file's name with one of its numbers changed.
std::string Renamed(const std::string& name, uint8_t what, uint8_t n) {
  if (auto layer = ucfs::ParseLayerFileName(name)) {
    if (what % 3 == 0) return ucfs::LayerFileNameFor(n % 8, layer->tp_rank);
    if (what % 3 == 1) return ucfs::LayerFileNameFor(layer->layer, n % 5);
    return ucfs::LayerFileNameFor(layer->layer, std::nullopt);  // no model axis
  }
  if (auto rank = ucfs::ParseRankFileName(name)) {
    switch (what % 4) {
      case 0:
        return ucfs::RankFileNameFor(rank->kind, rank->prefix, rank->dp_rank, n % 9);
      case 1:
        return ucfs::RankFileNameFor(rank->kind, rank->prefix, n % 5, rank->mp_rank);
      case 2:
        return ucfs::RankFileNameFor(rank->kind, rank->prefix == "bf16_" ? "" : "bf16_",
                                     rank->dp_rank, rank->mp_rank);
      default:
        return ucfs::RankFileNameFor(rank->kind == ucfs::RankFileName::Kind::kOptim
                                         ? ucfs::RankFileName::Kind::kModel
                                         : ucfs::RankFileName::Kind::kOptim,
                                     rank->prefix, rank->dp_rank, rank->mp_rank);
    }
  }
  if (name.starts_with("mp_rank_")) return ucfs::SharedModelFileName(n % 9);
  return name + ".moved";
}

const char* const kInfoLists[] = {
    "tp_replicated_parameter_patterns",      "parameter_to_average_patterns",
    "parameter_with_2_sub_params_cat_dim_0", "parameter_with_row_parallelism_patterns",
    "vocabulary_parameter_patterns",         "pipeline_replicated_parameter_patterns",
};
const char* const kInfoScalars[] = {"original_vocab_size", "padded_vocab_size",
                                    "universal_checkpoint_version"};

// One pattern the converter would trip over, or none would.
std::string PatternOf(uint8_t which, const Document& doc, NodeId list) {
  switch (which % 9) {
    case 0:
      return "no_such_param";
    case 1:
      return ".*";
    case 2:
      return "language_model.encoder.layers.0.input_layernorm.weight";
    case 3: {
      if (auto items = doc.SequenceItems(list); items && !items->empty()) {
        if (auto s = doc.AsStr(items->front())) return std::string(*s);
      }
      return "\\d+.weight";
    }
    case 4:
      return "(?P<n>\\d+).weight";
    case 5:
      return "(unbalanced";
    case 6:
      return std::string(5000, 'a') + "*";
    case 7:
      return std::string("a\0b", 3);
    default:
      return "\\d+\\.mlp\\.dense_4h_to_h\\.weight$";
  }
}

NodeId InfoOf(Document& doc) { return doc.Get(doc.root(), "universal_checkpoint_info"); }

// Sets `key` of dict `dict` to `value` (adding it when absent).
void SetKey(Document& doc, NodeId dict, const std::string& key, NodeId value) {
  Node& n = doc.mutable_node(dict);
  if (n.kind != Kind::kDict) return;
  for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
    if (doc.AsStr(n.items[i]) == key) {
      n.items[i + 1] = value;
      return;
    }
  }
  const NodeId k = doc.AddStr(key);
  doc.mutable_node(dict).items.push_back(k);
  doc.mutable_node(dict).items.push_back(value);
}

NodeId IntNode(Document& doc, int64_t v) {
  Node n;
  n.kind = Kind::kInt;
  n.scalar = v;
  return doc.Add(std::move(n));
}

int64_t IntValue(uint8_t which, int64_t old) {
  switch (which % 8) {
    case 0:
      return 0;
    case 1:
      return -1;
    case 2:
      return 1;
    case 3:
      return int64_t{1} << 62;
    case 4:
      return old + 1;
    case 5:
      return old - 1;
    case 6:
      return old * 2;
    default:
      return int64_t{1} << 31;
  }
}

// The model-states files: mp_rank_00's alone, or every one.
std::vector<std::string> ModelFiles(Work& w, bool every) {
  std::vector<std::string> out;
  for (const auto& [path, bytes] : w.files()) {
    const std::string name = std::filesystem::path(path).filename().string();
    if (!path.starts_with(w.tag_dir() + "/")) continue;
    const bool model =
        name.starts_with("mp_rank_") || (name.find("_model_states.pt") != std::string::npos &&
                                         ucfs::ParseRankFileName(name).has_value());
    if (model && (every || name == ucfs::SharedModelFileName() ||
                  name == ucfs::RankFileNameFor(ucfs::RankFileName::Kind::kModel, "", 0, 0))) {
      out.push_back(path);
    }
  }
  return out;
}

// `edit` applied to the universal_checkpoint_info of mp_rank_00's
// model states, or of every model-states file; files without one are left.
void EditInfo(Work& w, bool every, const std::function<void(Document&, NodeId info)>& edit) {
  for (const std::string& f : ModelFiles(w, every)) {
    w.EditPickle(f, [&](Document& doc) {
      const NodeId info = InfoOf(doc);
      if (info == kNoNode) return false;
      edit(doc, info);
      return true;
    });
  }
}

void RunProgram(Program& prog, Work& w) {
  for (size_t i = 0; i < kMaxOps && !prog.done(); ++i) {
    const uint8_t op = prog.U8() % kNumOps;
    switch (op) {
      case kRemove:
        w.files().erase(w.TagFile(prog.U8()));
        break;
      case kRename:
      case kCopy: {
        const std::string from = w.TagFile(prog.U8());
        const uint8_t what = prog.U8(), n = prog.U8();
        auto it = w.files().find(from);
        if (it == w.files().end()) break;
        const std::filesystem::path p(from);
        const std::string to = (p.parent_path() / Renamed(p.filename().string(), what, n)).string();
        std::string bytes = it->second;
        if (op == kRename) w.files().erase(it);
        w.files()[to] = std::move(bytes);
        break;
      }
      case kPattern: {
        const uint8_t list = prog.U8(), which = prog.U8(), scope = prog.U8();
        EditInfo(w, scope & 1, [&](Document& doc, NodeId info) {
          const std::string key = kInfoLists[list % std::size(kInfoLists)];
          NodeId l = doc.Get(info, key);
          if (l == kNoNode || doc.node(l).kind != Kind::kList) {
            Node n;
            n.kind = Kind::kList;
            l = doc.Add(std::move(n));
            SetKey(doc, info, key, l);
          }
          doc.Append(l, doc.AddStr(PatternOf(which, doc, l)));
        });
        break;
      }
      case kInfo: {
        const uint8_t key = prog.U8(), which = prog.U8(), scope = prog.U8();
        EditInfo(w, scope & 1, [&](Document& doc, NodeId info) {
          const size_t nkeys = std::size(kInfoScalars) + std::size(kInfoLists);
          const size_t k = key % nkeys;
          const std::string name = k < std::size(kInfoScalars)
                                       ? kInfoScalars[k]
                                       : kInfoLists[k - std::size(kInfoScalars)];
          const NodeId old = doc.Get(info, name);
          NodeId value;
          if (which % 4 == 0) {
            value = doc.AddStr("0.2");
          } else if (which % 4 == 1) {
            Node none;
            none.kind = Kind::kNone;
            value = doc.Add(std::move(none));
          } else {
            value = IntNode(doc, IntValue(which >> 2, doc.AsInt(old).value_or(13)));
          }
          SetKey(doc, info, name, value);
        });
        break;
      }
      case kShape: {
        const std::string f = w.TagFile(prog.U8());
        const uint8_t k = prog.U8(), dim = prog.U8(), which = prog.U8();
        w.EditPickle(f, [&](Document& doc) {
          NodeId shapes = doc.Get(doc.root(), "param_shapes");
          auto groups = doc.SequenceItems(shapes);
          if (groups && !groups->empty()) shapes = (*groups)[k % groups->size()];
          auto entries = doc.MappingItems(shapes);
          if (!entries || entries->empty()) return false;
          const NodeId size = (*entries)[k % entries->size()].second;
          // torch.Size((a, b)): the tuple of its dimensions.
          NodeId dims = doc.node(size).kind == Kind::kTuple ? size : doc.node(size).b;
          if (dims != kNoNode && doc.node(dims).kind == Kind::kTuple) {
            if (auto items = doc.SequenceItems(dims); items && !items->empty()) dims = (*items)[0];
          }
          auto items = doc.SequenceItems(dims);
          if (!items || items->empty()) return false;
          const NodeId d = (*items)[dim % items->size()];
          if (doc.node(d).kind != Kind::kInt) return false;
          doc.mutable_node(d).scalar = IntValue(which, doc.node(d).scalar);
          return true;
        });
        break;
      }
      case kInt: {
        const std::string f = w.TagFile(prog.U8());
        const uint16_t k = prog.U16();
        const uint8_t which = prog.U8();
        w.EditPickle(f, [&](Document& doc) {
          std::vector<NodeId> ints;
          for (NodeId id = 0; id < doc.size(); ++id) {
            if (doc.node(id).kind == Kind::kInt) ints.push_back(id);
          }
          if (ints.empty()) return false;
          Node& n = doc.mutable_node(ints[k % ints.size()]);
          n.scalar = IntValue(which, n.scalar);
          return true;
        });
        break;
      }
      case kFlipByte: {
        auto it = w.files().find(w.TagFile(prog.U8()));
        const uint64_t at = prog.U64();
        const uint8_t mask = prog.U8();
        if (it != w.files().end() && !it->second.empty()) {
          it->second[at % it->second.size()] ^= static_cast<char>(mask | 1);
        }
        break;
      }
      case kTruncate: {
        auto it = w.files().find(w.TagFile(prog.U8()));
        const uint64_t to = prog.U64();
        if (it != w.files().end()) it->second.resize(to % (it->second.size() + 1));
        break;
      }
      default:
        break;
    }
  }
}

ucfs_fuzz::ReadStats g_read;

void ExerciseViews(ucfs::MemEnv& env, std::shared_ptr<const ucfs::ParallelCheckpoint> grid,
                   Reader& reader, bool crc) {
  const ucfs::CheckpointFiles& files = grid->shard(0).files();
  const std::string utag = "/" + ucfs::UniversalTag(files.tag) + "/zero/";
  const std::string fp32 = "/" + ucfs::ConsolidatedDirName(files.tag) + "/";
  // Without a name table there is no universal layout to build (said at open).
  if (grid->merge_status().ok()) {
    for (bool with_crc : {false, true}) {
      if (with_crc && !crc) continue;
      ucfs::UniversalViewOptions options;
      options.compute_crc = with_crc;
      auto view = ucfs::BuildUniversalView(env, grid, options);
      const std::string what = with_crc ? "universal view with CRCs" : "universal view";
      reader.Built(view.status(), what);
      if (view.ok()) reader.ReadTree(**view, what, {utag, fp32});
    }
  }
  const uint32_t d = grid->degrees().dp;
  for (uint32_t n : {1u, d + 1}) {
    ucfs::ReshardOptions options;
    options.world_size = n;
    options.cached_bytes = 1;
    auto view = ucfs::BuildReshardView(env, grid, options);
    const std::string what = "view at " + std::to_string(n) + " data-parallel ranks";
    reader.Built(view.status(), what);
    // Layer files pass through; the rank files are ucfs's own.
    const std::string tag = "/" + files.tag + "/";
    if (view.ok()) {
      reader.ReadTree(**view, what,
                      {tag + "zero_pp_rank_", tag + "bf16_zero_pp_rank_", tag + "mp_rank_", fp32});
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  spdlog::set_level(spdlog::level::off);
  Fixtures();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool initialized = (LLVMFuzzerInitialize(nullptr, nullptr), true);
  (void)initialized;
  const auto& fixtures = Fixtures();
  Program prog(data, size);
  const uint8_t head = prog.U8();
  const Fixture& fixture = fixtures[(head & 0x3f) % fixtures.size()];
  const std::string path = head & 0x40 ? fixture.tag_dir : kRoot;
  Work work(fixture);
  RunProgram(prog, work);
  ucfs::MemEnv env;
  for (const auto& [p, bytes] : work.files()) env.WriteFile(p, bytes);
  const bool mutated = work.Mutated();
  Reader reader{env, !mutated, g_read, ucfs_fuzz::UniversalForm::kDictAnyStorage};

  uint64_t sink = 0;
  auto grid = ucfs::ParallelCheckpoint::Open(env, path);
  reader.Check(grid.status(), "ParallelCheckpoint::Open");
  if (grid.ok()) {
    if (!mutated && !grid->merge_status().ok()) {
      Fail("unmutated fixture " + fixture.name + ": " + grid->merge_status().ToString());
    }
    auto shared = std::make_shared<const ucfs::ParallelCheckpoint>(std::move(*grid));
    sink += ucfs::InspectJson(*shared)
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                .size();
    sink += ucfs::InspectText(*shared).size();
    ExerciseViews(env, shared, reader, (head & 0x80) != 0);
  }
  ucfs::VerifyOptions options;
  options.threads = 1;
  auto report = ucfs::Verify(env, path, options);
  reader.Check(report.status(), "verify");
  if (report.ok()) {
    // (A T = 1 Megatron run's warning leaves it OK.)
    if (!mutated && !report->ok()) {
      Fail("unmutated fixture " + fixture.name + ": verify reports " +
           report->problems.front().message);
    }
    sink += report->problems.size() + report->warnings.size();
  }
  if (sink == 0xdeadbeefdeadbeefULL) std::fputc('\0', stderr);
  return 0;
}
