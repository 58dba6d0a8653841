#include "tools/nonfinite_scan.h"

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "ucfs/base/checked_math.h"
#include "ucfs/base/parallel.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/vfs/source_files.h"

// The NaN/Inf scan is a plain loop over the elements' bits (an exponent of
// all ones is Inf or NaN), not LibTorch's isfinite. LibTorch would make the
// ucfs binary depend on a library of several hundred MB that the product,
// built on system libraries only, does not carry, and the bytes would still
// have to be read by ucfs and wrapped as tensors; the bit test is all that
// isfinite does, and the scan waits on the disk, not on this loop (0.2 s of
// CPU for the 2.6 GB benchmark). LibTorch earns its place in the tests, as
// an independent reader of the files.
static_assert(std::endian::native == std::endian::little,
              "tensor bytes are little-endian; ucfs reads them in place");

namespace ucfs {

namespace {

// Counts elements whose exponent bits are all ones: with a zero mantissa
// they are +-Inf, otherwise NaN. Branch-free so that the compiler
// vectorises it; 32-bit counters per block keep the vectors wide.
template <typename U, U kExponent, U kAbs>
NonFiniteTally CountBits(const char* p, uint64_t n) {
  NonFiniteTally t;
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  for (uint64_t begin = 0; begin < n; begin += kBlock) {
    const uint64_t end = std::min(n, begin + kBlock);
    uint32_t special = 0;
    uint32_t nan = 0;
    for (uint64_t i = begin; i < end; ++i) {
      U u;
      std::memcpy(&u, p + i * sizeof(U), sizeof(U));
      const U a = u & kAbs;
      special += a >= kExponent ? 1u : 0u;
      nan += a > kExponent ? 1u : 0u;
    }
    t.nan += nan;
    t.inf += special - nan;
  }
  return t;
}

template <typename U, U kExponent, U kAbs>
bool BitsNonFinite(const char* p) {
  U u;
  std::memcpy(&u, p, sizeof(U));
  return (u & kAbs) >= kExponent;
}

}  // namespace

NonFiniteTally CountNonFinite(const char* data, uint64_t count, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return CountBits<uint32_t, 0x7f800000u, 0x7fffffffu>(data, count);
    case DType::kFloat64:
      return CountBits<uint64_t, 0x7ff0000000000000u, 0x7fffffffffffffffu>(data, count);
    case DType::kFloat16:
      return CountBits<uint16_t, 0x7c00u, 0x7fffu>(data, count);
    case DType::kBFloat16:
      return CountBits<uint16_t, 0x7f80u, 0x7fffu>(data, count);
    default:
      return {};
  }
}

bool IsNonFinite(const char* element, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return BitsNonFinite<uint32_t, 0x7f800000u, 0x7fffffffu>(element);
    case DType::kFloat64:
      return BitsNonFinite<uint64_t, 0x7ff0000000000000u, 0x7fffffffffffffffu>(element);
    case DType::kFloat16:
      return BitsNonFinite<uint16_t, 0x7c00u, 0x7fffu>(element);
    case DType::kBFloat16:
      return BitsNonFinite<uint16_t, 0x7f80u, 0x7fffu>(element);
    default:
      return false;
  }
}

namespace {

using Kind = VerifyProblem::Kind;

// A byte range of one rank's slice of one state of one param: valid
// elements only.
struct Segment {
  uint32_t file = 0;  // Checkpoint source index (the rank: optimizer files)
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t param = 0;
  uint32_t state = 0;
  uint64_t first_element = 0;  // index in the full param of the segment's first element
};

// One pread of the scan, covering (parts of) segments [seg_begin, seg_end).
struct Chunk {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  size_t seg_begin = 0;
  size_t seg_end = 0;
};

struct SegmentTally {
  uint64_t nan = 0;
  uint64_t inf = 0;
  uint64_t first_element = UINT64_MAX;
};

class NonFiniteScan {
 public:
  NonFiniteScan(Env& env, const VerifyOptions& options, const std::string& tag_dir,
                VerifyReport* report, const ProblemSink& problem)
      : env_(env), options_(options), tag_dir_(tag_dir), report_(report), problem_(problem) {}

