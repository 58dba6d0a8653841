#include "ucfs/codec/torch_file.h"

#include <algorithm>
#include <optional>

#include "base/byte_order.h"
#include "ucfs/codec/legacy_format.h"

namespace ucfs {

namespace {

// The name of a record under `prefix` relative to it, or nullopt.
std::optional<std::string_view> RelativeName(const ZipRecord& rec, std::string_view prefix) {
  std::string_view name(rec.name);
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix ||
      name[prefix.size()] != '/') {
    return std::nullopt;
  }
  return name.substr(prefix.size() + 1);
}

// The first position in `order` whose name is `wanted`, or nullopt.
template <typename NameOf>
std::optional<uint32_t> FindSorted(const std::vector<uint32_t>& order, std::string_view wanted,
                                   const NameOf& name_of) {
  auto it = std::lower_bound(order.begin(), order.end(), wanted,
                             [&](uint32_t i, std::string_view w) { return name_of(i) < w; });
  if (it == order.end() || name_of(*it) != wanted) return std::nullopt;
  return *it;
}

}  // namespace

void TorchFileSummary::IndexNames() {
  record_order_.clear();
  small_order_.clear();
  indexed_ = false;
  if (records.size() > UINT32_MAX || small_records.size() > UINT32_MAX) return;
  for (uint32_t i = 0; i < records.size(); ++i) {
    if (RelativeName(records[i], prefix)) record_order_.push_back(i);
  }
  // Stable: of equal names the first comes first, as a linear search finds it.
  std::stable_sort(record_order_.begin(), record_order_.end(), [&](uint32_t a, uint32_t b) {
    return *RelativeName(records[a], prefix) < *RelativeName(records[b], prefix);
  });
  small_order_.resize(small_records.size());
  for (uint32_t i = 0; i < small_order_.size(); ++i) small_order_[i] = i;
  std::stable_sort(small_order_.begin(), small_order_.end(), [&](uint32_t a, uint32_t b) {
    return small_records[a].first < small_records[b].first;
  });
  indexed_ = true;
}

const ZipRecord* TorchFileSummary::Find(std::string_view relative_name) const {
  if (!indexed_) return FindRecord(records, prefix, relative_name);
  auto at = FindSorted(record_order_, relative_name,
                       [&](uint32_t i) { return *RelativeName(records[i], prefix); });
  return at ? &records[*at] : nullptr;
}

const std::string* TorchFileSummary::SmallRecord(std::string_view relative_name) const {
  if (!indexed_) {
    for (const auto& [name, bytes] : small_records) {
      if (name == relative_name) return &bytes;
    }
    return nullptr;
  }
  auto at = FindSorted(small_order_, relative_name,
                       [&](uint32_t i) { return std::string_view(small_records[i].first); });
  return at ? &small_records[*at].second : nullptr;
}

namespace {

Result<TorchFileSummary> Summarize(Env& env, const std::string& path) {
  TorchFileSummary s;
  s.path = path;
  UCFS_ASSIGN_OR_RETURN(auto file, env.Open(path));
  // The identity of the very file read (not of a path that may be renamed
  // over meanwhile), checked again when it has been read.
  UCFS_ASSIGN_OR_RETURN(FileStat at_open, file->OpenedStat());
  s.identity = at_open.identity;
  s.access = at_open.access;
  UCFS_ASSIGN_OR_RETURN(std::string head, file->ReadString(0, std::min<uint64_t>(file->Size(), 4)));
  if (LooksLikeLegacyTorchFile(head)) {
    UCFS_ASSIGN_OR_RETURN(LegacyArchive legacy, ReadLegacyArchive(*file));
    s.legacy = true;
    s.prefix = std::string(kLegacyPrefix);
    s.pickle = std::move(legacy.pickle);
    s.records = std::move(legacy.records);
  } else {
    UCFS_ASSIGN_OR_RETURN(ZipArchive archive, ZipArchive::Open(*file));
    const ZipRecord* pkl = archive.Find("data.pkl");
    if (pkl == nullptr) {
      return Status::Corruption(path + ": no data.pkl record in the archive");
    }
    UCFS_ASSIGN_OR_RETURN(s.pickle, ZipArchive::ReadRecord(*file, *pkl));
    s.prefix = archive.prefix();
    s.records = archive.records();
  }
  for (const auto& rec : s.records) {
    // Deflated small records too (an archive re-written by Python's
    // zipfile): the version record must be read whatever its method.
    if (rec.size > TorchFileSummary::kSmallRecord || rec.name == s.prefix + "/data.pkl") {
      continue;
    }
    UCFS_ASSIGN_OR_RETURN(std::string bytes, ZipArchive::ReadRecord(*file, rec));
    s.small_records.emplace_back(rec.name.substr(s.prefix.size() + 1), std::move(bytes));
  }
  UCFS_ASSIGN_OR_RETURN(FileStat after, file->Stat());
  if (!(after.identity == s.identity)) {
    return Status::IOError(path + ": changed while it was being read; try again");
  }
  s.IndexNames();
  return s;
}

}  // namespace

