// Fuzz target: whole checkpoints, past the codecs. The input is not a file
// but a small mutation program applied to a real DeepSpeed checkpoint (one
// of tests/data/fixtures, held in a MemEnv: nothing is written to disk) —
// a ZeRO-3 one, or a ZeRO-1/2 one in checkpoint12_fuzz (the same source
// built with UCFS_FUZZ_FLAT_GROUPS, with path selectors of its own and no
// kRepair):
//
//   byte 0      which fixture (bits 0-5, mod their number); bit 6: open the
//               tag directory instead of the root; bit 7: also build the
//               universal view with real CRCs
//   then ops    each an opcode byte (mod kNumOps: programs written by hand,
//               as make_corpus.py's, use the values below kNumOps, which stay
//               put when ops are added) and its operands, at most kMaxOps;
//               a program that runs out of bytes reads zeros
//
// Ops edit the rank files' pickles structurally (pickle::Parse -> edit the
// Document -> pickle::Write -> re-zip with every record kept, as
// RepackTorchFile does) or the files themselves:
//
//   kEdit        on one rank file, or the same edit on every optimizer and/or
//                model-states file: select a node, optionally descend into
//                its children, then one action — replace it (None, ints such
//                as 0, -1, 2^31, 2^62, off by one, floats NaN/Inf, strings
//                '', long, NUL, '/', '..', '.wh.x', non-UTF-8, a storage
//                class or other global, a torch.Size, a node shared from
//                elsewhere, the same node of another rank), edit a sequence
//                (drop, duplicate, append, truncate, swap, repeat items: list
//                lengths, shape ranks, params lists), edit a mapping (remove,
//                rename, duplicate keys, add entries, swap values), wrap or
//                unwrap it. Selectors: the root, a named path
//                (partition_count, zero_stage, fp32_flat_groups[k],
//                param_groups[k].params, param_shapes[k][j], dp_world_size,
//                ...), the k-th node of a kind, the k-th tensor (its storage
//                class, key, numel, offset, shape, stride, ...), the k-th
//                torch.Size.
//   kRepair      makes the optimizer files agree with rank 0's param_shapes
//                again (flat buffers and states resized with their storage
//                records, sub-groups added or dropped, param_groups fixed,
//                frozen fragments resized), so shape edits reach the views
//                instead of stopping at Checkpoint::Open.
//   kRetype      a family of tensors in another storage class, in one or all
//                files (every flat buffer, every exp_avg, every per-element
//                state, the module's placeholders, frozen fragments, buffers).
//   kAddRecord   a record torch >= 2.1 writes (byteorder, .format_version,
//                .storage_alignment, .data/serialization_id) or another,
//                added to a rank file or rewritten.
//   kReplace, kTruncate, kRemove, kFlipByte, kRecord, kLatest, kAddRank:
//                a rank file replaced by another's, truncated, removed, a
//                byte of it flipped, one of its storage records resized or
//                dropped, `latest` rewritten or removed, a rank added (more
//                files than partition_count says).
//
// Then: Checkpoint::Open (no index), inspect (text, JSON, Describe of rank
// 0's pickles) and verify on the result; and when it opens, every view —
// universal, reshard at N = 1, W-1, W+1, 2W+1, the consolidated <tag>_fp32
// (inside both, and on its own with a tiny shard size so it is split) — is
// walked and EVERY FILE READ as export and the FUSE read path read it: stat
// its size, plan pieces for each chunk, resolve the pieces against the MemEnv.
//
// Anything may fail with an error Status; nothing may crash. Invariants that
// abort (so libFuzzer keeps the input):
//   * an unmutated fixture opens, and all its views build and read in full;
//   * Plan's pieces cover exactly the range asked for, clipped to the size;
//   * a kBytes piece holds `length` bytes; a kSource piece names a source
//     of the view and lies inside that file as it was when the view was
//     built (the MemEnv never changes underneath);
//   * reading a file in one pass and in odd small pieces gives the same bytes;
//   * files ucfs makes are well-formed: safetensors as a strict reader wants
//     them, torch files a zip whose data.pkl parses and whose storages all
//     have records (a universal per-param file: one flat tensor filling its
//     record), JSON indexes JSON;
//   * Checkpoint::Open accepts no shape of more than 2^62 elements;
//   * every rank file's summary (what the index keeps) survives its encoding.
//
// Bounded work per input: at most 64 MiB read through the views in all;
// a file that does not fit in what is left is read only at its head, its
// tail and a few probes (a mutated numel can make a view file of 2^60 bytes:
// its offsets are still planned, its bytes are not all read). N <= 2W+1 and
// W <= kMaxWorld. The same bytes always make the same run.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mutation_support.h"
#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/inspect_report.h"
#include "ucfs/codec/describe.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"
#include "ucfs/tools/verify.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"
#include "view_reader.h"

#ifndef UCFS_FUZZ_FIXTURES
#error "UCFS_FUZZ_FIXTURES must name tests/data/fixtures"
#endif

// checkpoint12_fuzz: the same target over the ZeRO-1/2 fixtures (one
// mp_rank_00_model_states.pt, flat param-group partitions); checkpoint_fuzz
// over the ZeRO-3 ones. Two targets, so that the inputs of each (byte 0
// picks a fixture) keep meaning the checkpoint they were found on.
#ifdef UCFS_FUZZ_FLAT_GROUPS
constexpr bool kFlatGroups = true;
#else
constexpr bool kFlatGroups = false;
#endif

namespace {

using ucfs::pickle::Document;
using ucfs::pickle::Kind;
using ucfs::pickle::kNoNode;
using ucfs::pickle::Node;
using ucfs::pickle::NodeId;
using ucfs_fuzz::Archive;
using ucfs_fuzz::CheckGenerated;
using ucfs_fuzz::Fail;
using ucfs_fuzz::kMaxRecordBytes;
using ucfs_fuzz::kReadBudget;
using ucfs_fuzz::ParseArchive;
using ucfs_fuzz::Program;
using ucfs_fuzz::Reader;
using ucfs_fuzz::Serialize;
using ucfs_fuzz::UniversalForm;

constexpr size_t kMaxOps = 48;
constexpr uint32_t kMaxWorld = 8;
constexpr size_t kMaxItems = 4096;                          // a sequence edit never grows past this
constexpr uint64_t kMaxRepairElements = uint64_t{1} << 16;  // per flat buffer
constexpr size_t kMaxRepairGroups = 256;                    // sub-groups repair makes
const std::string kRoot = "/ckpt";

// How far inputs get, printed at exit with UCFS_FUZZ_STATS=1 (replaying a
// corpus with -runs=0 shows how much of it reaches the views).
struct Stats {
  uint64_t inputs = 0, mutated = 0, opened = 0, verify_clean = 0, round_trips = 0;
  ucfs_fuzz::ReadStats read;
  ~Stats() {
    if (std::getenv("UCFS_FUZZ_STATS") == nullptr) return;
    std::fprintf(stderr,
                 "checkpoint_fuzz stats: %llu inputs, %llu mutated, %llu opened, views %llu "
                 "built / %llu failed, %llu files read (%llu failed, %llu bytes), %llu verify "
                 "clean, %llu reshard views reopened\n",
                 static_cast<unsigned long long>(inputs), static_cast<unsigned long long>(mutated),
                 static_cast<unsigned long long>(opened),
                 static_cast<unsigned long long>(read.views_built),
                 static_cast<unsigned long long>(read.views_failed),
                 static_cast<unsigned long long>(read.files_read),
                 static_cast<unsigned long long>(read.read_errors),
                 static_cast<unsigned long long>(read.bytes_read),
                 static_cast<unsigned long long>(verify_clean),
                 static_cast<unsigned long long>(round_trips));
  }
};
Stats g_stats;

// ---------------------------------------------------------------------------
// The fixtures, read once.

struct RankFile {
  std::string path;  // in the MemEnv
  ucfs::RankFileName::Kind kind;
  uint32_t rank = 0;
  std::string bytes;
  std::shared_ptr<const Archive> parsed;  // of the fixture's bytes
};

struct Fixture {
  std::string name;
  std::string tag_dir;                       // "/ckpt/global_step4"
  std::string optim_prefix;                  // "bf16_" or ""
  std::map<std::string, std::string> other;  // every other file: path -> bytes
  std::vector<RankFile> ranks;               // optim files by rank, then model files
  uint32_t world = 0;
};

std::vector<Fixture> LoadFixtures() {
  namespace fs = std::filesystem;
  const std::vector<fs::path> names =
      ucfs_fuzz::FixtureDirs("UCFS_FUZZ_FIXTURES", UCFS_FUZZ_FIXTURES);
  std::vector<Fixture> out;
  for (const fs::path& fixture_dir : names) {
    Fixture f;
    f.name = fixture_dir.filename().string();
    const fs::path root = fixture_dir / "checkpoint";
    const std::string tag = ucfs_fuzz::LatestTag(root);
    f.tag_dir = kRoot + "/" + tag;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<RankFile> optim, model;
    bool shared_model = false;  // ZeRO-1/2: mp_rank_00_model_states.pt
    for (const fs::path& p : files) {
      const std::string path = kRoot + "/" + fs::relative(p, root).string();
      std::string bytes = ucfs_fuzz::ReadWhole(p);
      auto rank = ucfs::ParseRankFileName(p.filename().string());
      if (p.filename() == ucfs::SharedModelFileName() && p.parent_path().filename() == tag) {
        // The model file of every rank: slot "rank 0" of kind kModel.
        rank = ucfs::RankFileName{ucfs::RankFileName::Kind::kModel, "", 0, 0};
        shared_model = true;
      }
      if (!rank || p.parent_path().filename() != tag) {
        f.other[path] = std::move(bytes);
        continue;
      }
      RankFile rf;
      rf.path = path;
      rf.kind = rank->kind;
      rf.rank = rank->dp_rank;
      rf.bytes = std::move(bytes);
      auto parsed = ParseArchive(rf.bytes);
      if (!parsed) Fail(path + " of fixture " + f.name + " does not parse");
      rf.parsed = std::make_shared<const Archive>(std::move(*parsed));
      if (rank->kind == ucfs::RankFileName::Kind::kOptim) f.optim_prefix = rank->prefix;
      (rank->kind == ucfs::RankFileName::Kind::kOptim ? optim : model).push_back(std::move(rf));
    }
    auto by_rank = [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; };
    std::sort(optim.begin(), optim.end(), by_rank);
    std::sort(model.begin(), model.end(), by_rank);
    if (shared_model != kFlatGroups) continue;  // the other target's fixture
    f.world = static_cast<uint32_t>(optim.size());
    if (f.world == 0 || model.size() != (kFlatGroups ? 1 : optim.size())) {
      Fail("fixture " + f.name + " is not whole");
    }
    for (auto& rf : optim) f.ranks.push_back(std::move(rf));
    for (auto& rf : model) f.ranks.push_back(std::move(rf));
    out.push_back(std::move(f));
  }
  if (out.empty()) Fail("no fixtures of this target's stages (set UCFS_FUZZ_FIXTURES)");
  return out;
}

const std::vector<Fixture>& Fixtures() {
  static const std::vector<Fixture> fixtures = LoadFixtures();
  return fixtures;
}

// ---------------------------------------------------------------------------
// The checkpoint being mutated.

struct Slot {
  std::string path;
  ucfs::RankFileName::Kind kind;
  uint32_t rank = 0;
  std::optional<std::string> bytes;         // nullopt: removed
  std::shared_ptr<const Archive> pristine;  // parse of `bytes` while unchanged
  std::optional<Archive> ar;                // being edited
};

class Work {
 public:
  explicit Work(const Fixture& f) : fixture_(f), world_(f.world), other_(f.other) {
    for (const RankFile& rf : f.ranks) {
      Slot s;
      s.path = rf.path;
      s.kind = rf.kind;
      s.rank = rf.rank;
      s.bytes = rf.bytes;
      s.pristine = rf.parsed;
      slots_.push_back(std::move(s));
    }
  }

