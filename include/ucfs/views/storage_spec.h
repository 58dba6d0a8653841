// A storage of a torch.save file ucfs synthesises, described rather than
// stored: runs of a parameter's checkpoint state, of source file ranges, of
// zeros, or of bytes ucfs computes on first read. PlanStorage maps a byte
// range of it to read pieces, so sizes are known at stat time and every
// read maps to source extents.
#ifndef UCFS_VIEWS_STORAGE_SPEC_H_
#define UCFS_VIEWS_STORAGE_SPEC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/periodic_runs.h"
#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

class ComputedBytes;

// A contiguous part of a storage's bytes.
struct StorageRun {
  enum class Kind : uint8_t {
    kState,     // bytes [state_offset, +length) of a param's full state (Checkpoint::MapState)
    kSource,    // bytes [source_offset, +length) of a source file
    kZeros,     // padding
    kFrozen,    // bytes [state_offset, +length) of frozen param `param`'s full value (MapFrozen)
    kComputed,  // `computed`: values ucfs computes range by range, on every read
    kGathered,  // `gather`: runs of T slices' states, periodic (a row-parallel merge)
  };
  Kind kind = Kind::kZeros;
  uint64_t length = 0;
  uint32_t shard = 0;  // kState, kFrozen: the shard group (StateMapper) of `param`
  uint32_t param = 0;
  uint32_t state = 0;
  uint64_t state_offset = 0;
  uint32_t source = 0;
  uint64_t source_offset = 0;
  std::shared_ptr<const ComputedBytes> computed;
  std::shared_ptr<const struct Gather> gather;
};

// A kState run: bytes [state_offset, + length) of state `state` of param
// `param` of shard group `shard`.
StorageRun StateRun(uint32_t shard, uint32_t param, uint32_t state, uint64_t state_offset,
                    uint64_t length);
// A kFrozen run: bytes [0, length) of frozen param `frozen` of `shard`.
StorageRun FrozenRun(uint32_t shard, uint32_t frozen, uint64_t length);
// A kComputed run of all of `bytes`' `length` bytes.
StorageRun ComputedRun(std::shared_ptr<const ComputedBytes> bytes, uint64_t length);

// Runs of tensor-parallel slices' states repeated with a period: the
// merged storage of a param whose slices interleave (concatenated along a
// dimension past the first, equal sub-params past dim 0, an affine map).
// Each block's runs are bytes of the run's storage (the whole) from bytes
// of its slice's state. The blocks' runs tile the storage; a read maps only
// the runs it covers, so a row-parallel weight is a few blocks, not a run
// per row.
struct Gather {
  struct Block : PeriodicRuns {
    uint32_t shard = 0;  // the slice: its shard group (StateMapper), its param there
    uint32_t param = 0;
  };
  uint32_t state = 0;
  std::vector<Block> blocks;
};

// Bytes computed from source bytes for each read, never kept: a param's
// fp32 master weights cast to bfloat16 (hf_weights.h), as large as the
// model; a buffer or frozen param widened to float32. The source bytes are
// read through SourceFiles, identity-checked. Thread-safe.
class ComputedBytes {
 public:
  virtual ~ComputedBytes() = default;
  // Appends bytes [offset, offset + length) of the run to `out`.
  virtual Status Read(uint64_t offset, uint64_t length, std::string* out) const = 0;
};

// Appends `bytes` of zero padding to `runs` (none for 0), one run with any
// padding before it.
void AppendZeros(uint64_t bytes, std::vector<StorageRun>* runs);

struct StorageSpec {
  std::string key;               // the record is "<prefix>/data/<key>"
  std::vector<StorageRun> runs;  // in order; their lengths add up to the storage size
  uint32_t crc32 = 0;
  // run_starts[i]: offset of runs[i] in the storage (FillRunStarts).
  std::vector<uint64_t> run_starts;

  uint64_t size() const;
  void FillRunStarts();
};

// Read pieces of the source bytes `extents` name (a StateMapper's extents
// index the same sources as the view's pieces), appended to `out`.
void AppendSourcePieces(const std::vector<Extent>& extents, std::vector<ReadPiece>* out);

// Read pieces of bytes [begin, end) of a storage (run_starts filled), its
// state and frozen runs mapped through `mapper` (a Checkpoint).
Status PlanStorage(const StateMapper& mapper, const StorageSpec& storage, uint64_t begin,
                   uint64_t end, std::vector<ReadPiece>* out);

}  // namespace ucfs

#endif  // UCFS_VIEWS_STORAGE_SPEC_H_
