#include "ucfs/codec/zip.h"

#include <zlib.h>

#include <algorithm>

#include "base/byte_order.h"
#include "ucfs/base/checked_math.h"

namespace ucfs {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;     // PK\3\4
constexpr uint32_t kCentralHeaderSig = 0x02014b50;   // PK\1\2
constexpr uint32_t kEndSig = 0x06054b50;             // PK\5\6
constexpr uint32_t kZip64EndSig = 0x06064b50;        // PK\6\6
constexpr uint32_t kZip64LocatorSig = 0x07064b50;    // PK\6\7
constexpr uint32_t kDataDescriptorSig = 0x08074b50;  // PK\7\8
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr uint32_t kMax32 = 0xffffffffu;
constexpr uint16_t kFlagDataDescriptor = 0x0008;
constexpr uint16_t kFlagUtf8 = 0x0800;
// Bounds that keep a hostile directory from costing unbounded memory.
constexpr uint64_t kMaxEntries = 1u << 22;
constexpr uint64_t kMaxCentralDirectory = uint64_t{1} << 30;

Status Bad(const RandomAccessFile& file, const std::string& what) {
  return Status::Corruption(file.path() + ": not a valid torch.save zip: " + what);
}

// Finds the classic end-of-central-directory record in the file's tail.
Result<uint64_t> FindEnd(const RandomAccessFile& file, std::string* tail, uint64_t* tail_start) {
  uint64_t size = file.Size();
  uint64_t want = std::min<uint64_t>(size, kEndSize + 0xffff);
  *tail_start = size - want;
  UCFS_ASSIGN_OR_RETURN(*tail, file.ReadString(*tail_start, want));
  for (size_t i = tail->size() >= kEndSize ? tail->size() - kEndSize + 1 : 0; i-- > 0;) {
    if (LoadLE32(tail->data() + i) == kEndSig) return *tail_start + i;
  }
  return Bad(file, "no end-of-central-directory record (truncated, or not a zip file)");
}

// Rejects a file that is not a zip, naming torch's legacy format when it is that.
Status CheckZipMagic(const RandomAccessFile& file) {
  if (file.Size() < 4) return Bad(file, "file is only " + std::to_string(file.Size()) + " bytes");
  UCFS_ASSIGN_OR_RETURN(std::string magic, file.ReadString(0, 4));
  if (LoadLE32(magic.data()) != kLocalHeaderSig) {
    if (static_cast<unsigned char>(magic[0]) == 0x80) {
      // SummarizeTorchFile reads these with ReadLegacyArchive.
      return Status::NotSupported(file.path() +
                                  ": not a zip archive but torch's legacy (non-zip) format, "
                                  "written with _use_new_zipfile_serialization=False");
    }
    return Bad(file, "does not start with a zip local header");
  }
  return Status::OK();
}

// Where the end records say the central directory is.
struct CentralDirectory {
  uint64_t entries = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
  uint64_t end_pos = 0;  // the end record it must precede (the zip64 one, if any)
};

// Replaces `dir` by the zip64 end record's when a zip64 locator precedes the
// classic end record.
Status ReadZip64End(const RandomAccessFile& file, CentralDirectory* dir) {
  const uint64_t end_pos = dir->end_pos;
  if (end_pos < kZip64LocatorSize) return Status::OK();
  UCFS_ASSIGN_OR_RETURN(std::string loc,
                        file.ReadString(end_pos - kZip64LocatorSize, kZip64LocatorSize));
  if (LoadLE32(loc.data()) != kZip64LocatorSig) return Status::OK();
  uint64_t z64_pos = LoadLE64(loc.data() + 8);
  if (z64_pos > end_pos - kZip64LocatorSize ||
      end_pos - kZip64LocatorSize - z64_pos < kZip64EndSize) {
    return Bad(file, "zip64 end record offset " + std::to_string(z64_pos) + " out of range");
  }
  UCFS_ASSIGN_OR_RETURN(std::string z64, file.ReadString(z64_pos, kZip64EndSize));
  if (LoadLE32(z64.data()) != kZip64EndSig) {
    return Bad(file, "no zip64 end record at offset " + std::to_string(z64_pos));
  }
  dir->entries = LoadLE64(z64.data() + 32);
  dir->size = LoadLE64(z64.data() + 40);
  dir->offset = LoadLE64(z64.data() + 48);
  dir->end_pos = z64_pos;
  return Status::OK();
}

// The central directory the end records describe.
Result<CentralDirectory> ReadEndRecords(const RandomAccessFile& file) {
  std::string tail;
  uint64_t tail_start = 0;
  UCFS_ASSIGN_OR_RETURN(uint64_t end_pos, FindEnd(file, &tail, &tail_start));
  const char* end = tail.data() + (end_pos - tail_start);
  CentralDirectory dir;
  dir.entries = LoadLE16(end + 10);
  dir.size = LoadLE32(end + 12);
  dir.offset = LoadLE32(end + 16);
  dir.end_pos = end_pos;
  if (LoadLE16(end + 4) != 0 || LoadLE16(end + 6) != 0) return Bad(file, "multi-disk archive");

  // torch always writes the zip64 end records; prefer them when present.
  UCFS_RETURN_IF_ERROR(ReadZip64End(file, &dir));
  return dir;
}

// Refuses a directory outside the file or too big to read.
Status CheckDirectoryBounds(const RandomAccessFile& file, const CentralDirectory& dir) {
  if (dir.offset > dir.end_pos || dir.size > dir.end_pos - dir.offset) {
    return Bad(file, "central directory [" + std::to_string(dir.offset) + ", +" +
                         std::to_string(dir.size) + ") lies outside the file (truncated?)");
  }
  if (dir.entries > kMaxEntries || dir.size > kMaxCentralDirectory) {
    return Bad(file, "central directory too large (" + std::to_string(dir.entries) + " entries)");
  }
  if (!CheckedMul<uint64_t>(dir.entries, kCentralHeaderSize, dir.size)) {
    return Bad(file, std::to_string(dir.entries) + " entries cannot fit a central directory of " +
                         std::to_string(dir.size) + " bytes");
  }
  return Status::OK();
}

// zip64 extra: the overflowed values, in the order size, csize, offset.
Status ReadExtraFields(const RandomAccessFile& file, const char* extra, size_t extra_len,
                       ZipRecord* rec) {
  for (size_t e = 0; e + 4 <= extra_len;) {
    uint16_t id = LoadLE16(extra + e);
    uint16_t len = LoadLE16(extra + e + 2);
    if (e + 4 + len > extra_len)
      return Bad(file, "extra field of '" + Printable(rec->name) + "' overruns");
    if (id == 0x0001) {
      const char* z = extra + e + 4;
      size_t zl = len;
      auto take = [&](uint64_t* v) -> bool {
        if (*v != kMax32) return true;
        if (zl < 8) return false;
        *v = LoadLE64(z);
        z += 8;
        zl -= 8;
        return true;
      };
      if (!take(&rec->size) || !take(&rec->compressed_size) || !take(&rec->header_offset)) {
        return Bad(file, "zip64 extra field of '" + Printable(rec->name) + "' is too short");
      }
    }
    e += 4 + len;
  }
  return Status::OK();
}

// Central directory entry `i`, at `*pos` of the directory `cd` (which starts
// at `cd_offset` of the file); advances `*pos` past it.
Result<ZipRecord> ReadCentralEntry(const RandomAccessFile& file, const std::string& cd,
                                   uint64_t cd_offset, uint64_t i, size_t* pos) {
  if (*pos + kCentralHeaderSize > cd.size() || LoadLE32(cd.data() + *pos) != kCentralHeaderSig) {
    return Bad(file, "central directory entry " + std::to_string(i) + " at offset " +
                         std::to_string(cd_offset + *pos) + " is malformed");
  }
  const char* h = cd.data() + *pos;
  ZipRecord rec;
  uint16_t flags = LoadLE16(h + 8);
  rec.method = LoadLE16(h + 10);
  rec.crc32 = LoadLE32(h + 16);
  rec.compressed_size = LoadLE32(h + 20);
  rec.size = LoadLE32(h + 24);
  size_t name_len = LoadLE16(h + 28);
  size_t extra_len = LoadLE16(h + 30);
  size_t comment_len = LoadLE16(h + 32);
  rec.header_offset = LoadLE32(h + 42);
  if (*pos + kCentralHeaderSize + name_len + extra_len + comment_len > cd.size()) {
    return Bad(file, "central directory entry " + std::to_string(i) + " overruns the directory");
  }
  rec.name.assign(h + kCentralHeaderSize, name_len);
  if (flags & 0x0001) {
    return Status::NotSupported(file.path() + ": record '" + Printable(rec.name) +
                                "' is encrypted");
  }
  UCFS_RETURN_IF_ERROR(ReadExtraFields(file, h + kCentralHeaderSize + name_len, extra_len, &rec));
  *pos += kCentralHeaderSize + name_len + extra_len + comment_len;
  return rec;
}

// Refuses compression ucfs cannot read and sizes that do not add up; adds the
// record's size to `*data_bytes`.
Status CheckMethodAndSizes(const RandomAccessFile& file, const ZipRecord& rec,
                           uint64_t* data_bytes) {
  if (rec.method != 0 && rec.method != 8) {
    return Status::NotSupported(file.path() + ": record '" + Printable(rec.name) +
                                "' uses compression method " + std::to_string(rec.method));
  }
  auto total = CheckedAdd(*data_bytes, rec.size, kMaxZipDataBytes);
  if (!total) {
    return Bad(file, "record '" + Printable(rec.name) + "' claims " + std::to_string(rec.size) +
                         " bytes, making the records more than 2^61 bytes in all");
  }
  *data_bytes = *total;
  if (rec.method == 0 && rec.compressed_size != rec.size) {
    return Bad(file,
               "stored record '" + Printable(rec.name) + "' has different sizes in the directory");
  }
  return Status::OK();
}

// Sets the record's data_offset: the data starts after the local header,
// whose name and extra lengths may differ from the central directory's.
Status LocateRecordData(const RandomAccessFile& file, uint64_t cd_offset, ZipRecord* rec) {
  if (rec->header_offset > cd_offset || cd_offset - rec->header_offset < kLocalHeaderSize) {
    return Bad(file, "record '" + Printable(rec->name) + "' header offset " +
                         std::to_string(rec->header_offset) + " is out of range");
  }
  UCFS_ASSIGN_OR_RETURN(std::string lh, file.ReadString(rec->header_offset, kLocalHeaderSize));
  if (LoadLE32(lh.data()) != kLocalHeaderSig) {
    return Bad(file, "no local header for '" + Printable(rec->name) + "' at offset " +
                         std::to_string(rec->header_offset));
  }
  uint64_t local_name_len = LoadLE16(lh.data() + 26);
  uint64_t local_extra_len = LoadLE16(lh.data() + 28);
  if (local_name_len != rec->name.size()) {
    return Bad(file, "local header of '" + Printable(rec->name) + "' disagrees with the directory");
  }
  // header_offset < cd_offset and the lengths are 16-bit: no wrap.
  rec->data_offset = rec->header_offset + kLocalHeaderSize + local_name_len + local_extra_len;
  if (rec->data_offset > cd_offset || rec->compressed_size > cd_offset - rec->data_offset) {
    return Bad(file, "data of record '" + Printable(rec->name) + "' [" +
                         std::to_string(rec->data_offset) + ", +" +
                         std::to_string(rec->compressed_size) +
                         ") runs past the central directory (truncated?)");
  }
  return Status::OK();
}

// The top folder every record is inside, named by the first record.
Result<std::string> TopFolder(const RandomAccessFile& file, const std::vector<ZipRecord>& records) {
  if (records.empty()) return Bad(file, "archive has no records");
  const std::string& first = records.front().name;
  auto slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    return Bad(file, "record '" + Printable(first) + "' is not inside a top folder");
  }
  std::string prefix = first.substr(0, slash);
  for (const auto& rec : records) {
    if (rec.name.compare(0, slash + 1, first, 0, slash + 1) != 0) {
      return Bad(file, "record '" + Printable(rec.name) + "' is outside the top folder '" +
                           Printable(prefix) + "'");
    }
  }
  return prefix;
}

}  // namespace

