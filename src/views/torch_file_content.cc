#include "ucfs/views/torch_file_content.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

namespace ucfs {

uint64_t TorchFileContent::memory() const {
  uint64_t bytes = sizeof(*this) + layout_.generated().capacity() +
                   (pickle_.use_count() > 1 ? 0 : pickle_->capacity()) +
                   layout_.segments().capacity() * sizeof(ZipSegment) +
                   storage_of_entry_.capacity() * sizeof(int);
  for (const ZipEntrySpec& e : layout_.entries()) bytes += sizeof(e) + e.name.capacity();
  for (const StorageSpec& st : storages_) {
    bytes += sizeof(st) + st.key.capacity() + st.runs.capacity() * sizeof(StorageRun) +
             st.run_starts.capacity() * sizeof(uint64_t);
  }
  return bytes;
}

TorchFileContent::TorchFileContent(std::shared_ptr<const StateMapper> mapper, ZipLayout layout,
                                   std::vector<StorageSpec> storages,
                                   std::vector<int> storage_of_entry,
                                   std::shared_ptr<const std::string> pickle)
    : mapper_(std::move(mapper)),
      layout_(std::move(layout)),
      storages_(std::move(storages)),
      storage_of_entry_(std::move(storage_of_entry)),
      pickle_(std::move(pickle)) {}

namespace {

uint32_t Crc32Of(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

// c10::hash_combine, which torch's serialization id is made with.
uint64_t HashCombine(uint64_t seed, uint64_t value) {
  return seed ^ (value + 0x9e3779b9 + (seed << 6) + (seed >> 2));
}

// What PyTorchStreamWriter::writeSerializationId computes once the other
// records are written: 20 digits combining std::hash of every record name,
// iterated as its std::unordered_set holds them (libstdc++, as torch's Linux
// builds and ucfs use), then 20 digits combining the CRC-32 of every data
// descriptor written. torch finds those by watching for writes that start
// with the descriptor signature, and a record's data is one write: a
// record whose data starts with that signature counts too (`heads`: the
// first 8 bytes of each record's data, where known).
std::string SerializationId(const std::vector<ZipEntrySpec>& entries, std::string_view prefix,
                            const std::vector<std::string>& heads) {
  std::unordered_set<std::string> names;
  uint64_t crcs = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const ZipEntrySpec& e = entries[i];
    names.insert(e.name.substr(prefix.size() + 1));
    const std::string& head = heads[i];
    if (head.size() >= 8 && head.starts_with("PK\x07\x08")) {
      crcs = HashCombine(crcs, (static_cast<uint64_t>(static_cast<uint8_t>(head[4]))) |
                                   (static_cast<uint64_t>(static_cast<uint8_t>(head[5])) << 8) |
                                   (static_cast<uint64_t>(static_cast<uint8_t>(head[6])) << 16) |
                                   (static_cast<uint64_t>(static_cast<uint8_t>(head[7])) << 24));
    }
    if (e.size > 0) crcs = HashCombine(crcs, e.crc32);  // empty records have no descriptor
  }
  uint64_t name_hash = 0;
  for (const std::string& name : names)
    name_hash = HashCombine(name_hash, std::hash<std::string>{}(name));
  char id[41];
  std::snprintf(id, sizeof id, "%020llu%020llu", static_cast<unsigned long long>(name_hash),
                static_cast<unsigned long long>(crcs));
  return id;
}

}  // namespace

Result<std::shared_ptr<TorchFileContent>> TorchFileContent::Make(
    std::shared_ptr<const Checkpoint> checkpoint, const std::string& prefix, std::string pickle,
    std::vector<StorageSpec> storages, SourceFiles* crc_reader) {
  const ContainerStyle style = checkpoint->container_style();
  return Make(std::shared_ptr<const StateMapper>(std::move(checkpoint)), style, prefix,
              std::move(pickle), std::move(storages), crc_reader);
}

Result<std::shared_ptr<TorchFileContent>> TorchFileContent::Make(
    std::shared_ptr<const StateMapper> checkpoint, const ContainerStyle& style,
    const std::string& prefix, std::string pickle, std::vector<StorageSpec> storages,
    SourceFiles* crc_reader) {
  return Make(std::move(checkpoint), style, prefix,
              std::make_shared<const std::string>(std::move(pickle)), std::move(storages),
              crc_reader);
}

Result<std::shared_ptr<TorchFileContent>> TorchFileContent::Make(
    std::shared_ptr<const StateMapper> checkpoint, const ContainerStyle& style,
    const std::string& prefix, std::shared_ptr<const std::string> pickle,
    std::vector<StorageSpec> storages, SourceFiles* crc_reader) {
  using Records = ContainerStyle::Records;
  // Reshard flats have a run per parameter: reads find theirs by bisection.
  for (auto& storage : storages) storage.FillRunStarts();
  // torch <= 2.6 writes storage records sorted by key as strings, later
  // torch in the order it pickled them: keys are "0", "1", ... in that order.
  auto before = [&](const StorageSpec& a, const StorageSpec& b) {
    if (style.records == Records::kTorch27 && a.key.size() != b.key.size()) {
      return a.key.size() < b.key.size();
    }
    return a.key < b.key;
  };
  // Keys already in order (torch >= 2.7, or few storages) skip the sort.
  if (!std::is_sorted(storages.begin(), storages.end(), before)) {
    std::sort(storages.begin(), storages.end(), before);
  }
  // With CRCs every byte is read now; so are the first bytes of each
  // storage, which the serialization id may need.
  std::vector<std::string> storage_heads(storages.size());
  if (crc_reader != nullptr) {
    for (size_t i = 0; i < storages.size(); ++i) {
      StorageSpec& storage = storages[i];
      std::vector<ReadPiece> pieces;
      UCFS_RETURN_IF_ERROR(PlanStorage(*checkpoint, storage, 0, storage.size(), &pieces));
      UCFS_ASSIGN_OR_RETURN(storage.crc32, crc_reader->Crc32(pieces));
      pieces.clear();
      UCFS_RETURN_IF_ERROR(
          PlanStorage(*checkpoint, storage, 0, std::min<uint64_t>(8, storage.size()), &pieces));
      UCFS_RETURN_IF_ERROR(crc_reader->Read(pieces, &storage_heads[i]));
    }
  }
  std::vector<ZipEntrySpec> entries;
  std::vector<std::string> heads;  // of each entry's data
  std::vector<int> storage_of_entry;
  const size_t entry_count = storages.size() + 6;
  entries.reserve(entry_count);
  heads.reserve(entry_count);
  storage_of_entry.reserve(entry_count);
  auto add_inline = [&](const std::string& name, std::string data) {
    ZipEntrySpec e;
    e.name = prefix + "/" + name;
    e.size = data.size();
    e.crc32 = crc_reader == nullptr ? 0 : Crc32Of(data);
    heads.push_back(data.substr(0, 8));
    e.inline_data = std::move(data);
    entries.push_back(std::move(e));
    storage_of_entry.push_back(kInlineEntry);
  };
  {
    ZipEntrySpec e;
    e.name = prefix + "/data.pkl";
    e.size = pickle->size();
    e.crc32 = crc_reader == nullptr ? 0 : Crc32Of(*pickle);
    heads.push_back(pickle->substr(0, 8));
    entries.push_back(std::move(e));
    storage_of_entry.push_back(kPickleEntry);
  }
  if (style.records == Records::kTorch27) {
    add_inline(".format_version", "1");
    add_inline(".storage_alignment", std::to_string(style.alignment));
  }
  if (style.records != Records::kTorch16) add_inline("byteorder", "little");
  for (size_t i = 0; i < storages.size(); ++i) {
    ZipEntrySpec e;
    e.name = prefix + "/data/" + storages[i].key;
    e.size = storages[i].size();
    e.crc32 = storages[i].crc32;
    entries.push_back(std::move(e));
    heads.push_back(storage_heads[i]);
    storage_of_entry.push_back(static_cast<int>(i));
  }
  add_inline("version", "3\n");
  if (style.records != Records::kTorch16) {
    add_inline(".data/serialization_id", SerializationId(entries, prefix, heads));
  }
  UCFS_ASSIGN_OR_RETURN(ZipLayout layout, ZipLayout::Plan(std::move(entries), style.alignment));
  return std::shared_ptr<TorchFileContent>(
      new TorchFileContent(std::move(checkpoint), std::move(layout), std::move(storages),
                           std::move(storage_of_entry), std::move(pickle)));
}

Status TorchFileContent::Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const {
  if (offset >= layout_.size()) return Status::OK();
  const uint64_t end = offset + std::min(length, layout_.size() - offset);
  for (size_t i = layout_.SegmentAt(offset); i < layout_.segments().size(); ++i) {
    const ZipSegment& seg = layout_.segments()[i];
    if (seg.offset >= end) break;
    const uint64_t a = std::max(offset, seg.offset);
    const uint64_t b = std::min(end, seg.offset + seg.length);
    if (seg.entry < 0) {
      ReadPiece p;
      p.kind = ReadPiece::Kind::kBytes;
      p.bytes = std::string_view(layout_.generated())
                    .substr(seg.generated_offset + (a - seg.offset), b - a);
      p.length = b - a;
      out->push_back(p);
    } else if (const int storage = storage_of_entry_[static_cast<size_t>(seg.entry)];
               storage == kPickleEntry) {
      ReadPiece p;
      p.kind = ReadPiece::Kind::kBytes;
      p.bytes = std::string_view(*pickle_).substr(seg.entry_offset + (a - seg.offset), b - a);
      p.length = b - a;
      out->push_back(p);
    } else {
      const uint64_t within = seg.entry_offset + (a - seg.offset);
      UCFS_RETURN_IF_ERROR(PlanStorage(*mapper_, storages_[static_cast<size_t>(storage)], within,
                                       within + (b - a), out));
    }
  }
  return Status::OK();
}

std::string ArchivePrefixFor(std::string_view file_name) {
  auto dot = file_name.rfind('.');
  return std::string(dot == std::string_view::npos || dot == 0 ? file_name
                                                               : file_name.substr(0, dot));
}

}  // namespace ucfs
