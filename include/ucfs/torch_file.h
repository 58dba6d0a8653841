// What ucfs keeps of a torch.save file: everything but its tensor data.
//
// A TorchFileSummary holds the zip records (where each storage's bytes
// are), data.pkl, and the bytes of tiny records such as the 0-dim Adam
// `step` tensors. It is all the checkpoint model needs from a rank file, so
// a summary cached in the index (index.h) lets a second mount build the
// whole model without opening a shard.
#ifndef UCFS_TORCH_FILE_H_
#define UCFS_TORCH_FILE_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/env.h"
#include "ucfs/status.h"
#include "ucfs/zip.h"

namespace ucfs {

struct TorchFileSummary {
  // Records up to this size are kept whole in `small_records`.
  static constexpr uint64_t kSmallRecord = 64;

  std::string path;
  FileIdentity identity;
  // torch's legacy non-zip format (legacy_format.h): `records` are its
  // storages, `pickle` its object pickle, `prefix` kLegacyPrefix.
  bool legacy = false;
  std::string prefix;
  std::vector<ZipRecord> records;
  std::string pickle;                                              // data.pkl
  std::vector<std::pair<std::string, std::string>> small_records;  // relative name -> bytes

  // The record "<prefix>/<relative_name>", or nullptr.
  const ZipRecord* Find(std::string_view relative_name) const;
  // The bytes of a small stored record, or nullptr.
  const std::string* SmallRecord(std::string_view relative_name) const;
};

// Reads a file's zip directory, data.pkl and small records (or the same of
// a legacy-format file).
Result<TorchFileSummary> SummarizeTorchFile(Env& env, const std::string& path);

// A compact binary encoding, for the index.
std::string EncodeSummary(const TorchFileSummary& summary);
Result<TorchFileSummary> DecodeSummary(std::string_view bytes);

// Where summaries come from: the files themselves, or a cache of them.
class TorchFileSource {
 public:
  virtual ~TorchFileSource() = default;
  virtual Result<TorchFileSummary> Summarize(const std::string& path) = 0;
  // Files summarised without opening them (served from a cache).
  virtual uint64_t cache_hits() const { return 0; }
};

class DirectTorchFileSource final : public TorchFileSource {
 public:
  explicit DirectTorchFileSource(Env& env) : env_(env) {}
  Result<TorchFileSummary> Summarize(const std::string& path) override {
    return SummarizeTorchFile(env_, path);
  }

 private:
  Env& env_;
};

}  // namespace ucfs

#endif  // UCFS_TORCH_FILE_H_