  void Run(const Checkpoint& c) {
    std::vector<Segment> segments = FloatSegments(c);
    std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
      return std::tie(a.file, a.offset) < std::tie(b.file, b.offset);
    });
    uint64_t total = 0;
    for (const Segment& s : segments) total += s.length;
    report_->scanned = true;
    if (total == 0) return;
    if (options_.on_scan_start) options_.on_scan_start(total);

    std::vector<uint32_t> element_size(c.states().size());
    for (size_t s = 0; s < c.states().size(); ++s) {
      element_size[s] = Info(c.states()[s].dtype).element_size;
    }
    // In file order: the workers read neighbouring chunks of one file at
    // once, which keeps the disk's queue full (measured on the 2.6 GB
    // benchmark, cold: faster than giving each worker a file of its own).
    const std::vector<Chunk> chunks = MakeChunks(segments, element_size);

    // Every optimizer file the segments read, opened once, and the very
    // file whose pickle Checkpoint::Open read (SourceFiles checks its
    // identity): a file replaced meanwhile is reported, not scanned.
    SourceFiles sources(env_, [&c](uint32_t i) { return c.sources()[i]; });
    std::vector<bool> failed(c.sources().size());
    const std::vector<const RandomAccessFile*> open = OpenFiles(c, segments, sources, &failed);