Result<TorchFileSummary> SummarizeTorchFile(Env& env, const std::string& path) {
  auto summary = Summarize(env, path);
  if (!summary.ok()) return summary.status().WithFile(path);
  return summary;
}

ContainerStyle StyleOf(const TorchFileSummary& s) {
  ContainerStyle style;
  if (s.legacy) return style;
  const std::string* alignment = s.SmallRecord(".storage_alignment");
  if (s.Find(".format_version") != nullptr && alignment != nullptr) {
    // ZipLayout pads with a 16-bit extra field: larger values cannot be
    // what torch wrote, and would be laid out wrongly, so they demote the
    // style to 2.1's, which torch reads by the headers.
    uint64_t value = 0;
    bool digits = !alignment->empty() && alignment->size() <= 6;
    for (char c : *alignment) {
      digits = digits && c >= '0' && c <= '9';
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    if (digits && value >= 1 && value <= 0xffff) {
      style.records = ContainerStyle::Records::kTorch27;
      style.alignment = value;
      return style;
    }
  }
  if (s.Find("byteorder") != nullptr || s.Find(".data/serialization_id") != nullptr) {
    style.records = ContainerStyle::Records::kTorch21;
  }
  return style;
}

Status CheckByteOrder(const TorchFileSummary& s) {
  const std::string* order = s.SmallRecord("byteorder");
  if (order == nullptr && s.Find("byteorder") == nullptr) return Status::OK();
  if (order != nullptr && *order == "little") return Status::OK();
  return Status::NotSupported(
      s.path + ": its storages are not little-endian (byteorder record " +
      (order == nullptr ? std::string("unreadable") : "'" + Printable(order->substr(0, 16)) + "'") +
      "); ucfs serves tensor bytes as they are stored and supports little-endian files only");
}

Status CheckTorchLoadable(const TorchFileSummary& s) {
  UCFS_RETURN_IF_ERROR(CheckByteOrder(s));
  if (s.legacy) return Status::OK();
  // PyTorchStreamReader prefers .data/version (torch >= 2.?) and falls back
  // to version; it parses with std::stoull: leading white space, digits,
  // anything after.
  const char* name = s.Find(".data/version") != nullptr ? ".data/version" : "version";
  const ZipRecord* rec = s.Find(name);
  if (rec == nullptr) {
    return Status::Corruption(s.path + ": no '" + name +
                              "' record (torch.load refuses a zip file without one)");
  }
  const std::string* bytes = s.SmallRecord(name);
  if (bytes == nullptr) {
    return Status::Corruption(s.path + ": its '" + name + "' record of " +
                              std::to_string(rec->size) + " bytes is not a version number");
  }
  std::string_view v(*bytes);
  while (!v.empty() && (v.front() == ' ' || (v.front() >= '\t' && v.front() <= '\r'))) {
    v.remove_prefix(1);
  }
  uint64_t version = 0;
  size_t digits = 0;
  while (digits < v.size() && v[digits] >= '0' && v[digits] <= '9' && digits < 19) {
    version = version * 10 + static_cast<uint64_t>(v[digits] - '0');
    ++digits;
  }
  if (digits == 0 || version < kMinTorchFileFormatVersion || version > kMaxTorchFileFormatVersion) {
    return Status::NotSupported(s.path + ": its '" + name + "' record says " +
                                Printable(bytes->substr(0, 24)) +
                                ", not a file format version torch.load supports (" +
                                std::to_string(kMinTorchFileFormatVersion) + " to " +
                                std::to_string(kMaxTorchFileFormatVersion) + ")");
  }
  return Status::OK();
}

std::string_view StyleName(const ContainerStyle& style) {
  switch (style.records) {
    case ContainerStyle::Records::kTorch16:
      return "torch 1.6-2.0";
    case ContainerStyle::Records::kTorch21:
      return "torch 2.1-2.6";
    case ContainerStyle::Records::kTorch27:
      return "torch >= 2.7";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Encoding: a version byte, then fields as little-endian integers and
// length-prefixed strings.

namespace {

constexpr char kSummaryVersion = 3;  // 3: ctime in the identity

}  // namespace

std::string EncodeSummary(const TorchFileSummary& s) {
  std::string out(1, kSummaryVersion);
  AppendLengthPrefixed(&out, s.path);
  AppendLE64(&out, s.identity.size);
  AppendLE64(&out, static_cast<uint64_t>(s.identity.mtime_ns));
  AppendLE64(&out, static_cast<uint64_t>(s.identity.ctime_ns));
  AppendLE64(&out, s.identity.inode);
  AppendLE64(&out, s.identity.device);
  AppendLE64(&out, s.legacy ? 1 : 0);
  AppendLengthPrefixed(&out, s.prefix);
  AppendLE64(&out, s.records.size());
  for (const auto& r : s.records) {
    AppendLengthPrefixed(&out, r.name);
    AppendLE64(&out, r.header_offset);
    AppendLE64(&out, r.data_offset);
    AppendLE64(&out, r.size);
    AppendLE64(&out, r.compressed_size);
    AppendLE64(&out, (static_cast<uint64_t>(r.method) << 32) | r.crc32);
  }
  AppendLengthPrefixed(&out, s.pickle);
  AppendLE64(&out, s.small_records.size());
  for (const auto& [name, bytes] : s.small_records) {
    AppendLengthPrefixed(&out, name);
    AppendLengthPrefixed(&out, bytes);
  }
  return out;
}

Result<TorchFileSummary> DecodeSummary(std::string_view bytes) {
  auto bad = [] { return Status::Corruption("index: malformed file summary"); };
  if (bytes.empty() || bytes[0] != kSummaryVersion) return bad();
  LEReader d(bytes.substr(1));
  TorchFileSummary s;
  uint64_t n = 0;
  uint64_t legacy = 0;
  if (!d.Str(&s.path) || !d.U64(&s.identity.size) || !d.I64(&s.identity.mtime_ns) ||
      !d.I64(&s.identity.ctime_ns) || !d.U64(&s.identity.inode) || !d.U64(&s.identity.device) ||
      !d.U64(&legacy) || legacy > 1 || !d.Str(&s.prefix) || !d.U64(&n)) {
    return bad();
  }
  s.legacy = legacy == 1;
  if (n > bytes.size()) return bad();
  s.records.resize(n);
  for (auto& r : s.records) {
    uint64_t method_crc = 0;
    if (!d.Str(&r.name) || !d.U64(&r.header_offset) || !d.U64(&r.data_offset) || !d.U64(&r.size) ||
        !d.U64(&r.compressed_size) || !d.U64(&method_crc)) {
      return bad();
    }
    r.method = static_cast<uint16_t>(method_crc >> 32);
    r.crc32 = static_cast<uint32_t>(method_crc);
  }
  if (!d.Str(&s.pickle) || !d.U64(&n) || n > bytes.size()) return bad();
  s.small_records.resize(n);
  for (auto& [name, data] : s.small_records) {
    if (!d.Str(&name) || !d.Str(&data)) return bad();
  }
  if (!d.empty()) return bad();
  s.IndexNames();
  return s;
}

}  // namespace ucfs