Result<ZipArchive> ZipArchive::Open(const RandomAccessFile& file) {
  UCFS_RETURN_IF_ERROR(CheckZipMagic(file));
  UCFS_ASSIGN_OR_RETURN(CentralDirectory dir, ReadEndRecords(file));
  UCFS_RETURN_IF_ERROR(CheckDirectoryBounds(file, dir));

  UCFS_ASSIGN_OR_RETURN(std::string cd, file.ReadString(dir.offset, dir.size));
  ZipArchive archive;
  archive.cd_offset_ = dir.offset;
  archive.records_.reserve(dir.entries);
  size_t pos = 0;
  uint64_t data_bytes = 0;  // the records' sizes, summed (kMaxZipDataBytes)
  for (uint64_t i = 0; i < dir.entries; ++i) {
    UCFS_ASSIGN_OR_RETURN(ZipRecord rec, ReadCentralEntry(file, cd, dir.offset, i, &pos));
    UCFS_RETURN_IF_ERROR(CheckMethodAndSizes(file, rec, &data_bytes));
    UCFS_RETURN_IF_ERROR(LocateRecordData(file, dir.offset, &rec));
    archive.records_.push_back(std::move(rec));
  }
  UCFS_ASSIGN_OR_RETURN(archive.prefix_, TopFolder(file, archive.records_));
  return archive;
}

