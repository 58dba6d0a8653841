// What checkpoint_fuzz mutates: the fixtures (tests/data/fixtures, read once
// into memory) and the checkpoint being mutated, one Slot per rank file.
//
// checkpoint12_fuzz is the same target over the ZeRO-1/2 fixtures (one
// mp_rank_00_model_states.pt, flat param-group partitions), checkpoint_fuzz
// over the ZeRO-3 ones: every source file of the target is compiled with or
// without UCFS_FUZZ_FLAT_GROUPS. Two targets, so that the inputs of each
// (byte 0 picks a fixture) keep meaning the checkpoint they were found on.
#ifndef UCFS_TESTS_FUZZ_CHECKPOINT_WORK_H_
#define UCFS_TESTS_FUZZ_CHECKPOINT_WORK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mutation_support.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "view_reader.h"

namespace ucfs_fuzz {

#ifdef UCFS_FUZZ_FLAT_GROUPS
constexpr bool kFlatGroups = true;
#else
constexpr bool kFlatGroups = false;
#endif

constexpr uint32_t kMaxWorld = 8;          // kAddRank stops here
inline const std::string kRoot = "/ckpt";  // the checkpoint root in the MemEnv

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

// This target's fixtures (fails when there are none).
const std::vector<Fixture>& Fixtures();

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

// The files an op's target byte names: bit 0-1 optim / model / both, bit 2
// every rank (else rank `target >> 3`).
std::vector<Slot*> Targets(Work& w, uint8_t target);
// One file: bit 0 model (else optim), rank `target >> 1`.
Slot& OneTarget(Work& w, uint8_t target);

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_CHECKPOINT_WORK_H_
