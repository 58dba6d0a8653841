// What ucfs keeps of a torch.save file: everything but its tensor data.
//
// A TorchFileSummary holds the zip records (where each storage's bytes
// are), data.pkl, and the bytes of tiny records such as the 0-dim Adam
// `step` tensors. It is all the checkpoint model needs from a rank file, so
// a summary cached in the index (index.h) lets a second mount build the
// whole model without opening a shard.
#ifndef UCFS_CODEC_TORCH_FILE_H_
#define UCFS_CODEC_TORCH_FILE_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/codec/zip.h"

namespace ucfs {

struct TorchFileSummary {
  // Records up to this size are kept whole in `small_records`.
  static constexpr uint64_t kSmallRecord = 64;

  std::string path;
  FileIdentity identity;
  // Who may read it, as stat tells now (not kept in the index).
  FileAccess access;
  // torch's legacy non-zip format (legacy_format.h): `records` are its
  // storages, `pickle` its object pickle, `prefix` kLegacyPrefix.
  bool legacy = false;
  std::string prefix;
  std::vector<ZipRecord> records;
  std::string pickle;                                              // data.pkl
  std::vector<std::pair<std::string, std::string>> small_records;  // relative name -> bytes

  // The record "<prefix>/<relative_name>", or nullptr (the first of equal
  // names).
  const ZipRecord* Find(std::string_view relative_name) const;
  // The bytes of a small stored record, or nullptr.
  const std::string* SmallRecord(std::string_view relative_name) const;

  // Sorts the names for Find and SmallRecord, which then take O(log n), not
  // O(n): an optimizer file with one flat group per parameter holds
  // thousands of records, each looked up by name. Summaries made by
  // SummarizeTorchFile and DecodeSummary are indexed; one built by hand
  // and not indexed is searched linearly. Call again after changing
  // `records`, `prefix` or `small_records`.
  void IndexNames();

 private:
  // Positions in `records` of those under `prefix`, and in `small_records`,
  // in (relative name, position) order; empty until IndexNames.
  std::vector<uint32_t> record_order_;
  std::vector<uint32_t> small_order_;
  bool indexed_ = false;
};

// The torch.save container layout of the torch that wrote a file, as far as
// its records tell. Files ucfs synthesises from a checkpoint are laid out
// the same way, so that they are what that torch would have written.
struct ContainerStyle {
  enum class Records : uint8_t {
    // data.pkl, data/<key> in string order (0, 1, 10, 2), version: torch
    // 1.6-2.0, and ucfs's choice for legacy-format sources.
    kTorch16,
    // data.pkl, byteorder, data/<key> in string order, version,
    // .data/serialization_id: torch 2.1-2.6.
    kTorch21,
    // data.pkl, .format_version, .storage_alignment, byteorder, data/<key>
    // in numeric order, version, .data/serialization_id: torch >= 2.7,
    // which may compute record offsets from this exact layout.
    kTorch27,
  };
  Records records = Records::kTorch16;
  uint64_t alignment = 64;  // of every record's data; .storage_alignment (>= 2.7)
  bool operator==(const ContainerStyle&) const = default;
};

ContainerStyle StyleOf(const TorchFileSummary& summary);

// OK for files whose storages are little-endian, as ucfs serves them: an
// error naming the file for a `byteorder` record (torch >= 2.1) other than
// "little".
Status CheckByteOrder(const TorchFileSummary& summary);

// torch.load's own checks of a zip file's records, which ucfs must not be
// more lenient than (a file ucfs serves or calls OK must load): the version
// record (`.data/version`, else `version`) is a number in torch's supported
// range, kMinSupportedFileFormatVersion..kMaxSupportedFileFormatVersion of
// caffe2/serialize/versions.h, and the byte order is little-endian
// (CheckByteOrder). Legacy (non-zip) files have no version record.
inline constexpr uint64_t kMinTorchFileFormatVersion = 1;
inline constexpr uint64_t kMaxTorchFileFormatVersion = 10;
Status CheckTorchLoadable(const TorchFileSummary& summary);
std::string_view StyleName(const ContainerStyle& style);

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

#endif  // UCFS_CODEC_TORCH_FILE_H_