const ZipRecord* FindRecord(const std::vector<ZipRecord>& records, std::string_view prefix,
                            std::string_view relative_name) {
  for (const auto& rec : records) {
    std::string_view name(rec.name);
    if (name.size() == prefix.size() + 1 + relative_name.size() &&
        name.substr(0, prefix.size()) == prefix && name[prefix.size()] == '/' &&
        name.substr(prefix.size() + 1) == relative_name) {
      return &rec;
    }
  }
  return nullptr;
}

Result<std::string> ZipArchive::ReadRecord(const RandomAccessFile& file, const ZipRecord& record,
                                           uint64_t max_bytes) {
  if (record.size > max_bytes) {
    return Status::InvalidArgument(file.path() + ": record '" + Printable(record.name) + "' is " +
                                   std::to_string(record.size) + " bytes, more than " +
                                   std::to_string(max_bytes));
  }
  if (record.method != 0) {
    const uint64_t most =
        CheckedMulAdd(record.compressed_size, kMaxInflateRatio, kInflateSlack).value_or(UINT64_MAX);
    if (record.size > most) {
      return Status::Corruption(file.path() + ": record '" + Printable(record.name) +
                                "' claims to inflate " + std::to_string(record.compressed_size) +
                                " bytes to " + std::to_string(record.size) + ", more than " +
                                std::to_string(kMaxInflateRatio) + " times its size (a zip bomb?)");
    }
  }
  UCFS_ASSIGN_OR_RETURN(std::string raw,
                        file.ReadString(record.data_offset, record.compressed_size));
  if (record.method == 0) return raw;
  // Deflated (archives re-written by Python's zipfile): inflate raw deflate.
  std::string out(record.size, '\0');
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return Status::IOError("zlib inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&zs, Z_FINISH);
  uint64_t produced = zs.total_out;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || produced != record.size) {
    return Status::Corruption(file.path() + ": record '" + Printable(record.name) +
                              "' does not inflate to its recorded size");
  }
  return out;
}

