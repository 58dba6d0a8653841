#include "ucfs/views/storage_spec.h"

#include <algorithm>

namespace ucfs {

uint64_t StorageSpec::size() const {
  uint64_t n = 0;
  for (const auto& r : runs) n += r.length;
  return n;
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
        case StorageRun::Kind::kInterleaved: {
          const Interleave& il = *run.interleave;
          const uint64_t t_count = il.slices.size();
          for (uint64_t at = a - run_start; at < b - run_start;) {
            const uint64_t k = at / il.chunk;  // the k-th chunk: slice k % T, row k / T
            const uint64_t within = at - k * il.chunk;
            const uint64_t take = std::min(il.chunk - within, (b - run_start) - at);
            const Interleave::Slice& slice = il.slices[k % t_count];
            const uint64_t from = (k / t_count) * il.chunk + within;
            extents.clear();
            UCFS_RETURN_IF_ERROR(mapper.MapShardState(slice.shard, slice.param, il.state, from,
                                                      from + take, &extents));
            for (const Extent& e : extents) {
              out->push_back({ReadPiece::Kind::kSource, {}, e.file, e.offset, e.length, nullptr});
            }
            at += take;
          }
          break;
        }
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