  uint32_t world() const { return world_; }
  std::vector<Slot>& slots() { return slots_; }

  // The slot of a rank's file of a kind, rank taken mod the world size
  // (ZeRO-1/2: every rank's model file is the one mp_rank_00_model_states.pt).
  Slot& At(ucfs::RankFileName::Kind kind, uint32_t rank) {
    rank %= world_;
    if (kFlatGroups && kind == ucfs::RankFileName::Kind::kModel) rank = 0;
    for (Slot& s : slots_) {
      if (s.kind == kind && s.rank == rank) return s;
    }
    Fail("no slot for a rank below the world size");
  }

  // The file's Archive for editing, parsed on first use; nullptr when the
  // file is gone or no longer a parsable torch file.
  Archive* Edit(Slot& s) {
    if (s.ar) return &*s.ar;
    if (!s.bytes) return nullptr;
    if (s.pristine) {
      s.ar = *s.pristine;
    } else if (auto parsed = ParseArchive(*s.bytes)) {
      s.ar = std::move(*parsed);
    } else {
      return nullptr;
    }
    return &*s.ar;
  }

  // Writes pending pickle edits back into the file's bytes.
  void Flush(Slot& s) {
    if (!s.ar) return;
    if (s.ar->dirty) {
      if (auto bytes = Serialize(*s.ar)) {
        s.bytes = std::move(*bytes);
        s.pristine.reset();
      }
    }
    s.ar.reset();
  }
  // Records a storage-record change: the file is re-zipped at Flush.
  static void Touch(Archive& ar) { ar.dirty = true; }

  void SetBytes(Slot& s, std::optional<std::string> bytes) {
    Flush(s);
    s.bytes = std::move(bytes);
    s.pristine.reset();
  }

  void SetOther(const std::string& path, std::string bytes) { other_[path] = std::move(bytes); }
  void RemoveOther(const std::string& path) { other_.erase(path); }

  // A new rank W, a copy of rank `from`'s files.
  void AddRank(uint32_t from) {
    if (world_ >= kMaxWorld) return;
    const uint32_t r = world_;
    for (auto kind : {ucfs::RankFileName::Kind::kOptim, ucfs::RankFileName::Kind::kModel}) {
      if (kFlatGroups && kind == ucfs::RankFileName::Kind::kModel) continue;  // one for all
      Slot& src = At(kind, from);
      Flush(src);
      Slot s;
      s.kind = kind;
      s.rank = r;
      s.path = fixture_.tag_dir + "/" +
               ucfs::RankFileNameFor(
                   kind, kind == ucfs::RankFileName::Kind::kOptim ? fixture_.optim_prefix : "", r);
      s.bytes = src.bytes;
      s.pristine = src.pristine;
      slots_.push_back(std::move(s));
    }
    ++world_;
  }

  // Flushes everything into a fresh MemEnv. Returns whether any file
  // differs from the fixture's (edits may have been no-ops, or undone).
  bool Install(ucfs::MemEnv* env) {
    for (Slot& s : slots_) Flush(s);
    for (const auto& [path, bytes] : other_) env->WriteFile(path, bytes);
    for (const Slot& s : slots_) {
      if (s.bytes) env->WriteFile(s.path, *s.bytes);
    }
    bool mutated = other_ != fixture_.other || slots_.size() != fixture_.ranks.size();
    for (size_t i = 0; !mutated && i < fixture_.ranks.size(); ++i) {
      mutated = !slots_[i].bytes || *slots_[i].bytes != fixture_.ranks[i].bytes;
    }
    return mutated;
  }

 private:
  const Fixture& fixture_;
  uint32_t world_;
  std::map<std::string, std::string> other_;
  std::vector<Slot> slots_;
};

// ---------------------------------------------------------------------------
// Document surgery.

// A node's children in a fixed order: a, b, state (for calls and persistent
// ids), then items.
std::vector<NodeId*> Children(Document& doc, NodeId id) {
  Node& n = doc.mutable_node(id);
  std::vector<NodeId*> out;
  if (n.a != kNoNode) out.push_back(&n.a);
  if (n.b != kNoNode) out.push_back(&n.b);
  if (n.state != kNoNode) out.push_back(&n.state);
  for (NodeId& item : n.items) out.push_back(&item);
  return out;
}

size_t PrefixChildren(const Node& n) {
  return (n.a != kNoNode) + (n.b != kNoNode) + (n.state != kNoNode);
}

// Where a node sits: replacing it changes its parent's slot (or the root).
struct Place {
  NodeId node = kNoNode;
  NodeId parent = kNoNode;
  size_t slot = 0;
};

void Replace(Document& doc, const Place& at, NodeId with) {
  if (at.parent == kNoNode) {
    doc.set_root(with);
    return;
  }
  auto children = Children(doc, at.parent);
  if (at.slot < children.size()) *children[at.slot] = with;
}

// Whether `target` is reachable from `from` (sharing `from` below `target`
// would make a cycle).
bool Reaches(const Document& doc, NodeId from, NodeId target) {
  std::vector<bool> seen(doc.size());
  std::vector<NodeId> stack = {from};
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (id == kNoNode || id >= doc.size() || seen[id]) continue;
    if (id == target) return true;
    seen[id] = true;
    const Node& n = doc.node(id);
    stack.push_back(n.a);
    stack.push_back(n.b);
    stack.push_back(n.state);
    stack.insert(stack.end(), n.items.begin(), n.items.end());
  }
  return false;
}

// The first parent of `id` in document order, for nodes chosen by index.
Place PlaceOf(Document& doc, NodeId id) {
  Place p;
  p.node = id;
  if (id == doc.root()) return p;
  for (NodeId i = 0; i < doc.size(); ++i) {
    auto children = Children(doc, i);
    for (size_t s = 0; s < children.size(); ++s) {
      if (*children[s] == id) {
        p.parent = i;
        p.slot = s;
        return p;
      }
    }
  }
  p.node = kNoNode;  // unreachable from anything: editing it would change nothing
  return p;
}

Place ChildPlace(Document& doc, NodeId parent, size_t j) {
  Place p;
  auto children = Children(doc, parent);
  if (children.empty()) return p;
  p.parent = parent;
  p.slot = j % children.size();
  p.node = *children[p.slot];
  return p;
}

bool IsMappingNode(const Document& doc, NodeId id) {
  if (id == kNoNode) return false;
  const Node& n = doc.node(id);
  return n.kind == Kind::kDict ||
         ((n.kind == Kind::kReduce || n.kind == Kind::kNewObj) && n.items.size() > n.list_items);
}

// The k-th value of a mapping, or the k-th item of a sequence.
Place Element(Document& doc, NodeId id, size_t k) {
  Place p;
  if (id == kNoNode) return p;
  const Node& n = doc.node(id);
  if (IsMappingNode(doc, id)) {
    const size_t begin = n.kind == Kind::kDict ? 0 : n.list_items;
    const size_t pairs = (n.items.size() - begin) / 2;
    if (pairs == 0) return p;
    const size_t item = begin + 2 * (k % pairs) + 1;
    p.parent = id;
    p.slot = PrefixChildren(n) + item;
    p.node = n.items[item];
    return p;
  }
  if (n.kind == Kind::kList || n.kind == Kind::kTuple || n.kind == Kind::kSet ||
      n.kind == Kind::kFrozenSet) {
    if (n.items.empty()) return p;
    p.parent = id;
    p.slot = k % n.items.size();
    p.node = n.items[p.slot];
  }
  return p;
}

// The value under string key `key` of a mapping.
Place Field(Document& doc, NodeId id, std::string_view key) {
  Place p;
  if (!IsMappingNode(doc, id)) return p;
  const Node& n = doc.node(id);
  const size_t begin = n.kind == Kind::kDict ? 0 : n.list_items;
  for (size_t i = begin; i + 1 < n.items.size(); i += 2) {
    auto s = doc.AsStr(n.items[i]);
    if (s && *s == key) {
      p.parent = id;
      p.slot = PrefixChildren(n) + i + 1;
      p.node = n.items[i + 1];
      return p;
    }
  }
  return p;
}

// Named places: "*" takes the next operand as an element index.
const char* const kPaths[][5] = {
    {"optimizer_state_dict"},
    {"optimizer_state_dict", "zero_stage"},
    {"optimizer_state_dict", "partition_count"},
    {"optimizer_state_dict", "fp32_flat_groups"},
    {"optimizer_state_dict", "fp32_flat_groups", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "state"},
    {"optimizer_state_dict", "optimizer_state_dict", "state", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "state", "*", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "param_groups"},
    {"optimizer_state_dict", "optimizer_state_dict", "param_groups", "*"},
    {"optimizer_state_dict", "optimizer_state_dict", "param_groups", "*", "params"},
    {"optimizer_state_dict", "loss_scaler"},
    {"ds_config", "zero_optimization"},
    {"ds_config", "zero_optimization", "sub_group_size"},
    {"ds_version"},
    {"module"},
    {"module", "*"},
    {"param_shapes"},
    {"param_shapes", "*"},
    {"param_shapes", "*", "*"},
    {"frozen_param_shapes"},
    {"frozen_param_shapes", "*"},
    {"frozen_param_fragments"},
    {"frozen_param_fragments", "*"},
    {"shared_params"},
    {"buffer_names"},
    {"dp_world_size"},
    {"global_steps"},
};