// ---------------------------------------------------------------------------
// ZipLayout

namespace {

// Refuses an entry that cannot be planned; adds its size to `*data_bytes`.
Status CheckEntry(const ZipEntrySpec& e, uint64_t* data_bytes) {
  if (e.inline_data && e.inline_data->size() != e.size) {
    return Status::InvalidArgument("zip entry '" + Printable(e.name) +
                                   "': size differs from its data");
  }
  // The same bound as the reader's (kMaxZipDataBytes), so every archive
  // that opens plans, and the cursor, headers included, stays below 2^62.
  auto total = CheckedAdd(*data_bytes, e.size, kMaxZipDataBytes);
  if (!total) {
    return Status::InvalidArgument("zip entry '" + Printable(e.name) + "' of " +
                                   std::to_string(e.size) +
                                   " bytes makes the records more than 2^61 bytes in all");
  }
  *data_bytes = *total;
  if (e.name.empty() || e.name.size() > 0xffff) {
    return Status::InvalidArgument("zip entry name of " + std::to_string(e.name.size()) + " bytes");
  }
  return Status::OK();
}

// The local header of `e` at `header_offset`, padded so its data starts aligned.
std::string LocalHeader(const ZipEntrySpec& e, uint64_t header_offset, uint16_t flags,
                        uint64_t alignment) {
  const bool big_size = e.size >= kMax32;
  const bool big_offset = header_offset >= kMax32;
  std::string extra;
  if (big_size || big_offset) {
    std::string z;
    if (big_size) {
      AppendLE64(&z, e.size);
      AppendLE64(&z, 0);  // compressed size: not known yet to a streaming writer
    }
    if (big_offset) AppendLE64(&z, header_offset);
    AppendLE16(&extra, 0x0001);
    AppendLE16(&extra, static_cast<uint16_t>(z.size()));
    extra += z;
  }
  // torch's padding: an "FB" field sized so the data starts aligned.
  uint64_t start = header_offset + kLocalHeaderSize + e.name.size() + extra.size() + 4;
  uint64_t pad = (alignment - start % alignment) % alignment;
  AppendLE16(&extra, 0x4246);  // "FB"
  AppendLE16(&extra, static_cast<uint16_t>(pad));
  extra.append(pad, 'Z');

  std::string lh;
  AppendLE32(&lh, kLocalHeaderSig);
  AppendLE16(&lh, 0);  // version needed (miniz: 0 for stored)
  AppendLE16(&lh, flags);
  AppendLE16(&lh, 0);  // method: stored
  AppendLE32(&lh, 0);  // dos time and date
  AppendLE32(&lh, 0);  // crc: in the descriptor
  AppendLE32(&lh, 0);  // compressed size
  AppendLE32(&lh, 0);  // uncompressed size
  AppendLE16(&lh, static_cast<uint16_t>(e.name.size()));
  AppendLE16(&lh, static_cast<uint16_t>(extra.size()));
  lh += e.name;
  lh += extra;
  return lh;
}

// The data descriptor after `e`'s data: zip64 sizes when its local header
// (at `header_offset`) has a zip64 extra.
std::string DataDescriptor(const ZipEntrySpec& e, uint64_t header_offset) {
  const bool big_size = e.size >= kMax32;
  const bool big_offset = header_offset >= kMax32;
  std::string dd;
  AppendLE32(&dd, kDataDescriptorSig);
  AppendLE32(&dd, e.crc32);
  if (big_size || big_offset) {
    AppendLE64(&dd, e.size);
    AppendLE64(&dd, e.size);
  } else {
    AppendLE32(&dd, static_cast<uint32_t>(e.size));
    AppendLE32(&dd, static_cast<uint32_t>(e.size));
  }
  return dd;
}

// The central directory header of `e`, whose local header is at `off`.
std::string CentralHeader(const ZipEntrySpec& e, uint64_t off, uint16_t flags) {
  std::string z;
  if (e.size >= kMax32) {
    AppendLE64(&z, e.size);
    AppendLE64(&z, e.size);
  }
  if (off >= kMax32) AppendLE64(&z, off);
  std::string extra;
  if (!z.empty()) {
    AppendLE16(&extra, 0x0001);
    AppendLE16(&extra, static_cast<uint16_t>(z.size()));
    extra += z;
  }
  std::string ch;
  AppendLE32(&ch, kCentralHeaderSig);
  AppendLE16(&ch, 0);  // version made by
  AppendLE16(&ch, 0);  // version needed
  AppendLE16(&ch, flags);
  AppendLE16(&ch, 0);  // method
  AppendLE32(&ch, 0);  // time, date
  AppendLE32(&ch, e.crc32);
  AppendLE32(&ch, static_cast<uint32_t>(std::min<uint64_t>(e.size, kMax32)));
  AppendLE32(&ch, static_cast<uint32_t>(std::min<uint64_t>(e.size, kMax32)));
  AppendLE16(&ch, static_cast<uint16_t>(e.name.size()));
  AppendLE16(&ch, static_cast<uint16_t>(extra.size()));
  AppendLE16(&ch, 0);  // comment
  AppendLE16(&ch, 0);  // disk
  AppendLE16(&ch, 0);  // internal attributes
  AppendLE32(&ch, 0);  // external attributes
  AppendLE32(&ch, static_cast<uint32_t>(std::min<uint64_t>(off, kMax32)));
  ch += e.name;
  ch += extra;
  return ch;
}

// The zip64 end record (written at `z64_offset`), its locator and the classic
// end record, for `n` entries.
std::string EndRecords(uint64_t n, uint64_t cd_offset, uint64_t cd_size, uint64_t z64_offset) {
  std::string end;
  AppendLE32(&end, kZip64EndSig);
  AppendLE64(&end, kZip64EndSize - 12);
  AppendLE16(&end, 0x031e);  // made by: unix, 3.0
  AppendLE16(&end, 45);      // needed: 4.5 (zip64)
  AppendLE32(&end, 0);
  AppendLE32(&end, 0);
  AppendLE64(&end, n);
  AppendLE64(&end, n);
  AppendLE64(&end, cd_size);
  AppendLE64(&end, cd_offset);
  AppendLE32(&end, kZip64LocatorSig);
  AppendLE32(&end, 0);
  AppendLE64(&end, z64_offset);
  AppendLE32(&end, 1);
  AppendLE32(&end, kEndSig);
  AppendLE16(&end, 0);
  AppendLE16(&end, 0);
  AppendLE16(&end, static_cast<uint16_t>(std::min<uint64_t>(n, 0xffff)));
  AppendLE16(&end, static_cast<uint16_t>(std::min<uint64_t>(n, 0xffff)));
  AppendLE32(&end, static_cast<uint32_t>(std::min<uint64_t>(cd_size, kMax32)));
  AppendLE32(&end, static_cast<uint32_t>(std::min<uint64_t>(cd_offset, kMax32)));
  AppendLE16(&end, 0);
  return end;
}

}  // namespace

