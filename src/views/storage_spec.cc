#include "ucfs/views/storage_spec.h"

#include <algorithm>
#include <utility>

namespace ucfs {

uint64_t StorageSpec::size() const {
  uint64_t n = 0;
  for (const auto& r : runs) n += r.length;
  return n;
}

StorageRun StateRun(uint32_t shard, uint32_t param, uint32_t state, uint64_t state_offset,
                    uint64_t length) {
  StorageRun run;
  run.kind = StorageRun::Kind::kState;
  run.shard = shard;
  run.param = param;
  run.state = state;
  run.state_offset = state_offset;
  run.length = length;
  return run;
}

StorageRun FrozenRun(uint32_t shard, uint32_t frozen, uint64_t length) {
  StorageRun run;
  run.kind = StorageRun::Kind::kFrozen;
  run.shard = shard;
  run.param = frozen;
  run.length = length;
  return run;
}

StorageRun ComputedRun(std::shared_ptr<const ComputedBytes> bytes, uint64_t length) {
  StorageRun run;
  run.kind = StorageRun::Kind::kComputed;
  run.length = length;
  run.computed = std::move(bytes);
  return run;
}

void AppendZeros(uint64_t bytes, std::vector<StorageRun>* runs) {
  if (bytes == 0) return;
  if (!runs->empty() && runs->back().kind == StorageRun::Kind::kZeros) {
    runs->back().length += bytes;
    return;
  }
  StorageRun z;
  z.kind = StorageRun::Kind::kZeros;
  z.length = bytes;
  runs->push_back(z);
}

void StorageSpec::FillRunStarts() {
  run_starts.clear();
  uint64_t at = 0;
  for (const auto& run : runs) {
    run_starts.push_back(at);
    at += run.length;
  }
}

void AppendSourcePieces(const std::vector<Extent>& extents, std::vector<ReadPiece>* out) {
  for (const Extent& e : extents) {
    ReadPiece p;
    p.kind = ReadPiece::Kind::kSource;
    p.source = e.file;
    p.offset = e.offset;
    p.length = e.length;
    out->push_back(p);
  }
}

namespace {

// Read pieces of bytes [a, b) of a gathered run: the runs of each block
// that [a, b) covers, in the order of their place in the run.
Status PlanGather(const StateMapper& mapper, const Gather& gather, uint64_t a, uint64_t b,
                  std::vector<ReadPiece>* out) {
  struct Covered {
    uint64_t at;  // offset in the run
    const Gather::Block* block;
    uint64_t from;  // offset in the slice's state
    uint64_t length;
  };
  std::vector<Covered> covered;
  for (const Gather::Block& block : gather.blocks) {
    if (block.count == 0 || b <= block.start) continue;
    // The runs i with start + i * period in [a - length + 1, b).
    uint64_t first = 0, end = 1;
    if (block.period > 0) {
      first =
          a >= block.start + block.length ? (a - block.start - block.length) / block.period + 1 : 0;
      end = std::min(block.count, (b - block.start - 1) / block.period + 1);
    }
    for (uint64_t i = first; i < end; ++i) {
      const uint64_t run = block.start + i * block.period;
      const uint64_t lo = std::max(a, run), hi = std::min(b, run + block.length);
      if (lo >= hi) continue;
      covered.push_back(
          {lo, &block, block.slice_start + i * block.slice_period + (lo - run), hi - lo});
    }
  }
  std::sort(covered.begin(), covered.end(),
            [](const Covered& x, const Covered& y) { return x.at < y.at; });
  uint64_t at = a;  // the blocks tile the run (LayOutAffineMap checked it)
  for (const Covered& c : covered) {
    if (c.at != at) return Status::Corruption("a gathered run leaves bytes unread or read twice");
    at += c.length;
  }
  if (at != b) return Status::Corruption("a gathered run leaves bytes unread");
  std::vector<Extent> extents;
  for (const Covered& c : covered) {
    extents.clear();
    UCFS_RETURN_IF_ERROR(mapper.MapShardState(c.block->shard, c.block->param, gather.state, c.from,
                                              c.from + c.length, &extents));
    AppendSourcePieces(extents, out);
  }
  return Status::OK();
}

}  // namespace

Status PlanStorage(const StateMapper& mapper, const StorageSpec& storage, uint64_t begin,
                   uint64_t end, std::vector<ReadPiece>* out) {
  std::vector<Extent> extents;
  // Start at the run holding `begin`.
  size_t first = static_cast<size_t>(
      std::upper_bound(storage.run_starts.begin(), storage.run_starts.end(), begin) -
      storage.run_starts.begin());
  first = first == 0 ? 0 : first - 1;
  for (size_t i = first; i < storage.runs.size(); ++i) {
    const StorageRun& run = storage.runs[i];
    const uint64_t run_start = storage.run_starts[i];
    const uint64_t run_end = run_start + run.length;
    const uint64_t a = std::max(begin, run_start);
    const uint64_t b = std::min(end, run_end);
    if (a < b) {
      ReadPiece p;
      p.length = b - a;
      switch (run.kind) {
        case StorageRun::Kind::kZeros:
          p.kind = ReadPiece::Kind::kZeros;
          out->push_back(p);
          break;
        case StorageRun::Kind::kSource:
          p.kind = ReadPiece::Kind::kSource;
          p.source = run.source;
          p.offset = run.source_offset + (a - run_start);
          out->push_back(p);
          break;
        case StorageRun::Kind::kComputed: {
          auto bytes = std::make_shared<std::string>();
          UCFS_RETURN_IF_ERROR(run.computed->Read(a - run_start, b - a, bytes.get()));
          if (bytes->size() != b - a) {
            return Status::Corruption("computed " + std::to_string(bytes->size()) +
                                      " bytes where " + std::to_string(b - a) + " were asked");
          }
          p.kind = ReadPiece::Kind::kBytes;
          p.bytes = *bytes;
          p.owner = std::move(bytes);
          out->push_back(p);
          break;
        }
        case StorageRun::Kind::kGathered:
          UCFS_RETURN_IF_ERROR(PlanGather(mapper, *run.gather, a - run_start, b - run_start, out));
          break;
        case StorageRun::Kind::kState:
        case StorageRun::Kind::kFrozen: {
          extents.clear();
          const uint64_t from = run.state_offset + (a - run_start);
          UCFS_RETURN_IF_ERROR(
              run.kind == StorageRun::Kind::kState
                  ? mapper.MapShardState(run.shard, run.param, run.state, from, from + (b - a),
                                         &extents)
                  : mapper.MapShardFrozen(run.shard, run.param, from, from + (b - a), &extents));
          AppendSourcePieces(extents, out);
          break;
        }
      }
    }
    if (run_end >= end) break;
  }
  return Status::OK();
}

}  // namespace ucfs