// The same for ZeRO-1/2 files (a table of its own: checkpoint_fuzz's
// inputs index kPaths, whose size must not change under them).
const char* const kFlatGroupPaths[][5] = {
    {"optimizer_state_dict"},
    {"optimizer_state_dict", "zero_stage"},
    {"optimizer_state_dict", "partition_count"},
    {"optimizer_state_dict", "partition_count", "*"},
    {"optimizer_state_dict", "single_partition_of_fp32_groups"},
    {"optimizer_state_dict", "single_partition_of_fp32_groups", "*"},
    {"optimizer_state_dict", "base_optimizer_state"},
    {"optimizer_state_dict", "base_optimizer_state", "state"},
    {"optimizer_state_dict", "base_optimizer_state", "state", "*"},
    {"optimizer_state_dict", "base_optimizer_state", "state", "*", "*"},
    {"optimizer_state_dict", "base_optimizer_state", "param_groups"},
    {"optimizer_state_dict", "base_optimizer_state", "param_groups", "*", "params"},
    {"optimizer_state_dict", "group_paddings"},
    {"optimizer_state_dict", "param_slice_mappings"},
    {"optimizer_state_dict", "param_slice_mappings", "*"},
    {"optimizer_state_dict", "param_slice_mappings", "*", "*"},
    {"optimizer_state_dict", "loss_scaler"},
    {"ds_config", "zero_optimization"},
    {"ds_config", "zero_optimization", "stage"},
    {"ds_config", "zero_optimization", "round_robin_gradients"},
    {"ds_version"},
    {"module"},
    {"module", "*"},
    {"param_shapes"},
    {"param_shapes", "*"},
    {"param_shapes", "*", "*"},
    {"frozen_param_shapes"},
    {"frozen_param_shapes", "*"},
    {"frozen_param_fragments", "*"},
    {"shared_params"},
    {"buffer_names"},
    {"dp_world_size"},
};

Place NamedPlace(Document& doc, size_t index, uint8_t k1, uint8_t k2) {
  Place p;
  p.node = doc.root();
  const uint8_t ks[2] = {k1, k2};
  size_t next_k = 0;
  const auto& path = kFlatGroups ? kFlatGroupPaths[index % std::size(kFlatGroupPaths)]
                                 : kPaths[index % std::size(kPaths)];
  for (const char* seg : path) {
    if (seg == nullptr) break;
    p = std::string_view(seg) == "*" ? Element(doc, p.node, ks[next_k++ % 2])
                                     : Field(doc, p.node, seg);
    if (p.node == kNoNode) return p;
  }
  return p;
}

bool IsTensorCall(const Document& doc, NodeId id) {
  auto t = ucfs::MatchTensor(doc, id);
  return t.ok() && t->has_value();
}

// Parts of a tensor rebuild call that the tensor selector reaches.
Place TensorPart(Document& doc, NodeId call, uint8_t part) {
  Place p;
  if (call == kNoNode) return p;
  // Through _rebuild_parameter to the plain tensor.
  if (doc.IsGlobal(doc.node(call).a, "torch._utils", "_rebuild_parameter")) {
    auto args = doc.SequenceItems(doc.node(call).b);
    if (args && !args->empty() && part >= 13) return ChildPlace(doc, doc.node(call).b, 1);
    if (args && !args->empty()) call = (*args)[0];
  }
  const Node& c = doc.node(call);
  if (c.kind != Kind::kReduce || c.b == kNoNode) return p;
  const NodeId args = c.b;
  auto items = doc.SequenceItems(args);
  if (!items || items->empty()) return p;
  const NodeId pid = (*items)[0];
  const NodeId pid_tuple = doc.node(pid).kind == Kind::kPersistentId ? doc.node(pid).a : kNoNode;
  auto in_args = [&](size_t i) {
    Place q;
    if (i < doc.node(args).items.size()) {
      q.parent = args;
      q.slot = i;
      q.node = doc.node(args).items[i];
    }
    return q;
  };
  auto in_pid = [&](size_t i) {
    Place q;
    if (pid_tuple != kNoNode && i < doc.node(pid_tuple).items.size()) {
      q.parent = pid_tuple;
      q.slot = i;
      q.node = doc.node(pid_tuple).items[i];
    }
    return q;
  };
  switch (part % 14) {
    case 0:
      return in_pid(1);  // storage class
    case 1:
      return in_pid(2);  // storage key
    case 2:
      return in_pid(3);  // location
    case 3:
      return in_pid(4);  // storage numel
    case 4:
      return in_args(1);  // storage offset
    case 5:
      return in_args(2);  // size
    case 6:
      return in_args(3);  // stride
    case 7:
      return in_args(4);  // requires_grad
    case 8:
      p.node = args;
      p.parent = call;
      p.slot = c.a != kNoNode ? 1 : 0;  // b comes after a
      return p;
    case 9: {
      Place q = in_args(0);  // the persistent id itself
      return q;
    }
    case 10:
      return ChildPlace(doc, call, 0);  // the rebuild function
    case 11: {
      Place size = in_args(2);  // torch.Size's dims tuple
      if (size.node != kNoNode && doc.node(size.node).kind == Kind::kReduce) {
        auto sargs = doc.SequenceItems(doc.node(size.node).b);
        if (sargs && !sargs->empty()) return Element(doc, doc.node(size.node).b, 0);
      }
      return size;
    }
    case 12:
      p = PlaceOf(doc, call);
      return p;
    default:
      return in_pid(0);  // 'storage'
  }
}

// Nodes of a kind, by index.
NodeId KthOfKind(const Document& doc, Kind kind, size_t k) {
  std::vector<NodeId> found;
  for (NodeId i = 0; i < doc.size(); ++i) {
    if (doc.node(i).kind == kind) found.push_back(i);
  }
  return found.empty() ? kNoNode : found[k % found.size()];
}

NodeId KthTensor(const Document& doc, size_t k) {
  std::vector<NodeId> found;
  for (NodeId i = 0; i < doc.size(); ++i) {
    if (IsTensorCall(doc, i)) found.push_back(i);
  }
  return found.empty() ? kNoNode : found[k % found.size()];
}

NodeId KthSize(const Document& doc, size_t k) {
  std::vector<NodeId> found;
  for (NodeId i = 0; i < doc.size(); ++i) {
    const Node& n = doc.node(i);
    if (n.kind == Kind::kReduce && doc.IsGlobal(n.a, "torch", "Size")) found.push_back(i);
  }
  return found.empty() ? kNoNode : found[k % found.size()];
}

// --- values -----------------------------------------------------------------

constexpr int64_t kInts[] = {
    0,
    1,
    -1,
    2,
    3,
    4,
    5,
    7,
    8,
    16,
    255,
    256,
    65535,
    65536,
    1000000000,
    int64_t{1} << 31,
    (int64_t{1} << 31) - 1,
    (int64_t{1} << 31) + 1,
    -(int64_t{1} << 31),
    (int64_t{1} << 32) - 1,
    int64_t{1} << 32,
    (int64_t{1} << 32) + 1,
    int64_t{1} << 53,
    (int64_t{1} << 53) + 1,
    int64_t{1} << 60,
    int64_t{1} << 61,
    int64_t{1} << 62,
    (int64_t{1} << 62) + 1,
    (int64_t{1} << 62) - 1,
    std::numeric_limits<int64_t>::max(),
    std::numeric_limits<int64_t>::max() - 1,
    std::numeric_limits<int64_t>::min(),
    std::numeric_limits<int64_t>::min() + 1,
    // 2^64 / 4 and / 2: products with an element size wrap to 0.
    (int64_t{1} << 62) + (int64_t{1} << 32),
    int64_t{0x4000000000000001},
    int64_t{0x2000000000000000},
};

int64_t IntValue(uint8_t which, int64_t old, uint64_t raw) {
  const auto u = static_cast<uint64_t>(old);
  switch (which % 10) {
    case 0:
      return static_cast<int64_t>(u + 1);
    case 1:
      return static_cast<int64_t>(u - 1);
    case 2:
      return static_cast<int64_t>(u * 2);
    case 3:
      return old / 2;
    case 4:
      return static_cast<int64_t>(0 - u);
    case 5:
      return static_cast<int64_t>(raw);
    case 6:
      return static_cast<int64_t>(u + (uint64_t{1} << 32));
    default:  // 7, 8, 9: three banks, so every entry has a byte
      return kInts[static_cast<size_t>(which / 10 * 3 + which % 10 - 7) % std::size(kInts)];
  }
}

double FloatValue(uint8_t which, double old) {
  switch (which % 16) {
    case 0:
      return std::numeric_limits<double>::quiet_NaN();
    case 1:
      return std::numeric_limits<double>::infinity();
    case 2:
      return -std::numeric_limits<double>::infinity();
    case 3:
      return 0.0;
    case 4:
      return -0.0;
    case 5:
      return 1e308;
    case 6:
      return 5e-324;
    case 7:
      return old + 1;
    case 8:
      return -old;
    case 9:
      return 0.5;
    case 10:
      return 1e9;
    case 11:
      return 9.3e18;  // past int64
    case 12:
      return -1.0;
    case 13:
      return 4294967296.0;
    case 14:
      return std::numeric_limits<double>::signaling_NaN();
    default:
      return old * 1e300;
  }
}

std::string StrValue(uint8_t which, std::string_view old) {
  static const char* const kStrs[] = {
      "",
      "x",
      "/",
      "a/b",
      ".",
      "..",
      ".wh.x",
      ".wh..wh..opq",
      "\xff\xfe",
      "\xc3\x28",
      "\xc3\xa9t\xc3\xa9",
      "fp32",
      "exp_avg",
      "exp_avg_sq",
      "step",
      "params",
      "storage",
      "cpu",
      "cuda:0",
      "0",
      "1",
      "99",
      "-1",
      "latest",
      "global_step4",
      "zero",
      "optimizer_state",
      "embed.weight",
      "fc1.bias",
      "weights",
      "disabled",
      "optimizer_states",
      "max_stage",
      "module",
      "param_groups",
      "data.pkl",
      "../../etc/passwd",
      "a\\b",
      " ",
      "optimizer_state.pt",
      "fp32.pt",
      "latest_universal",
      "0.15.3",  // ds_version: zero_to_fp32 shards its .bin files from here on
      "0.16.4+a1b2c3",
      "99999999999.0",
  };
  switch (which % 12) {
    case 0:
      return std::string("\0", 1);
    case 1:
      return std::string(old) + std::string("\0x", 2);
    case 2:
      return std::string(4097, 'a');
    case 3:
      return std::string(old) + "/..";
    case 4:
      return std::string(old) + std::string(old);
    case 5:
      return std::string(old.substr(0, old.size() / 2));
    case 6:
      return ".wh." + std::string(old);
    case 7:
      return std::string(old) + "\xff";
    case 8:
      return std::string(old) + "_";
    default:  // 9, 10, 11: three banks, so every entry has a byte
      return kStrs[static_cast<size_t>(which / 12 * 3 + which % 12 - 9) % std::size(kStrs)];
  }
}

