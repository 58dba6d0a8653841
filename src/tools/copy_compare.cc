#include "tools/copy_compare.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "ucfs/base/checked_math.h"

namespace ucfs {
namespace {

std::string Value(const char* element, DType dtype) {
  auto v = DecodeScalar(element, dtype);
  if (!v.ok()) return "?";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", *v);
  return buf;
}

bool SameElement(const char* a, const char* b, uint32_t size, DType dtype, ElementMatch match) {
  if (std::memcmp(a, b, size) == 0) return true;
  if (match == ElementMatch::kBytes) return false;
  auto x = DecodeScalar(a, dtype);
  auto y = DecodeScalar(b, dtype);
  return x.ok() && y.ok() && *x == *y;
}

}  // namespace

CopyComparer::CopyComparer(Env& env, std::function<SourceFile(uint32_t)> source,
                           const ProblemSink& problem)
    : source_(source), problem_(problem), files_(env, std::move(source)) {}

std::optional<CopyDifference> CopyComparer::Compare(const Subject& subject, uint64_t numel,
                                                    DType dtype, ElementMatch match,
                                                    uint64_t chunk_bytes, const MapCopy& map,
                                                    uint64_t* bytes_compared) {
  const uint32_t es = Info(dtype).element_size;
  const uint64_t bytes = CheckedMul<uint64_t>(numel, es).value_or(0);
  const uint64_t chunk = std::max<uint64_t>(chunk_bytes / es * es, es);
  CopyDifference diff;
  std::vector<Extent> extents;
  for (uint64_t begin = 0; begin < bytes; begin += chunk) {
    const uint64_t end = std::min(bytes, begin + chunk);
    extents.clear();
    if (!map(0, begin, end, &extents) || !Read(subject, extents, end - begin, &a_))
      return std::nullopt;
    extents.clear();
    if (!map(1, begin, end, &extents) || !Read(subject, extents, end - begin, &b_))
      return std::nullopt;
    *bytes_compared += 2 * (end - begin);
    for (uint64_t i = 0; i < end - begin; i += es) {
      if (SameElement(a_.data() + i, b_.data() + i, es, dtype, match)) continue;
      if (diff.differing++ == 0) {
        diff.first_element = (begin + i) / es;
        diff.first_values = Value(b_.data() + i, dtype) + " against " + Value(a_.data() + i, dtype);
      }
    }
  }
  return diff;
}

// Reads the extents into *out; false (reported, an unreadable file once)
// when they do not cover `length` bytes or a file cannot be read.
bool CopyComparer::Read(const Subject& subject, const std::vector<Extent>& extents, uint64_t length,
                        std::vector<char>* out) {
  uint64_t mapped = 0;
  for (const Extent& e : extents) mapped += e.length;
  if (mapped != length) {
    problem_(VerifyProblem::Kind::kStructure, subject.where,
             subject.what + ": bytes of a copy mapped to " + std::to_string(mapped) + " of the " +
                 std::to_string(length) + " asked for");
    return false;
  }
  out->resize(length);
  uint64_t at = 0;
  for (const Extent& e : extents) {
    auto file = files_.Get(e.file);
    Status st =
        file.ok() ? (*file)->ReadExact(e.offset, e.length, out->data() + at) : file.status();
    if (!st.ok()) {
      const std::string path = source_(e.file).path;
      if (failed_.insert(e.file).second) {
        problem_(VerifyProblem::Kind::kUnreadable, path, st.MessageAbout(path));
      }
      return false;
    }
    at += e.length;
  }
  return true;
}

}  // namespace ucfs
