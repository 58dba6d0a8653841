#include "ucfs/checkpoint/tag_snapshot.h"

#include <zlib.h>

#include "base/byte_order.h"

namespace ucfs {

namespace {

constexpr std::string_view kMagic = "UCFS-IDX";
// The entries' kinds, in the order they are written.
enum Kind : uint64_t { kListing = 1, kStat = 2, kFile = 3, kSummary = 4 };
// A DirEntry's flags.
constexpr uint64_t kIsDir = 1, kIsSymlink = 2;

uint32_t Crc32(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes an unsigned int length: in chunks (a snapshot may pass 4 GiB).
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

void AppendIdentity(std::string* out, const FileIdentity& id) {
  AppendLE64(out, id.size);
  AppendLE64(out, static_cast<uint64_t>(id.mtime_ns));
  AppendLE64(out, static_cast<uint64_t>(id.ctime_ns));
  AppendLE64(out, id.inode);
}

bool ReadIdentity(LEReader& r, FileIdentity* id) {
  return r.U64(&id->size) && r.I64(&id->mtime_ns) && r.I64(&id->ctime_ns) && r.U64(&id->inode);
}

void AppendEntry(std::string* out, Kind kind, const std::string& path, std::string_view payload) {
  AppendLE64(out, kind);
  AppendLengthPrefixed(out, path);
  AppendLengthPrefixed(out, payload);
}

std::string ListingPayload(const std::vector<DirEntry>& entries) {
  std::string p;
  AppendLE64(&p, entries.size());
  for (const DirEntry& e : entries) {
    AppendLengthPrefixed(&p, e.name);
    AppendLE64(&p, (e.is_dir ? kIsDir : 0) | (e.is_symlink ? kIsSymlink : 0));
  }
  return p;
}

std::string StatPayload(const FileStat& stat) {
  std::string p;
  AppendIdentity(&p, stat.identity);
  AppendLE64(&p, stat.access.mode);
  AppendLE64(&p, stat.access.uid);
  AppendLE64(&p, stat.access.gid);
  AppendLE64(&p, stat.is_dir ? 1 : 0);
  return p;
}

bool ReadListing(std::string_view payload, std::vector<DirEntry>* entries) {
  LEReader r(payload);
  uint64_t n = 0;
  // Each entry takes at least 16 bytes: a count past that is a lie.
  if (!r.U64(&n) || n > r.left() / 16) return false;
  entries->resize(n);
  for (DirEntry& e : *entries) {
    uint64_t flags = 0;
    if (!r.Str(&e.name) || !r.U64(&flags) || flags > (kIsDir | kIsSymlink)) return false;
    e.is_dir = (flags & kIsDir) != 0;
    e.is_symlink = (flags & kIsSymlink) != 0;
  }
  return r.empty();
}

bool ReadStat(std::string_view payload, FileStat* stat) {
  LEReader r(payload);
  uint64_t mode = 0, uid = 0, gid = 0, is_dir = 0;
  if (!ReadIdentity(r, &stat->identity) || !r.U64(&mode) || !r.U64(&uid) || !r.U64(&gid) ||
      !r.U64(&is_dir) || mode > 07777 || uid > UINT32_MAX || gid > UINT32_MAX || is_dir > 1) {
    return false;
  }
  stat->access = FileAccess{static_cast<uint32_t>(mode), static_cast<uint32_t>(uid),
                            static_cast<uint32_t>(gid)};
  stat->is_dir = is_dir == 1;
  return r.empty();
}

}  // namespace

FileIdentity PortableIdentity(FileIdentity identity) {
  identity.device = 0;
  return identity;
}

std::string EncodeTagSnapshot(const TagSnapshot& s) {
  std::string out(kMagic);
  AppendLE64(&out, TagSnapshot::kFormatVersion);
  AppendLengthPrefixed(&out, s.tag);
  AppendIdentity(&out, s.tag_dir_identity);
  AppendLE64(&out, s.listings.size() + s.stats.size() + s.files.size() + s.summaries.size());
  for (const auto& [path, entries] : s.listings) {
    AppendEntry(&out, kListing, path, ListingPayload(entries));
  }
  for (const auto& [path, stat] : s.stats) AppendEntry(&out, kStat, path, StatPayload(stat));
  for (const auto& [path, bytes] : s.files) AppendEntry(&out, kFile, path, bytes);
  for (const auto& [path, bytes] : s.summaries) AppendEntry(&out, kSummary, path, bytes);
  AppendLE32(&out, Crc32(out));
  return out;
}

Result<TagSnapshot> DecodeTagSnapshot(std::string_view bytes) {
  auto bad = [](const std::string& what) {
    return Status::Corruption("not a usable ucfs index: " + what);
  };
  if (bytes.size() < kMagic.size() + 4 || bytes.substr(0, kMagic.size()) != kMagic) {
    return bad("no UCFS-IDX magic");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  if (LoadLE32(bytes.data() + body.size()) != Crc32(body)) {
    return bad("its checksum does not match (damaged, or cut short)");
  }
  LEReader r(body.substr(kMagic.size()));
  uint64_t version = 0;
  if (!r.U64(&version)) return bad("truncated header");
  if (version != TagSnapshot::kFormatVersion) {
    return bad("format version " + std::to_string(version) + ", this ucfs reads " +
               std::to_string(TagSnapshot::kFormatVersion) + " (run `ucfs index` again)");
  }
  TagSnapshot s;
  uint64_t count = 0;
  if (!r.Str(&s.tag) || !ReadIdentity(r, &s.tag_dir_identity) || !r.U64(&count)) {
    return bad("truncated header");
  }
  // Each entry takes at least 24 bytes.
  if (count > r.left() / 24) return bad("more entries than the file holds");
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t kind = 0;
    std::string path;
    std::string_view payload;
    if (!r.U64(&kind) || !r.Str(&path) || !r.View(&payload)) {
      return bad("entry " + std::to_string(i) + " is cut short");
    }
    const std::string where = "entry " + std::to_string(i) + " ('" + path + "')";
    bool fresh = true;
    switch (kind) {
      case kListing: {
        std::vector<DirEntry> entries;
        if (!ReadListing(payload, &entries)) return bad(where + ": a malformed listing");
        fresh = s.listings.emplace(path, std::move(entries)).second;
        break;
      }
      case kStat: {
        FileStat stat;
        if (!ReadStat(payload, &stat)) return bad(where + ": a malformed stat");
        fresh = s.stats.emplace(path, stat).second;
        break;
      }
      case kFile:
        fresh = s.files.emplace(path, std::string(payload)).second;
        break;
      case kSummary:
        fresh = s.summaries.emplace(path, std::string(payload)).second;
        break;
      default:
        return bad(where + ": unknown kind " + std::to_string(kind));
    }
    if (!fresh) return bad(where + ": recorded twice");
  }
  if (!r.empty()) return bad("bytes after the last entry");
  return s;
}

}  // namespace ucfs