std::pair<const char*, const char*> GlobalValue(uint8_t which) {
  static const std::pair<const char*, const char*> kGlobals[] = {
      {"torch", "FloatStorage"},
      {"torch", "BFloat16Storage"},
      {"torch", "HalfStorage"},
      {"torch", "DoubleStorage"},
      {"torch", "LongStorage"},
      {"torch", "IntStorage"},
      {"torch", "ShortStorage"},
      {"torch", "CharStorage"},
      {"torch", "ByteStorage"},
      {"torch", "BoolStorage"},
      {"torch", "ComplexFloatStorage"},
      {"torch", "ComplexDoubleStorage"},
      {"torch", "QInt8Storage"},
      {"torch", "QUInt8Storage"},
      {"torch", "QInt32Storage"},
      {"torch", "QUInt4x2Storage"},
      {"torch", "QUInt2x4Storage"},
      {"torch", "UntypedStorage"},
      {"torch", "NoSuchStorage"},
      {"torch", "Size"},
      {"torch", "float32"},
      {"torch", "bfloat16"},
      {"torch", "float16"},
      {"torch", "int64"},
      {"torch._utils", "_rebuild_tensor_v2"},
      {"torch._utils", "_rebuild_tensor_v3"},
      {"torch._utils", "_rebuild_parameter"},
      {"torch._tensor", "_rebuild_from_type_v2"},
      {"collections", "OrderedDict"},
      {"__builtin__", "getattr"},
      {"builtins", "getattr"},
      {"__builtin__", "set"},
      {"deepspeed.runtime.zero.config", "ZeroStageEnum"},
      {"os", "system"},
      {"", ""},
  };
  return kGlobals[which % std::size(kGlobals)];
}

// A node whose Python value is an int too large for int64 (pickle LONG1).
NodeId AddLong(Document& doc, uint8_t which) {
  Node n;
  n.kind = Kind::kLong;
  switch (which % 3) {
    case 0:  // 2^64
      n.text = std::string("\0\0\0\0\0\0\0\0\x01", 9);
      break;
    case 1:  // 2^63
      n.text = std::string("\0\0\0\0\0\0\0\x80\0", 9);
      break;
    default:  // -2^64 - 1
      n.text = std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xfe", 9);
      break;
  }
  return doc.Add(std::move(n));
}

// A new node made from (gen, x); `into` is the container it will sit in
// (a shared node must not reach it). kNoNode when nothing fits.
NodeId MakeValue(Document& doc, uint8_t gen, uint8_t x, uint64_t raw, NodeId into,
                 const Document* other) {
  switch (gen % 16) {
    case 0:
      return doc.AddNone();
    case 1:
      return doc.AddBool((x & 1) != 0);
    case 2:
      return doc.AddInt(IntValue(x, 0, raw));
    case 3:
      return doc.AddFloat(FloatValue(x, 1.0));
    case 4:
      return doc.AddStr(StrValue(x, "p"));
    case 5:
      return doc.AddTuple({});
    case 6:
      return doc.AddList({});
    case 7:
      return doc.AddDict({});
    case 8: {
      auto [module, name] = GlobalValue(x);
      return doc.Global(module, name);
    }
    case 9: {  // torch.Size((d,)) or torch.Size(())
      std::vector<NodeId> dims;
      if (x & 1) dims.push_back(doc.AddInt(IntValue(static_cast<uint8_t>(x >> 1), 1, raw)));
      return doc.AddReduce(doc.Global("torch", "Size"),
                           doc.AddTuple({doc.AddTuple(std::move(dims))}));
    }
    case 10: {  // a tuple of x % 5 ints
      std::vector<NodeId> dims;
      for (int i = 0; i < x % 5; ++i)
        dims.push_back(doc.AddInt(IntValue(static_cast<uint8_t>(x + i * 37), 1, raw)));
      return doc.AddTuple(std::move(dims));
    }
    case 11:
    case 12: {  // an existing node, shared
      if (doc.size() == 0) return kNoNode;
      const NodeId c = static_cast<NodeId>((raw ^ x) % doc.size());
      if (into != kNoNode && Reaches(doc, c, into)) return kNoNode;
      return c;
    }
    case 13:
      return AddLong(doc, x);
    case 14: {  // the same node of another rank's file, copied
      if (other == nullptr || other->size() == 0) return kNoNode;
      std::vector<NodeId> copied;
      return doc.CopyFrom(*other, static_cast<NodeId>((raw ^ x) % other->size()), &copied);
    }
    default:
      return doc.AddStr(std::string(1, static_cast<char>(x)));
  }
}

// --- edits ------------------------------------------------------------------

// The editable run of items of a node: pairs of a mapping, items of a
// sequence, or a call's APPENDS items; a call with none is edited through its
// argument tuple.
struct Region {
  NodeId node = kNoNode;
  size_t begin = 0, end = 0, unit = 1;
  bool appends = false;  // a call's APPENDS items: list_items follows the size
};

Region RegionOf(const Document& doc, NodeId id) {
  Region r;
  if (id == kNoNode) return r;
  const Node& n = doc.node(id);
  switch (n.kind) {
    case Kind::kDict:
      r = {id, 0, n.items.size() & ~size_t{1}, 2, false};
      return r;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kSet:
    case Kind::kFrozenSet:
      r = {id, 0, n.items.size(), 1, false};
      return r;
    case Kind::kReduce:
    case Kind::kNewObj:
      if (n.items.size() > n.list_items) {
        r = {id, n.list_items, n.list_items + ((n.items.size() - n.list_items) & ~size_t{1}), 2,
             false};
        return r;
      }
      if (n.list_items > 0) {
        r = {id, 0, n.list_items, 1, true};
        return r;
      }
      return RegionOf(doc, n.b);
    case Kind::kPersistentId:
      return RegionOf(doc, n.a);
    default:
      return r;
  }
}

struct Step {
  uint8_t action = 0;
  uint8_t a = 0, b = 0, c = 0, d = 0;
  uint64_t raw = 0;
};

enum Action : uint8_t {
  kDescend,
  kReplace,
  kScalar,
  kSequence,
  kMapping,
  kWrap,
  kUnwrap,
  kSetGlobal,
  kNumActions,
};

Step ReadStep(Program& prog) {
  Step s;
  s.action = prog.U8() % kNumActions;
  s.a = prog.U8();
  s.b = prog.U8();
  if (s.action != kDescend) {
    s.c = prog.U8();
    s.d = prog.U8();
  }
  // Raw 64-bit operands only where asked for, so programs stay short.
  if ((s.action == kReplace || s.action == kScalar) && (s.b & 0x80)) s.raw = prog.U64();
  return s;
}