    std::map<size_t, SegmentTally> tallies;
    report_->bytes_scanned = ScanChunks(c, segments, element_size, chunks, open, failed, &tallies);
    Tally(c, segments, tallies);
  }

  // The valid elements of every floating-point state of every param, as
  // byte ranges of the files, in param and state order.
  std::vector<Segment> FloatSegments(const Checkpoint& c) {
    std::vector<Segment> segments;
    for (size_t p = 0; p < c.params().size(); ++p) {
      for (const SubGroupState& gs : c.StatesOf(p)) {
        const size_t s = gs.state;
        const DType dtype = c.states()[s].dtype;
        // Integer states (none in Adam) have no NaN to look for.
        if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && dtype != DType::kFloat16 &&
            dtype != DType::kBFloat16) {
          continue;
        }
        const uint32_t es = Info(dtype).element_size;
        std::vector<Extent> extents;
        // Open bounds numel to 2^58: the product fits.
        const uint64_t bytes = CheckedMul<uint64_t>(c.params()[p].numel, es).value_or(0);
        Status st = c.MapState(p, s, 0, bytes, &extents);
        if (!st.ok()) {
          problem_(Kind::kStructure, tag_dir_, st.MessageAbout(tag_dir_));
          continue;
        }
        uint64_t element = 0;
        for (const Extent& e : extents) {
          segments.push_back({e.file, e.offset, e.length, static_cast<uint32_t>(p),
                              static_cast<uint32_t>(s), element});
          element += e.length / es;
        }
      }
    }
    return segments;
  }

  // The file of each source the segments read, by source index (nullptr
  // for the others); a file that cannot be opened is reported and marked
  // in *failed.
  std::vector<const RandomAccessFile*> OpenFiles(const Checkpoint& c,
                                                 const std::vector<Segment>& segments,
                                                 SourceFiles& sources, std::vector<bool>* failed) {
    std::vector<const RandomAccessFile*> open(c.sources().size());
    for (const Segment& s : segments) {
      if (open[s.file] != nullptr || (*failed)[s.file]) continue;
      auto f = sources.Get(s.file);
      if (!f.ok()) {
        problem_(Kind::kUnreadable, c.sources()[s.file].path,
                 f.status().MessageAbout(c.sources()[s.file].path));
        (*failed)[s.file] = true;
        continue;
      }
      open[s.file] = *f;
      // Larger readahead: each file is read front to back.
      if (open[s.file]->fd() >= 0) {
        ::posix_fadvise(open[s.file]->fd(), 0, 0, POSIX_FADV_SEQUENTIAL);
      }
    }
    return open;
  }

  // Reads the chunks in parallel, adding each segment's NaN and Inf to
  // *tallies; returns the bytes scanned. A file that fails a read is
  // reported once, unless `failed` marks it reported already.
  uint64_t ScanChunks(const Checkpoint& c, const std::vector<Segment>& segments,
                      const std::vector<uint32_t>& element_size, const std::vector<Chunk>& chunks,
                      const std::vector<const RandomAccessFile*>& open,
                      const std::vector<bool>& failed, std::map<size_t, SegmentTally>* tallies) {
    std::mutex mu;  // guards *tallies, read_failed and problem_ calls
    std::vector<bool> read_failed = failed;
    std::atomic<uint64_t> scanned{0};
    std::vector<std::vector<char>> buffers(WorkerCount(chunks.size(), options_.threads));
    ParallelFor(chunks.size(), options_.threads, [&](size_t i, unsigned worker) {
      std::vector<char>& buf = buffers[worker];
      if (buf.empty()) buf.resize(ChunkBytes());
      const Chunk& ch = chunks[i];
      if (!open[ch.file]) return;
      if (!ReadChunk(c, *open[ch.file], ch, buf.data(), mu, &read_failed)) return;
      const uint64_t bytes = CountChunk(c, segments, element_size, ch, buf.data(), mu, tallies);
      scanned += bytes;
      if (options_.on_bytes) options_.on_bytes(bytes);
    });
    return scanned;
  }

  // Reads chunk `ch` of `file` into `buf`. A failed or short read returns
  // false, reported under `mu` unless *read_failed marks its file already.
  bool ReadChunk(const Checkpoint& c, const RandomAccessFile& file, const Chunk& ch, char* buf,
                 std::mutex& mu, std::vector<bool>* read_failed) const {
    size_t got = 0;
    Status st = file.Read(ch.offset, ch.length, buf, &got);
    if (st.ok() && got < ch.length) {
      st = Status::Corruption("truncated since it was opened: wanted " + std::to_string(ch.length) +
                              " bytes at offset " + std::to_string(ch.offset) + ", read " +
                              std::to_string(got));
    }
    if (!st.ok()) {
      std::lock_guard lock(mu);
      if (!(*read_failed)[ch.file]) {
        (*read_failed)[ch.file] = true;
        problem_(Kind::kUnreadable, c.sources()[ch.file].path,
                 st.MessageAbout(c.sources()[ch.file].path));
      }
      return false;
    }
    return true;
  }

  // Adds the NaN and Inf of each segment's part in chunk `ch`, read into
  // `buf`, to *tallies (under `mu`); returns the bytes of those parts.
  static uint64_t CountChunk(const Checkpoint& c, const std::vector<Segment>& segments,
                             const std::vector<uint32_t>& element_size, const Chunk& ch,
                             const char* buf, std::mutex& mu,
                             std::map<size_t, SegmentTally>* tallies) {
    uint64_t bytes = 0;
    for (size_t j = ch.seg_begin; j < ch.seg_end; ++j) {
      const Segment& seg = segments[j];
      const uint64_t lo = std::max(seg.offset, ch.offset);
      const uint64_t hi = std::min(seg.offset + seg.length, ch.offset + ch.length);
      if (hi <= lo) continue;
      bytes += hi - lo;
      const DType dtype = c.states()[seg.state].dtype;
      const uint32_t es = element_size[seg.state];
      const char* data = buf + (lo - ch.offset);
      const uint64_t count = (hi - lo) / es;
      const NonFiniteTally t = CountNonFinite(data, count, dtype);
      if (t.nan == 0 && t.inf == 0) continue;
      uint64_t first = 0;
      while (first < count && !IsNonFinite(data + first * es, dtype)) ++first;
      std::lock_guard lock(mu);
      SegmentTally& tally = (*tallies)[j];
      tally.nan += t.nan;
      tally.inf += t.inf;
      tally.first_element =
          std::min(tally.first_element, seg.first_element + (lo - seg.offset) / es + first);
    }
    return bytes;
  }

  // Cuts the sorted segments into reads of at most chunk_bytes: a read
  // spans segments of one file that are close together (the padding
  // between params, a zip header between states), and a long segment is
  // split at an element boundary.
  std::vector<Chunk> MakeChunks(const std::vector<Segment>& segments,
                                const std::vector<uint32_t>& element_size) const {
    constexpr uint64_t kMaxGap = 64 << 10;
    const uint64_t max_bytes = ChunkBytes();
    std::vector<Chunk> chunks;
    size_t i = 0;
    uint64_t done = 0;  // bytes of segments[i] already in earlier chunks
    while (i < segments.size()) {
      Chunk ch;
      ch.file = segments[i].file;
      ch.offset = segments[i].offset + done;
      ch.seg_begin = i;
      const uint64_t limit = ch.offset + max_bytes;
      uint64_t end = ch.offset;
      while (i < segments.size() && segments[i].file == ch.file) {
        const Segment& s = segments[i];
        const uint64_t begin = s.offset + done;
        if (begin > end + kMaxGap || begin >= limit) break;
        const uint64_t seg_end = s.offset + s.length;
        if (seg_end <= limit) {
          end = seg_end;
          ++i;
          done = 0;
          continue;
        }
        // Split at the last element boundary inside the limit.
        const uint32_t es = element_size[s.state];
        const uint64_t split = s.offset + (limit - s.offset) / es * es;
        if (split > begin) {
          end = split;
          done = split - s.offset;
          ch.seg_end = i + 1;
        }
        break;
      }
      ch.seg_end = std::max(ch.seg_end, i);
      ch.length = end - ch.offset;
      chunks.push_back(ch);
    }
    return chunks;
  }

  // At least a few elements of the widest dtype.
  uint64_t ChunkBytes() const { return std::max<uint64_t>(options_.chunk_bytes, 64); }

  void Tally(const Checkpoint& c, const std::vector<Segment>& segments,
             const std::map<size_t, SegmentTally>& tallies) {
    // By param, state, rank.
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, SegmentTally> by;
    for (const auto& [j, t] : tallies) {
      const Segment& s = segments[j];
      SegmentTally& sum = by[{s.param, s.state, s.file}];
      sum.nan += t.nan;
      sum.inf += t.inf;
      sum.first_element = std::min(sum.first_element, t.first_element);
    }
    for (const auto& [key, t] : by) {
      const auto [p, s, file] = key;
      const ParamInfo& param = c.params()[p];
      const std::string& path = c.sources()[file].path;
      if (report_->nonfinite.empty() || report_->nonfinite.back().param != param.name ||
          report_->nonfinite.back().state != c.states()[s].name) {
        report_->nonfinite.push_back({0, param.name, c.states()[s].name, 0, 0, {}});
      }
      NonFiniteCount& n = report_->nonfinite.back();
      n.nan += t.nan;
      n.inf += t.inf;
      n.ranks.push_back({file, path, t.nan, t.inf, t.first_element});
      std::string what;
      if (t.nan > 0) what += std::to_string(t.nan) + " NaN";
      if (t.inf > 0) what += std::string(what.empty() ? "" : ", ") + std::to_string(t.inf) + " Inf";
      problem_(Kind::kNonFinite, path,
               "'" + Printable(param.name) + "' " + Printable(c.states()[s].name) + ": " + what +
                   " in this rank's slice (the first is element " +
                   std::to_string(t.first_element) + " of the full parameter's " +
                   std::to_string(param.numel) + ")");
    }
  }

  Env& env_;
  const VerifyOptions& options_;
  const std::string& tag_dir_;
  VerifyReport* report_;
  const ProblemSink& problem_;
};

}  // namespace

void ScanNonFinite(Env& env, const Checkpoint& c, const VerifyOptions& options,
                   const std::string& tag_dir, VerifyReport* report, const ProblemSink& problem) {
  NonFiniteScan(env, options, tag_dir, report, problem).Run(c);
}

}  // namespace ucfs
