// Two copies of one tensor that must be equal, compared chunk by chunk from
// their source extents: tensor-parallel replicas (replica_check.h) and
// ZeRO-1/2 Muon's whole-param momentum copies (whole_param_replicas.h).
// Internal to tools/.
#ifndef UCFS_TOOLS_COPY_COMPARE_H_
#define UCFS_TOOLS_COPY_COMPARE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tools/file_checks.h"
#include "ucfs/base/env.h"
#include "ucfs/base/source_file.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs {

// How two elements must agree.
enum class ElementMatch : uint8_t {
  // Bit for bit: copies of one update, where a -0 against +0 is a copy
  // that was made otherwise.
  kBytes,
  // As torch.equal takes them: -0 equals +0; a NaN equals the same NaN.
  kValues,
};

// Where two copies differ (differing == 0: they agree).
struct CopyDifference {
  uint64_t differing = 0;      // elements
  uint64_t first_element = 0;  // of the first that differs
  std::string first_values;    // "b against a" at that element
};

class CopyComparer {
 public:
  // `source(i)` names source i of the extents to read; an unreadable file
  // is reported to `problem` once.
  CopyComparer(Env& env, std::function<SourceFile(uint32_t)> source, const ProblemSink& problem);

  // Fetches bytes [begin, end) of copy 0 (a) or 1 (b) as extents; a
  // failure is reported by the callback, which returns false.
  using MapCopy =
      std::function<bool(int copy, uint64_t begin, uint64_t end, std::vector<Extent>* extents)>;

  // What is compared, for messages: `what` names the tensor ("'w' exp_avg"),
  // `where` the file or directory a mapping problem is reported against.
  struct Subject {
    std::string what;
    std::string where;
  };

  // Compares `numel` elements of `dtype` in chunks of about `chunk_bytes`,
  // adding the bytes read to *bytes_compared. nullopt when a copy could not
  // be read (already reported).
  std::optional<CopyDifference> Compare(const Subject& subject, uint64_t numel, DType dtype,
                                        ElementMatch match, uint64_t chunk_bytes,
                                        const MapCopy& map, uint64_t* bytes_compared);

 private:
  bool Read(const Subject& subject, const std::vector<Extent>& extents, uint64_t length,
            std::vector<char>* out);

  std::function<SourceFile(uint32_t)> source_;
  const ProblemSink& problem_;
  SourceFiles files_;
  std::set<uint32_t> failed_;
  std::vector<char> a_, b_;
};

}  // namespace ucfs

#endif  // UCFS_TOOLS_COPY_COMPARE_H_