// Sequence and mapping edits on the units of a region. Returns whether the
// Document changed.
bool EditRegion(Document& doc, const Region& r, const Step& s, bool mapping_ops,
                const Document* other) {
  if (r.node == kNoNode) return false;
  std::vector<std::vector<NodeId>> units;
  {
    const Node& n = doc.node(r.node);
    for (size_t i = r.begin; i + r.unit <= r.end; i += r.unit) {
      units.emplace_back(n.items.begin() + static_cast<std::ptrdiff_t>(i),
                         n.items.begin() + static_cast<std::ptrdiff_t>(i + r.unit));
    }
  }
  const size_t count = units.size();
  const size_t i = count ? s.b % count : 0;
  const size_t j = count ? s.c % count : 0;
  auto new_unit = [&](uint8_t gen, uint8_t x) {
    std::vector<NodeId> u;
    if (r.unit == 2) {
      // A key: a string (a name, a special one) or an int.
      u.push_back(gen & 1 ? doc.AddInt(IntValue(x, static_cast<int64_t>(count), s.raw))
                          : doc.AddStr(StrValue(x, "new")));
      NodeId v = count ? units[i][1] : kNoNode;
      if (gen & 2 || v == kNoNode)
        v = MakeValue(doc, static_cast<uint8_t>(gen >> 2), x, s.raw, r.node, other);
      u.push_back(v == kNoNode ? doc.AddNone() : v);
    } else {
      NodeId v = MakeValue(doc, gen, x, s.raw, r.node, other);
      u.push_back(v == kNoNode ? doc.AddNone() : v);
    }
    return u;
  };
  const uint8_t mode = mapping_ops ? static_cast<uint8_t>(s.a % 8 + 12) : s.a % 12;
  switch (mode) {
    case 0:  // drop item i
      if (!count) return false;
      units.erase(units.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1:  // duplicate item i after itself (shared)
      if (!count) return false;
      units.insert(units.begin() + static_cast<std::ptrdiff_t>(i), units[i]);
      break;
    case 2:  // append a new item
      units.push_back(new_unit(s.c, s.d));
      break;
    case 3:  // keep the first b items
      if (s.b >= count) return false;
      units.resize(s.b);
      break;
    case 4:  // empty it
      if (!count) return false;
      units.clear();
      break;
    case 5:  // swap two items
      if (i == j) return false;
      std::swap(units[i], units[j]);
      break;
    case 6:  // reverse
      if (count < 2) return false;
      std::reverse(units.begin(), units.end());
      break;
    case 7: {  // repeat the items up to c+1 more times
      if (!count) return false;
      const size_t times = std::min<size_t>(s.c % 64 + 1, kMaxItems / count);
      const auto copy = units;
      for (size_t t = 0; t < times; ++t) units.insert(units.end(), copy.begin(), copy.end());
      break;
    }
    case 8:  // insert a new item at i
      units.insert(units.begin() + static_cast<std::ptrdiff_t>(i), new_unit(s.c, s.d));
      break;
    case 9:  // append d % 32 new items (grow a list by many)
      for (int k = 0; k < s.d % 32 + 1 && units.size() < kMaxItems; ++k) {
        units.push_back(new_unit(s.c, static_cast<uint8_t>(s.d + k)));
      }
      break;
    case 10:  // move the last item to the front
      if (count < 2) return false;
      std::rotate(units.begin(), units.end() - 1, units.end());
      break;
    case 11:  // replace item i by a copy of item j
      if (!count || i == j) return false;
      units[i] = units[j];
      break;
    // Mapping edits: units are (key, value).
    case 12:  // rename key i
      if (!count || r.unit != 2) return false;
      units[i][0] = s.d & 1 ? doc.AddInt(IntValue(s.d, static_cast<int64_t>(i), s.raw))
                            : doc.AddStr(StrValue(s.d, doc.AsStr(units[i][0]).value_or("k")));
      break;
    case 13:  // duplicate entry i under a new key
      if (!count || r.unit != 2) return false;
      units.push_back(
          {doc.AddStr(StrValue(s.d, doc.AsStr(units[i][0]).value_or("k"))), units[i][1]});
      break;
    case 14:  // duplicate entry i under the same key
      if (!count) return false;
      units.push_back(units[i]);
      break;
    case 15:  // swap the values of entries i and j
      if (!count || r.unit != 2 || i == j) return false;
      std::swap(units[i][1], units[j][1]);
      break;
    case 16:  // remove entry i
      if (!count) return false;
      units.erase(units.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 17:  // add an entry
      units.push_back(new_unit(s.c, s.d));
      break;
    case 18:  // value i: a new value
      if (!count || r.unit != 2) return false;
      {
        NodeId v = MakeValue(doc, s.c, s.d, s.raw, r.node, other);
        if (v == kNoNode) return false;
        units[i][1] = v;
      }
      break;
    default:  // entry i to the front
      if (i == 0) return false;
      std::rotate(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(i),
                  units.begin() + static_cast<std::ptrdiff_t>(i + 1));
      break;
  }
  std::vector<NodeId> flat;
  for (const auto& u : units) flat.insert(flat.end(), u.begin(), u.end());
  Node& n = doc.mutable_node(r.node);
  std::vector<NodeId> items(n.items.begin(),
                            n.items.begin() + static_cast<std::ptrdiff_t>(r.begin));
  items.insert(items.end(), flat.begin(), flat.end());
  items.insert(items.end(), n.items.begin() + static_cast<std::ptrdiff_t>(r.end), n.items.end());
  n.items = std::move(items);
  if (r.appends) n.list_items = static_cast<uint32_t>(flat.size());
  return true;
}

// Applies one step's terminal action at `at`. Returns whether it changed.
bool Apply(Document& doc, const Place& at, const Step& s, const Document* other) {
  if (at.node == kNoNode || at.node >= doc.size()) return false;
  const Node node = doc.node(at.node);  // a copy: adding nodes below may not move it, but edits do
  switch (s.action) {
    case kReplace: {
      const NodeId v = MakeValue(doc, s.a, s.c, s.raw | s.d, at.parent, other);
      if (v == kNoNode || v == at.node) return false;
      if (at.parent != kNoNode && Reaches(doc, v, at.parent)) return false;
      Replace(doc, at, v);
      return true;
    }
    case kScalar: {
      NodeId v = kNoNode;
      switch (node.kind) {
        case Kind::kInt:
        case Kind::kBool:
          switch (s.c % 8) {
            case 5:  // the same number as a float
              v = doc.AddFloat(static_cast<double>(IntValue(s.a, node.scalar, s.raw)));
              break;
            case 6:
              v = AddLong(doc, s.a);
              break;
            case 7:
              v = doc.AddFloat(FloatValue(s.a, static_cast<double>(node.scalar)));
              break;
            default:
              v = doc.AddInt(IntValue(s.a, node.scalar, s.raw));
              break;
          }
          break;
        case Kind::kLong:
          v = s.c & 1 ? AddLong(doc, s.a) : doc.AddInt(IntValue(s.a, 0, s.raw));
          break;
        case Kind::kFloat:
          v = s.c & 1 ? doc.AddInt(IntValue(s.a, 0, s.raw))
                      : doc.AddFloat(FloatValue(s.a, node.float_value()));
          break;
        case Kind::kStr:
        case Kind::kBytes: {
          Node n;
          n.kind = s.c % 4 == 3 ? Kind::kBytes : node.kind;
          n.text = StrValue(s.a, node.text);
          v = doc.Add(std::move(n));
          if (s.c % 4 == 1) v = doc.AddInt(IntValue(s.a, 0, s.raw));
          break;
        }
        case Kind::kNone:
          v = doc.AddInt(IntValue(s.a, 0, s.raw));
          break;
        default:
          return false;
      }
      Replace(doc, at, v);
      return true;
    }
    case kSequence:
    case kMapping:
      return EditRegion(doc, RegionOf(doc, at.node), s, s.action == kMapping, other);
    case kWrap: {
      std::vector<NodeId> items = {at.node};
      if (s.a & 2) items.push_back(at.node);
      const NodeId w = s.a & 1 ? doc.AddTuple(std::move(items)) : doc.AddList(std::move(items));
      if (s.a & 4) {
        // As the argument of a call to a global: torch.Size(x), OrderedDict(x) ...
        auto [module, name] = GlobalValue(s.b);
        Replace(doc, at, doc.AddReduce(doc.Global(module, name), doc.AddTuple({w})));
      } else {
        Replace(doc, at, w);
      }
      return true;
    }
    case kUnwrap: {
      Place child = ChildPlace(doc, at.node, s.a);
      if (child.node == kNoNode || child.node == at.node) return false;
      if (at.parent != kNoNode && Reaches(doc, child.node, at.parent)) return false;
      Replace(doc, at, child.node);
      return true;
    }
    case kSetGlobal: {
      auto [module, name] = GlobalValue(s.a);
      Replace(doc, at, doc.Global(module, name));
      return true;
    }
    default:
      return false;
  }
}

struct Edit {
  uint8_t target = 0;
  uint8_t selector = 0, k1 = 0, k2 = 0;
  std::vector<Step> steps;  // descents, then one terminal action
};

Edit ReadEdit(Program& prog) {
  Edit e;
  e.target = prog.U8();
  e.selector = prog.U8();
  e.k1 = prog.U8();
  e.k2 = prog.U8();
  for (int depth = 0; depth < 8; ++depth) {
    Step s = ReadStep(prog);
    e.steps.push_back(s);
    if (s.action != kDescend) break;
  }
  return e;
}

Place Select(Document& doc, const Edit& e) {
  switch (e.selector % 6) {
    case 0: {
      Place p;
      p.node = doc.root();
      return p;
    }
    case 1:
      return NamedPlace(doc, e.k1, e.k2, static_cast<uint8_t>(e.k2 >> 4));
    case 2: {
      const auto kind = static_cast<Kind>(e.k1 % (static_cast<int>(Kind::kPersistentId) + 1));
      const NodeId id = KthOfKind(doc, kind, e.k2);
      return id == kNoNode ? Place{} : PlaceOf(doc, id);
    }
    case 3:
      return TensorPart(doc, KthTensor(doc, e.k2), e.k1);
    case 4: {
      const NodeId size = KthSize(doc, e.k2);
      if (size == kNoNode) return Place{};
      // The dims tuple inside torch.Size((...)), or the call itself.
      if (e.k1 & 1) return PlaceOf(doc, size);
      auto args = doc.SequenceItems(doc.node(size).b);
      if (!args || args->empty()) return Place{};
      return Element(doc, doc.node(size).b, 0);
    }
    default: {
      if (doc.size() == 0) return Place{};
      return PlaceOf(doc, static_cast<NodeId>((e.k1 | (e.k2 << 8)) % doc.size()));
    }
  }
}

bool ApplyEdit(Document& doc, const Edit& e, const Document* other) {
  Place at = Select(doc, e);
  for (const Step& s : e.steps) {
    if (at.node == kNoNode) return false;
    if (s.action == kDescend) {
      at = IsMappingNode(doc, at.node) && (s.b & 1) ? Element(doc, at.node, s.a)
                                                    : ChildPlace(doc, at.node, s.a);
      continue;
    }
    return Apply(doc, at, s, other);
  }
  return false;
}

// The files an op's target byte names: bit 0-1 optim / model / both, bit 2
// every rank (else rank `target >> 3`).
std::vector<Slot*> Targets(Work& w, uint8_t target) {
  std::vector<Slot*> out;
  const uint32_t kind = target & 3;
  const bool all = (target & 4) != 0;
  const uint32_t rank = (target >> 3) % w.world();
  for (Slot& s : w.slots()) {
    const bool kind_ok = kind >= 2 || (kind == 0) == (s.kind == ucfs::RankFileName::Kind::kOptim);
    if (kind_ok && (all || s.rank == rank)) out.push_back(&s);
  }
  return out;
}

Slot& OneTarget(Work& w, uint8_t target) {
  return w.At(target & 1 ? ucfs::RankFileName::Kind::kModel : ucfs::RankFileName::Kind::kOptim,
              target >> 1);
}

// --- repair: the optimizer files made to fit rank 0's param_shapes ----------

// The plain tensor call of a tensor node (through _rebuild_parameter).
NodeId PlainCall(const Document& doc, NodeId id) {
  if (id == kNoNode || doc.node(id).kind != Kind::kReduce) return kNoNode;
  if (doc.IsGlobal(doc.node(id).a, "torch._utils", "_rebuild_parameter")) {
    auto args = doc.SequenceItems(doc.node(id).b);
    return args && !args->empty() ? PlainCall(doc, (*args)[0]) : kNoNode;
  }
  return doc.node(id).b == kNoNode ? kNoNode : id;
}

// Makes tensor `id` a flat (n,) tensor at offset 0 of a storage of exactly n
// elements, and its storage record that size.
void ResizeFlat(Archive& ar, NodeId id, uint64_t n) {
  Document& doc = ar.doc;
  auto t = ucfs::MatchTensor(doc, id);
  if (!t.ok() || !t->has_value()) return;
  const NodeId call = PlainCall(doc, id);
  if (call == kNoNode) return;
  const NodeId args = doc.node(call).b;
  const Node& a = doc.node(args);
  if (a.items.size() < 5) return;
  const NodeId pid = doc.node(a.items[0]).a;
  if (pid == kNoNode || doc.node(pid).items.size() < 5) return;
  const auto ni = static_cast<int64_t>(n);
  // New nodes rather than edited ones: a shape tuple may be shared.
  const NodeId offset = doc.AddInt(0);
  const NodeId size = doc.AddTuple({doc.AddInt(ni)});
  const NodeId stride = doc.AddTuple({doc.AddInt(1)});
  const NodeId numel = doc.AddInt(ni);
  {
    Node& args_node = doc.mutable_node(args);
    args_node.items[1] = offset;
    args_node.items[2] = size;
    args_node.items[3] = stride;
  }
  doc.mutable_node(pid).items[4] = numel;
  const std::string bytes_needed(n * (*t)->element_size(), '\0');
  if (std::string* rec = ar.Storage((*t)->storage_key)) {
    rec->resize(bytes_needed.size(), '\0');
  } else {
    ar.AddStorage((*t)->storage_key, bytes_needed);
  }
  ar.dirty = true;
}

// A copy of the subgraph at `id` of `snapshot` (a copy of ar.doc: CopyFrom
// needs a source that does not grow under it) into ar.doc, globals shared;
// every storage it names gets a new key and a copy of its record.
NodeId CopyWithNewStorages(Archive& ar, const Document& snapshot, NodeId id, uint64_t* next_key) {
  Document& doc = ar.doc;
  std::vector<NodeId> copied;
  const size_t before = doc.size();
  const NodeId root = doc.CopyFrom(snapshot, id, &copied);
  for (size_t i = before; i < doc.size(); ++i) {
    const Node& n = doc.node(static_cast<NodeId>(i));
    if (n.kind != Kind::kPersistentId || n.a == kNoNode) continue;
    const NodeId tuple = n.a;
    if (doc.node(tuple).items.size() < 5) continue;
    auto key = doc.AsStr(doc.node(tuple).items[2]);
    if (!key) continue;
    const std::string* old = ar.Storage(*key);
    const std::string bytes = old ? *old : std::string();
    const std::string fresh = std::to_string((*next_key)++);
    const NodeId key_node = doc.AddStr(fresh);
    doc.mutable_node(tuple).items[2] = key_node;
    ar.AddStorage(fresh, bytes);
  }
  ar.dirty = true;
  return root;
}

uint64_t NextStorageKey(const Archive& ar) {
  uint64_t next = 0;
  const std::string data = ar.prefix + "/data/";
  for (const auto& [name, bytes] : ar.records) {
    if (!name.starts_with(data)) continue;
    const std::string key = name.substr(data.size());
    if (key.empty() || key.size() > 15 ||
        key.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    next = std::max<uint64_t>(next, std::stoull(key) + 1);
  }
  return next;
}

// Elements of a shape as ucfs counts them (ucfs::NumelOf: wrapping), so that
// a repaired checkpoint is one Checkpoint::Open would accept.
uint64_t WrappingNumel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Per sub-group: the elements of each rank's flat buffer at `world` ranks,
// from a model-states pickle's param_shapes; nullopt past kMaxRepairElements.
std::optional<std::vector<uint64_t>> FlatSizes(const Document& model, uint32_t world) {
  auto groups = model.SequenceItems(model.Get(model.root(), "param_shapes"));
  if (!groups) return std::nullopt;
  std::vector<uint64_t> sizes;
  for (NodeId g : *groups) {
    auto items = model.MappingItems(g);
    if (!items) return std::nullopt;
    uint64_t total = 0;
    for (const auto& [k, v] : *items) {
      auto shape = ucfs::MatchShape(model, v);
      if (!shape) return std::nullopt;
      const uint64_t numel = WrappingNumel(*shape);
      if (numel > kMaxRepairElements * world) return std::nullopt;
      total += (numel + world - 1) / world;
    }
    if (total > kMaxRepairElements) return std::nullopt;
    sizes.push_back(total);
  }
  return sizes;
}

void RepairOptim(Archive& ar, const std::vector<uint64_t>& sizes, uint8_t flags) {
  Document& doc = ar.doc;
  const NodeId osd = doc.Get(doc.root(), "optimizer_state_dict");
  Place flats_place = Field(doc, osd, "fp32_flat_groups");
  if (flats_place.node == kNoNode) return;
  const NodeId flats = flats_place.node;
  if (doc.node(flats).kind != Kind::kList && doc.node(flats).kind != Kind::kTuple) return;
  const NodeId inner = doc.Get(osd, "optimizer_state_dict");
  const NodeId state = doc.Get(inner, "state");
  const NodeId groups = doc.Get(inner, "param_groups");
  const size_t want = sizes.size();
  uint64_t next_key = NextStorageKey(ar);

  // The number of sub-groups.
  size_t have = doc.node(flats).items.size();
  if (have > want) {
    doc.mutable_node(flats).items.resize(want);
    if (IsMappingNode(doc, state) && doc.node(state).kind == Kind::kDict) {
      std::vector<NodeId> kept;
      const auto items = doc.node(state).items;
      for (size_t i = 0; i + 1 < items.size(); i += 2) {
        auto k = doc.AsInt(items[i]);
        if (k && *k >= 0 && static_cast<uint64_t>(*k) >= want) continue;
        kept.push_back(items[i]);
        kept.push_back(items[i + 1]);
      }
      doc.mutable_node(state).items = std::move(kept);
    }
    if (auto gs = doc.SequenceItems(groups)) {
      for (NodeId g : *gs) {
        const NodeId params = doc.Get(g, "params");
        if (params == kNoNode || doc.node(params).kind != Kind::kList) continue;
        std::vector<NodeId> kept;
        for (NodeId p : doc.node(params).items) {
          auto k = doc.AsInt(p);
          if (k && *k >= 0 && static_cast<uint64_t>(*k) >= want) continue;
          kept.push_back(p);
        }
        doc.mutable_node(params).items = std::move(kept);
      }
    }
    ar.dirty = true;
  } else if (have < want && have > 0 && want <= kMaxRepairGroups) {
    const Document snapshot = doc;
    const NodeId flat0 = doc.node(flats).items[0];
    NodeId state0 = kNoNode;
    if (auto items = doc.MappingItems(state)) {
      for (const auto& [k, v] : *items) {
        if (doc.AsInt(k) == 0) state0 = v;
      }
    }
    for (size_t k = have; k < want; ++k) {
      const NodeId t = CopyWithNewStorages(ar, snapshot, flat0, &next_key);
      doc.Append(flats, t);
      if (state0 != kNoNode && doc.node(state).kind == Kind::kDict) {
        const NodeId s = CopyWithNewStorages(ar, snapshot, state0, &next_key);
        doc.AppendPair(state, doc.AddInt(static_cast<int64_t>(k)), s);
      }
      if (auto gs = doc.SequenceItems(groups); gs && !gs->empty()) {
        // Into the last param group, or the one flags pick.
        const NodeId g = (*gs)[flags & 1 ? gs->size() - 1 : (k % gs->size())];
        const NodeId params = doc.Get(g, "params");
        if (params != kNoNode && doc.node(params).kind == Kind::kList) {
          doc.Append(params, doc.AddInt(static_cast<int64_t>(k)));
        }
      }
    }
    ar.dirty = true;
  }

  // Each sub-group's buffers at their size.
  const auto flat_items = doc.node(flats).items;
  for (size_t k = 0; k < std::min(flat_items.size(), want); ++k) {
    ResizeFlat(ar, flat_items[k], sizes[k]);
  }
  if (auto items = doc.MappingItems(state)) {
    for (const auto& [key, value] : *items) {
      auto k = doc.AsInt(key);
      if (!k || *k < 0 || static_cast<uint64_t>(*k) >= want) continue;
      auto entries = doc.MappingItems(value);
      if (!entries) continue;
      for (const auto& [name, v] : *entries) {
        auto t = ucfs::MatchTensor(doc, v);
        if (t.ok() && t->has_value() && (*t)->shape.size() == 1) {
          ResizeFlat(ar, v, sizes[static_cast<size_t>(*k)]);
        }
      }
    }
  }
}

void RepairModel(Archive& ar, const Document& model0, uint32_t world) {
  Document& doc = ar.doc;
  auto frozen = model0.MappingItems(model0.Get(model0.root(), "frozen_param_shapes"));
  if (!frozen) return;
  const NodeId fragments = doc.Get(doc.root(), "frozen_param_fragments");
  for (const auto& [k, v] : *frozen) {
    auto name = model0.AsStr(k);
    auto shape = ucfs::MatchShape(model0, v);
    if (!name || !shape) continue;
    const uint64_t numel = WrappingNumel(*shape);
    if (numel > kMaxRepairElements * world) continue;
    const NodeId t = doc.Get(fragments, *name);
    if (t != kNoNode) ResizeFlat(ar, t, (numel + world - 1) / world);
  }
}

void Repair(Work& w, uint8_t flags) {
  // The repairs resize ZeRO-3 flat buffers; ZeRO-1/2 partitions follow
  // other rules (their edits stop at Checkpoint::Open, or reach the views
  // when they keep the sizes).
  if (kFlatGroups) return;
  Slot& model0_slot = w.At(ucfs::RankFileName::Kind::kModel, 0);
  Archive* model0 = w.Edit(model0_slot);
  if (model0 == nullptr) return;
  const uint32_t world = w.world();
  auto sizes = FlatSizes(model0->doc, world);
  const Document model0_doc = model0->doc;  // edits below may touch model 0 itself
  for (Slot& s : w.slots()) {
    Archive* ar = w.Edit(s);
    if (ar == nullptr) continue;
    if (s.kind == ucfs::RankFileName::Kind::kOptim) {
      if (sizes) RepairOptim(*ar, *sizes, flags);
    } else if (flags & 2) {
      RepairModel(*ar, model0_doc, world);
    }
  }
}

// --- file-level ops ---------------------------------------------------------

enum Op : uint8_t {
  kEdit,
  kEdit2,  // twice as likely as the rest: edits are the point
  kRepair,
  kReplaceFile,
  kTruncate,
  kRemove,
  kFlipByte,
  kRecord,
  kLatest,
  kAddRank,
  kRetype,
  kAddRecord,
  kNumOps,
};

// Every tensor call at or below `id`.
std::vector<NodeId> TensorsBelow(const Document& doc, NodeId id) {
  std::vector<NodeId> out;
  std::vector<bool> seen(doc.size());
  std::vector<NodeId> stack = {id};
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (n == kNoNode || n >= doc.size() || seen[n]) continue;
    seen[n] = true;
    if (IsTensorCall(doc, n)) {
      out.push_back(n);
      continue;
    }
    const Node& node = doc.node(n);
    stack.push_back(node.a);
    stack.push_back(node.b);
    stack.push_back(node.state);
    stack.insert(stack.end(), node.items.begin(), node.items.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A family of tensors of a rank file, for retyping them all at once (a
// checkpoint in another dtype is many consistent edits).
std::vector<NodeId> TensorFamily(const Document& doc, uint8_t which) {
  const NodeId root = doc.root();
  const NodeId osd = doc.Get(root, "optimizer_state_dict");
  const NodeId state =
      doc.Get(doc.Get(osd, kFlatGroups ? "base_optimizer_state" : "optimizer_state_dict"), "state");
  std::vector<NodeId> out;
  auto state_entries = [&](std::optional<std::string_view> name) {
    for (const auto& [k, per_group] :
         doc.MappingItems(state).value_or(std::vector<std::pair<NodeId, NodeId>>{})) {
      for (const auto& [key, v] :
           doc.MappingItems(per_group).value_or(std::vector<std::pair<NodeId, NodeId>>{})) {
        auto t = ucfs::MatchTensor(doc, v);
        if (!t.ok() || !t->has_value()) continue;
        if (name ? doc.AsStr(key) == name : (*t)->shape.size() == 1) out.push_back(v);
      }
    }
  };
  switch (which % 8) {
    case 0:
      return TensorsBelow(
          doc, doc.Get(osd, kFlatGroups ? "single_partition_of_fp32_groups" : "fp32_flat_groups"));
    case 1:
      state_entries("exp_avg");
      return out;
    case 2:
      state_entries("exp_avg_sq");
      return out;
    case 3:
      state_entries(std::nullopt);  // every per-element state
      return out;
    case 4:
      return TensorsBelow(doc, root);
    case 5:
      return TensorsBelow(doc, doc.Get(root, "module"));
    case 6:
      return TensorsBelow(doc, doc.Get(root, "frozen_param_fragments"));
    default:
      for (NodeId n :
           doc.SequenceItems(doc.Get(root, "buffer_names")).value_or(std::vector<NodeId>{})) {
        if (auto name = doc.AsStr(n)) {
          const NodeId t = doc.Get(doc.Get(root, "module"), *name);
          if (IsTensorCall(doc, t)) out.push_back(t);
        }
      }
      return out;
  }
}

// Sets the storage class of a tensor (new pid tuple items, as a shared tuple
// would otherwise change other tensors too).
void SetStorageClass(Document& doc, NodeId tensor, NodeId cls) {
  const NodeId call = PlainCall(doc, tensor);
  if (call == kNoNode) return;
  auto args = doc.SequenceItems(doc.node(call).b);
  if (!args || args->empty() || doc.node((*args)[0]).kind != Kind::kPersistentId) return;
  const NodeId pid = (*args)[0];
  const NodeId tuple = doc.node(pid).a;
  if (tuple == kNoNode || doc.node(tuple).items.size() < 5) return;
  doc.mutable_node(tuple).items[1] = cls;
}

// Zip records a torch.save container may have besides data.pkl and data/*.
constexpr const char* kRecordNames[] = {"byteorder",
                                        ".format_version",
                                        ".storage_alignment",
                                        ".data/serialization_id",
                                        ".data/version",
                                        "version",
                                        "data/99",
                                        "extra/x"};
constexpr const char* kRecordContents[] = {"little", "big", "1",   "64",    "4096", "65535", "3",
                                           "0",      "",    "3\n", "65536", "\xff", "2",     "08"};

void RunProgram(Program& prog, Work& w) {
  for (size_t ops = 0; ops < kMaxOps && !prog.done(); ++ops) {
    switch (prog.U8() % kNumOps) {
      case kEdit:
      case kEdit2: {
        const Edit e = ReadEdit(prog);
        for (Slot* s : Targets(w, e.target)) {
          Archive* ar = w.Edit(*s);
          if (ar == nullptr) continue;
          // The same file of the next rank, for copying nodes across ranks.
          Slot& peer = w.At(s->kind, s->rank + 1);
          const Document* other = nullptr;
          if (&peer != s) {
            if (Archive* p = w.Edit(peer)) other = &p->doc;
          }
          if (ApplyEdit(ar->doc, e, other)) ar->dirty = true;
        }
        break;
      }
      case kRepair:
        Repair(w, prog.U8());
        break;
      case kReplaceFile: {
        Slot& dst = OneTarget(w, prog.U8());
        Slot& src = OneTarget(w, prog.U8());
        if (&dst == &src) break;
        w.Flush(src);
        w.SetBytes(dst, src.bytes);
        break;
      }
      case kTruncate: {
        Slot& s = OneTarget(w, prog.U8());
        const uint16_t keep = prog.U16();
        w.Flush(s);
        if (!s.bytes) break;
        const size_t n = static_cast<size_t>(s.bytes->size() * uint64_t{keep} / 65536);
        w.SetBytes(s, s.bytes->substr(0, n));
        break;
      }
      case kRemove:
        w.SetBytes(OneTarget(w, prog.U8()), std::nullopt);
        break;
      case kFlipByte: {
        Slot& s = OneTarget(w, prog.U8());
        const uint16_t where = prog.U16();
        const uint8_t x = prog.U8();
        w.Flush(s);
        if (!s.bytes || s.bytes->empty() || x == 0) break;
        std::string bytes = *s.bytes;
        // Mostly near the end, where the zip directory is.
        const size_t at =
            where & 0x8000 ? bytes.size() - 1 - std::min<size_t>(where & 0x7fff, bytes.size() - 1)
                           : static_cast<size_t>(bytes.size() * uint64_t{where} / 32768);
        bytes[at] = static_cast<char>(bytes[at] ^ x);
        w.SetBytes(s, std::move(bytes));
        break;
      }
      case kRecord: {  // a storage record resized or dropped
        Slot& s = OneTarget(w, prog.U8());
        const uint8_t which = prog.U8();
        const uint8_t mode = prog.U8();
        Archive* ar = w.Edit(s);
        if (ar == nullptr || ar->records.size() < 2) break;
        const size_t i = which % ar->records.size();
        if (i == ar->pickle) break;
        std::string& bytes = ar->records[i].second;
        switch (mode % 6) {
          case 0:
            bytes.clear();
            break;
          case 1:
            bytes.resize(bytes.size() / 2);
            break;
          case 2:
            if (!bytes.empty()) bytes.pop_back();
            break;
          case 3:
            bytes.append(static_cast<size_t>(mode / 6 + 1) * 4, '\x7f');
            break;
          case 4:
            ar->records.erase(ar->records.begin() + static_cast<std::ptrdiff_t>(i));
            if (i < ar->pickle) --ar->pickle;
            break;
          default:  // NaN and Inf floats, then whatever bfloat16 makes of them
            for (size_t k = 0; k + 4 <= bytes.size(); k += 4) {
              std::memcpy(bytes.data() + k, (k / 4) % 2 ? "\x00\x00\x80\x7f" : "\x00\x00\xc0\x7f",
                          4);
            }
            break;
        }
        Work::Touch(*ar);
        break;
      }
      case kLatest: {
        static const char* const kLatestValues[] = {"",
                                                    "global_step4\n",
                                                    "nope",
                                                    "../ckpt/global_step4",
                                                    "global_step4/",
                                                    "latest",
                                                    ".",
                                                    "/",
                                                    "global_step4_universal"};
        // One past the values: no `latest` at all (a tag directory alone).
        const size_t which = prog.U8() % (std::size(kLatestValues) + 1);
        if (which == std::size(kLatestValues)) {
          w.RemoveOther(kRoot + "/latest");
        } else {
          w.SetOther(kRoot + "/latest", kLatestValues[which]);
        }
        break;
      }
      case kAddRank:
        w.AddRank(prog.U8());
        break;
      case kRetype: {  // a family of tensors in another dtype, in one or all files
        const uint8_t target = prog.U8();
        const uint8_t family = prog.U8();
        auto [module, name] = GlobalValue(prog.U8() % 19);  // the storage classes
        for (Slot* s : Targets(w, target)) {
          Archive* ar = w.Edit(*s);
          if (ar == nullptr) continue;
          const NodeId cls = ar->doc.Global(module, name);
          for (NodeId t : TensorFamily(ar->doc, family)) SetStorageClass(ar->doc, t, cls);
          ar->dirty = true;
        }
        break;
      }
      case kAddRecord: {  // a record torch >= 2.1 writes, or another, added or rewritten
        Slot& s = OneTarget(w, prog.U8());
        const std::string name = kRecordNames[prog.U8() % std::size(kRecordNames)];
        const std::string contents = kRecordContents[prog.U8() % std::size(kRecordContents)];
        Archive* ar = w.Edit(s);
        if (ar == nullptr) break;
        const std::string full = ar->prefix + "/" + name;
        auto it = std::find_if(ar->records.begin(), ar->records.end(),
                               [&](const auto& r) { return r.first == full; });
        if (it != ar->records.end()) {
          it->second = contents;
        } else {
          // After data.pkl, where torch puts them (the order is torch's to choose).
          ar->records.insert(ar->records.begin() + static_cast<std::ptrdiff_t>(ar->pickle) + 1,
                             {full, contents});
        }
        ar->dirty = true;
        break;
      }
      default:
        break;
    }
  }
}

// --- the reshard view's files are a checkpoint with the same values ----------

// Bytes [0, numel * element size) of a state of a param (or of a frozen
// param, state < 0), read through the checkpoint's extents; nullopt when the
// checkpoint cannot map them (a missing rank file).
std::optional<std::string> ValueBytes(ucfs::Env& env, const ucfs::Checkpoint& c, size_t param,
                                      int state) {
  uint64_t bytes = 0;
  std::vector<ucfs::Extent> extents;
  ucfs::Status st;
  if (state < 0) {
    const auto& f = c.frozen_params()[param];
    bytes = f.numel * ucfs::Info(f.dtype).element_size;
    st = c.MapFrozen(param, 0, bytes, &extents);
  } else {
    bytes = c.params()[param].numel *
            ucfs::Info(c.states()[static_cast<size_t>(state)].dtype).element_size;
    st = c.MapState(param, static_cast<size_t>(state), 0, bytes, &extents);
  }
  if (!st.ok()) return std::nullopt;
  std::string out;
  for (const ucfs::Extent& e : extents) {
    auto file = env.Open(c.sources()[e.file].path);
    if (!file.ok()) return std::nullopt;
    auto piece = (*file)->ReadString(e.offset, static_cast<size_t>(e.length));
    if (!piece.ok()) return std::nullopt;
    out += *piece;
  }
  return out;
}

// The reshard view at N promises the checkpoint DeepSpeed would have saved at
// N ranks: its rank files (read through the view) open as one, at world size
// N, with the same params, shapes, states, frozen params and tied params, and
// every state of every param holds the same bytes.
void CheckReshardRoundTrip(ucfs::Env& env, const ucfs::Checkpoint& src, uint32_t n,
                           const std::map<std::string, std::string>& files) {
  const std::string what = "reshard view at " + std::to_string(n) + ": its files, reopened";
  if (files.size() != 2 * static_cast<size_t>(n)) return;  // some not read whole (budget)
  // Known, reported: a state dict with key 0 twice (a pickle may repeat a
  // key; Python keeps the last) gives the source each state twice, while
  // the reshard view writes them once.
  std::set<std::string> state_names;
  for (const auto& st : src.states()) {
    if (!state_names.insert(st.name).second) return;
  }
  // Known, reported: a non-empty state dict whose keys are not the
  // sub-groups' ints is taken by Open as no state at all, while the reshard
  // view writes its first entry again under int keys.
  {
    const Document& d = src.rank0_optim();
    const NodeId state =
        d.Get(d.Get(d.Get(d.root(), "optimizer_state_dict"), "optimizer_state_dict"), "state");
    auto items = d.MappingItems(state);
    std::set<int64_t> keys;
    for (const auto& [k, v] : items.value_or(std::vector<std::pair<NodeId, NodeId>>{})) {
      auto key = d.AsInt(k);
      if (!key || *key < 0 || static_cast<size_t>(*key) >= src.sub_groups().size()) return;
      keys.insert(*key);
    }
    if (!keys.empty() && keys.size() != src.sub_groups().size()) return;
  }
  ucfs::MemEnv re;
  for (const auto& [path, bytes] : files) re.WriteFile("/re" + path, bytes);
  re.WriteFile("/re/latest", src.files().tag);
  auto opened = ucfs::Checkpoint::Open(re, "/re");
  if (!opened.ok()) Fail(what + ", do not open: " + opened.status().ToString());
  const ucfs::Checkpoint& c = *opened;
  ++g_stats.round_trips;
  if (c.world_size() != n) Fail(what + ", are at world size " + std::to_string(c.world_size()));
  if (c.params().size() != src.params().size() || c.states().size() != src.states().size() ||
      c.frozen_params().size() != src.frozen_params().size() ||
      c.tied_params().size() != src.tied_params().size()) {
    auto counts = [](const ucfs::Checkpoint& k) {
      return std::to_string(k.params().size()) + "/" + std::to_string(k.states().size()) + "/" +
             std::to_string(k.frozen_params().size()) + "/" +
             std::to_string(k.tied_params().size());
    };
    Fail(what + ", have " + counts(c) + " params/states/frozen/tied, the source " + counts(src));
  }
  for (size_t s = 0; s < c.states().size(); ++s) {
    if (c.states()[s].name != src.states()[s].name ||
        c.states()[s].dtype != src.states()[s].dtype) {
      Fail(what + ", have state '" + c.states()[s].name + "' where the source has '" +
           src.states()[s].name + "'");
    }
  }
  uint64_t budget = uint64_t{16} << 20;  // bytes of values compared
  for (size_t p = 0; p < src.params().size(); ++p) {
    const auto& sp = src.params()[p];
    auto q = c.FindParam(sp.name);
    if (!q || c.params()[*q].shape != sp.shape) {
      Fail(what + ", lack param '" + sp.name + "' of shape " + ucfs::ShapeString(sp.shape));
    }
    for (size_t s = 0; s < src.states().size(); ++s) {
      const uint64_t bytes = sp.numel * ucfs::Info(src.states()[s].dtype).element_size;
      if (bytes > budget) return;
      budget -= bytes;
      auto a = ValueBytes(env, src, p, static_cast<int>(s));
      auto b = ValueBytes(re, c, *q, static_cast<int>(s));
      if (a && (!b || *a != *b)) {
        Fail(what + ", hold other values of " + src.states()[s].name + " of '" + sp.name + "'");
      }
    }
  }
  for (size_t f = 0; f < src.frozen_params().size(); ++f) {
    const auto& sf = src.frozen_params()[f];
    auto q = c.FindFrozen(sf.name);
    if (!q || c.frozen_params()[*q].shape != sf.shape || c.frozen_params()[*q].dtype != sf.dtype) {
      Fail(what + ", lack frozen param '" + sf.name + "'");
    }
    const uint64_t bytes = sf.numel * ucfs::Info(sf.dtype).element_size;
    if (bytes > budget) return;
    budget -= bytes;
    auto a = ValueBytes(env, src, f, -1);
    auto b = ValueBytes(re, c, *q, -1);
    if (a && (!b || *a != *b)) Fail(what + ", hold other values of frozen '" + sf.name + "'");
  }
}

// What the index would keep of every rank file comes back from its encoding
// as it was (a second mount reads the checkpoint from these).
void CheckSummaries(ucfs::Env& env, Work& work) {
  for (const Slot& s : work.slots()) {
    if (!s.bytes) continue;
    auto summary = ucfs::SummarizeTorchFile(env, s.path);
    if (!summary.ok()) continue;
    const std::string encoded = ucfs::EncodeSummary(*summary);
    auto decoded = ucfs::DecodeSummary(encoded);
    if (!decoded.ok())
      Fail(s.path + ": its summary does not decode: " + decoded.status().ToString());
    if (ucfs::EncodeSummary(*decoded) != encoded) Fail(s.path + ": its summary decodes to another");
  }
}

// What Checkpoint::Open accepted: every param's shape has as many elements
// as its numel says, and no more than 2^62 (as MatchTensor demands of
// tensors), so numel * element size cannot wrap either.
void CheckModel(const ucfs::Checkpoint& c) {
  auto check = [](const std::string& name, const std::vector<int64_t>& shape, uint64_t numel) {
    uint64_t n = 1;
    for (int64_t d : shape) {
      if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) {
        Fail("Checkpoint::Open accepted '" + name + "' of shape " + ucfs::ShapeString(shape) +
             ": more than 2^64 elements (numel " + std::to_string(numel) + ")");
      }
    }
    if (n != numel || n > (uint64_t{1} << 62)) {
      Fail("Checkpoint::Open accepted '" + name + "' of shape " + ucfs::ShapeString(shape) +
           " with numel " + std::to_string(numel));
    }
  };
  for (const auto& p : c.params()) check(p.name, p.shape, p.numel);
  for (const auto& f : c.frozen_params()) check(f.name, f.shape, f.numel);
}

// The views of an opened checkpoint, built and read in full.
void ExerciseViews(ucfs::MemEnv& env, std::shared_ptr<const ucfs::Checkpoint> ckpt, Reader& reader,
                   bool crc) {
  // The directories of files ucfs makes (the rest is the source, passed through).
  const std::string utag = "/" + ucfs::UniversalTag(ckpt->files().tag) + "/zero/";
  const std::string fp32 = "/" + ucfs::ConsolidatedDirName(ckpt->files().tag) + "/";
  {
    auto view = ucfs::BuildUniversalView(env, ckpt);
    reader.Built(view.status(), "universal view");
    if (view.ok()) reader.ReadTree(**view, "universal view", {utag, fp32});
  }
  if (crc) {
    // CRCs read every tensor byte at build time: only within the budget.
    uint64_t bytes = 0;
    for (size_t p = 0; p < ckpt->params().size(); ++p) {
      for (const auto& s : ckpt->states()) {
        uint64_t b = 0;
        if (__builtin_mul_overflow(ckpt->params()[p].numel, ucfs::Info(s.dtype).element_size, &b) ||
            __builtin_add_overflow(bytes, b, &bytes)) {
          bytes = UINT64_MAX;
        }
      }
    }
    if (bytes <= reader.budget / 2) {
      ucfs::UniversalViewOptions options;
      options.compute_crc = true;
      auto view = ucfs::BuildUniversalView(env, ckpt, options);
      reader.Built(view.status(), "universal view with CRCs");
      if (view.ok()) reader.ReadTree(**view, "universal view with CRCs", {utag, fp32});
    }
  }
  const uint32_t w = ckpt->world_size();
  std::set<uint32_t> sizes = {1, w + 1, 2 * w + 1};
  if (w > 1) sizes.insert(w - 1);
  for (uint32_t n : sizes) {
    ucfs::ReshardOptions options;
    options.world_size = n;
    options.cached_bytes = 1;  // the last one only, so rank files are rebuilt after eviction
    auto view = ucfs::BuildReshardView(env, ckpt, options);
    reader.Built(view.status(), "reshard view at " + std::to_string(n));
    if (view.ok()) {
      std::map<std::string, std::string> rank_files;
      const std::string tag_dir = "/" + ckpt->files().tag + "/";
      reader.ReadTree(**view, "reshard view at " + std::to_string(n), {tag_dir, fp32}, &rank_files,
                      tag_dir);
      CheckReshardRoundTrip(env, *ckpt, n, rank_files);
    }
  }
  {
    // The consolidated weights on their own, split into tiny shards.
    ucfs::View view(env, 0);
    // Its pieces name checkpoint sources by index, as in the views.
    for (const auto& s : ckpt->sources()) view.AddSource(s);
    ucfs::ConsolidatedOptions options;
    options.max_shard_bytes = 256;
    ucfs::Status s = ucfs::AddConsolidatedDir(
        env, view, ucfs::kRootInode, ucfs::ParallelCheckpoint::SharedOfDataParallel(ckpt), options);
    ++(s.ok() ? g_stats.read.views_built : g_stats.read.views_failed);
    if (s.ok()) reader.ReadTree(view, "sharded consolidated weights", {fp32});
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
  // Bit 6: the checkpoint named by its tag directory, as `ucfs mount
  // .../global_step4` does (a view without the root's other entries).
  const std::string path = head & 0x40 ? fixture.tag_dir : kRoot;
  Work work(fixture);
  RunProgram(prog, work);

  ucfs::MemEnv env;
  const bool mutated = work.Install(&env);
  if (const char* dump = std::getenv("UCFS_FUZZ_DUMP_DIR")) {
    // For looking at a finding with ucfs show / inspect / torch.load: the
    // mutated checkpoint as files (never set while fuzzing: no disk writes).
    namespace fs = std::filesystem;
    std::vector<std::pair<std::string, bool>> stack = {{kRoot, true}};
    while (!stack.empty()) {
      const std::string at = stack.back().first;
      stack.pop_back();
      auto entries = env.ListDir(at);
      if (!entries.ok()) continue;
      for (const auto& e : *entries) {
        const std::string p = at + "/" + e.name;
        if (e.is_dir) {
          stack.emplace_back(p, true);
        } else if (const std::string* bytes = env.Contents(p)) {
          const fs::path out = fs::path(dump) / p.substr(1);
          fs::create_directories(out.parent_path());
          std::ofstream(out, std::ios::binary) << *bytes;
        }
      }
    }
  }
  ++g_stats.inputs;
  if (mutated) ++g_stats.mutated;
  Reader reader{env, !mutated, g_stats.read,
                kFlatGroups ? UniversalForm::kDictCatDim0 : UniversalForm::kBareFlat};

  uint64_t sink = 0;
  CheckSummaries(env, work);
  auto ckpt = ucfs::Checkpoint::Open(env, path);
  reader.Check(ckpt.status(), "Checkpoint::Open");
  if (ckpt.ok()) {
    auto shared = std::make_shared<const ucfs::Checkpoint>(std::move(*ckpt));
    CheckModel(*shared);
    ++g_stats.opened;
    // inspect
    sink += ucfs::InspectJson(*shared)
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                .size();
    sink += ucfs::InspectText(*shared).size();
    // A rendering may fail only on its bounds (shared values), never crash.
    if (auto text = ucfs::Describe(shared->rank0_optim(), shared->rank0_optim().root());
        text.ok()) {
      sink += text->size();
    }
    ucfs::DescribeOptions brief;
    brief.storage_details = false;
    brief.max_items = 3;
    if (auto text = ucfs::Describe(shared->rank0_model(), shared->rank0_model().root(), brief);
        text.ok()) {
      sink += text->size();
    }
    ExerciseViews(env, shared, reader, (head & 0x80) != 0);
  }
  // verify, on whatever the files are now
  ucfs::VerifyOptions options;
  options.threads = 1;
  auto report = ucfs::Verify(env, path, options);
  reader.Check(report.status(), "verify");
  if (report.ok()) {
    if (!mutated && !report->ok()) {
      Fail("unmutated fixture " + fixture.name + ": verify reports " +
           report->problems.front().message);
    }
    sink += report->problems.size();
    if (report->ok()) ++g_stats.verify_clean;
  }
  if (sink == 0xdeadbeefdeadbeefULL) std::fputc('\0', stderr);
  if (std::getenv("UCFS_FUZZ_TRACE") != nullptr) {
    std::string hex;
    for (size_t i = 0; i < size; ++i) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", data[i]);
      hex += b;
    }
    std::fprintf(stderr, "TRACE %s opened=%d\n", hex.c_str(), ckpt.ok() ? 1 : 0);
  }
  return 0;
}