Result<ZipLayout> ZipLayout::Plan(std::vector<ZipEntrySpec> entries, uint64_t alignment) {
  if (alignment == 0 || alignment > 0xffff) {
    return Status::InvalidArgument("zip alignment must be in [1, 65535]");
  }
  ZipLayout layout;
  layout.entries_ = std::move(entries);
  std::string& gen = layout.generated_;
  // Room for what is generated, in one allocation: the generated bytes of
  // a rank file with thousands of records grew by copying otherwise.
  // (Headers, descriptor and padding of each entry, its name twice, its
  // inline bytes; zip64 extras and the end records may exceed it.)
  uint64_t expected = 128;
  for (const ZipEntrySpec& e : layout.entries_) {
    const uint64_t inline_bytes = e.inline_data ? e.inline_data->size() : 0;
    expected += kLocalHeaderSize + kCentralHeaderSize + 8 + 24 + alignment + 2 * e.name.size() +
                inline_bytes;
  }
  if (expected <= (uint64_t{1} << 30)) gen.reserve(expected);
  uint64_t cursor = 0;
  // Appends generated bytes at the cursor as (part of) one segment.
  auto emit = [&](const std::string& bytes) {
    if (bytes.empty()) return;
    auto& segs = layout.segments_;
    if (!segs.empty() && segs.back().entry < 0 &&
        segs.back().generated_offset + segs.back().length == gen.size()) {
      segs.back().length += bytes.size();
    } else {
      segs.push_back({cursor, bytes.size(), -1, gen.size(), 0});
    }
    gen += bytes;
    cursor += bytes.size();
  };

  struct Central {
    uint64_t header_offset;
    uint16_t flags;
  };
  std::vector<Central> central;
  central.reserve(layout.entries_.size());
  uint64_t data_bytes = 0;  // the entries' sizes, summed (kMaxZipDataBytes)
  for (size_t i = 0; i < layout.entries_.size(); ++i) {
    const ZipEntrySpec& e = layout.entries_[i];
    UCFS_RETURN_IF_ERROR(CheckEntry(e, &data_bytes));
    const uint64_t header_offset = cursor;
    // miniz sets the data-descriptor flag only for non-empty records.
    const uint16_t flags = kFlagUtf8 | (e.size > 0 ? kFlagDataDescriptor : 0);
    emit(LocalHeader(e, header_offset, flags, alignment));

    layout.data_offsets_.push_back(cursor);
    if (e.inline_data) {
      emit(*e.inline_data);
    } else if (e.size > 0) {
      layout.segments_.push_back({cursor, e.size, static_cast<int64_t>(i), 0, 0});
      cursor += e.size;
    }

    if (flags & kFlagDataDescriptor) emit(DataDescriptor(e, header_offset));
    central.push_back({header_offset, flags});
  }

  const uint64_t cd_offset = cursor;
  for (size_t i = 0; i < layout.entries_.size(); ++i) {
    emit(CentralHeader(layout.entries_[i], central[i].header_offset, central[i].flags));
  }
  const uint64_t cd_size = cursor - cd_offset;
  emit(EndRecords(layout.entries_.size(), cd_offset, cd_size, cursor));
  layout.size_ = cursor;
  // Inline records live on in generated_ only, not twice in every built
  // file the reshard view caches. (A torch file's pickle is no inline
  // record: TorchFileContent serves it from its own, maybe shared, copy.)
  for (ZipEntrySpec& e : layout.entries_) e.inline_data.reset();
  return layout;
}

size_t ZipLayout::SegmentAt(uint64_t offset) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), offset,
                             [](uint64_t off, const ZipSegment& s) { return off < s.offset; });
  return static_cast<size_t>(it - segments_.begin()) - 1;
}

}  // namespace ucfs
