#include "ucfs/checkpoint/tag_snapshot.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>

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

// `bytes` as one zlib stream (level 6, as compress2 makes): an index is written once
// and read by every node, and its summaries, much alike from rank to rank,
// shrink about 27 times (13.7 MB to 0.5 MB at W = 4,096).
std::string Deflated(std::string_view bytes) {
  z_stream z{};
  if (deflateInit(&z, 6) != Z_OK) std::abort();
  std::string out;
  char chunk[1 << 16];
  int rc = Z_OK;
  do {
    // zlib counts in unsigned ints: fed at most 1 GiB at a time.
    const size_t in = std::min<size_t>(bytes.size(), 1u << 30);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
    z.avail_in = static_cast<uInt>(in);
    const int flush = in == bytes.size() ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = reinterpret_cast<Bytef*>(chunk);
      z.avail_out = sizeof chunk;
      rc = deflate(&z, flush);
      out.append(chunk, sizeof chunk - z.avail_out);
    } while (z.avail_out == 0);
    bytes.remove_prefix(in - z.avail_in);
  } while (rc != Z_STREAM_END);
  deflateEnd(&z);
  return out;
}

// The `length` bytes of the zlib stream `deflated`, into `out`: the stream
// must end exactly there and be all of `deflated`. Memory grows with what
// is inflated, not with the length claimed, which is bounded besides.
Status Inflate(std::string_view deflated, uint64_t length, std::string* out) {
  constexpr uint64_t kMaxEntries = uint64_t{1} << 30;  // as ReadSharedIndex's file
  if (length > kMaxEntries) {
    return Status::Corruption("entries of " + std::to_string(length) + " bytes claimed");
  }
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return Status::Corruption("zlib would not start");
  struct End {
    z_stream& z;
    ~End() { inflateEnd(&z); }
  } end{z};
  char chunk[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0) {
      const size_t in = std::min<size_t>(deflated.size(), 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(deflated.data()));
      z.avail_in = static_cast<uInt>(in);
      deflated.remove_prefix(in);
    }
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      return Status::Corruption(rc == Z_BUF_ERROR ? "its entries are cut short"
                                                  : "its entries do not inflate");
    }
    out->append(chunk, sizeof chunk - z.avail_out);
    if (out->size() > length) {
      return Status::Corruption("its entries inflate past the " + std::to_string(length) +
                                " bytes claimed");
    }
  }
  if (z.avail_in != 0 || !deflated.empty()) return Status::Corruption("bytes after its entries");
  if (out->size() != length) {
    return Status::Corruption("its entries inflate to " + std::to_string(out->size()) +
                              " bytes, not the " + std::to_string(length) + " claimed");
  }
  return Status::OK();
}

}  // namespace

FileIdentity PortableIdentity(FileIdentity identity) {
  identity.device = 0;
  return identity;
}

std::string EncodeTagSnapshot(const TagSnapshot& s) {
  std::string entries;
  AppendLengthPrefixed(&entries, s.tag);
  AppendIdentity(&entries, s.tag_dir_identity);
  AppendLE64(&entries, s.listings.size() + s.stats.size() + s.files.size() + s.summaries.size());
  for (const auto& [path, listing] : s.listings) {
    AppendEntry(&entries, kListing, path, ListingPayload(listing));
  }
  for (const auto& [path, stat] : s.stats) AppendEntry(&entries, kStat, path, StatPayload(stat));
  for (const auto& [path, bytes] : s.files) AppendEntry(&entries, kFile, path, bytes);
  for (const auto& [path, bytes] : s.summaries) AppendEntry(&entries, kSummary, path, bytes);
  std::string out(kMagic);
  AppendLE64(&out, TagSnapshot::kFormatVersion);
  AppendLE64(&out, entries.size());
  out += Deflated(entries);
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
  LEReader header(body.substr(kMagic.size()));
  uint64_t version = 0;
  if (!header.U64(&version)) return bad("truncated header");
  std::string inflated;
  std::string_view entries;
  if (version == 1) {  // the entries as they are
    entries = body.substr(kMagic.size() + 8);
  } else if (version == TagSnapshot::kFormatVersion) {  // deflated
    uint64_t length = 0;
    if (!header.U64(&length)) return bad("truncated header");
    const std::string_view deflated = body.substr(kMagic.size() + 16);
    if (Status inflating = Inflate(deflated, length, &inflated); !inflating.ok()) {
      return bad(inflating.message());
    }
    entries = inflated;
  } else {
    return bad("format version " + std::to_string(version) + ", this ucfs reads 1 to " +
               std::to_string(TagSnapshot::kFormatVersion) + " (run `ucfs index` again)");
  }
  LEReader r(entries);
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
        std::vector<DirEntry> listing;
        if (!ReadListing(payload, &listing)) return bad(where + ": a malformed listing");
        fresh = s.listings.emplace(path, std::move(listing)).second;
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
