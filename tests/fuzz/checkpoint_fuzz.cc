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
// The parts: checkpoint_work.h (the fixtures and the checkpoint being
// mutated), checkpoint_program.h (the ops), pickle_edits.h (kEdit's
// selectors and actions), pickle_values.h (what they put in),
// pickle_surgery.h (places in a Document), checkpoint_repair.h (kRepair).
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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_program.h"
#include "checkpoint_work.h"
#include "mutation_support.h"
#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/inspect_report.h"
#include "ucfs/codec/describe.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/tools/verify.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"
#include "view_reader.h"

namespace {

using ucfs::pickle::Document;
using ucfs::pickle::NodeId;
using ucfs_fuzz::Fail;
using ucfs_fuzz::Fixture;
using ucfs_fuzz::Fixtures;
using ucfs_fuzz::kFlatGroups;
using ucfs_fuzz::kRoot;
using ucfs_fuzz::Program;
using ucfs_fuzz::Reader;
using ucfs_fuzz::Slot;
using ucfs_fuzz::UniversalForm;
using ucfs_fuzz::Work;

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
