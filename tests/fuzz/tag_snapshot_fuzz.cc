// Fuzz target: the shared index's file (checkpoint/tag_snapshot.h), which
// every node's mount reads from a shared directory anyone may have written.
//
// The input's last 4 bytes are set to the checksum of the rest before it is
// decoded, so mutations reach the fields behind the checksum. Any input may
// be refused, none may crash; one that decodes encodes to a file that
// decodes to the same snapshot.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ucfs/checkpoint/tag_snapshot.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tag_snapshot_fuzz: %s\n", what);
  std::abort();
}

std::string Sealed(std::string bytes) {
  if (bytes.size() < 4) return bytes;
  const size_t body = bytes.size() - 4;
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                          static_cast<uInt>(body));
  for (size_t i = 0; i < 4; ++i) bytes[body + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  return bytes;
}

bool Same(const ucfs::TagSnapshot& a, const ucfs::TagSnapshot& b) {
  if (a.tag != b.tag || !(a.tag_dir_identity == b.tag_dir_identity) ||
      a.listings.size() != b.listings.size() || a.files != b.files || a.summaries != b.summaries ||
      a.stats.size() != b.stats.size()) {
    return false;
  }
  for (const auto& [path, entries] : a.listings) {
    auto it = b.listings.find(path);
    if (it == b.listings.end() || it->second.size() != entries.size()) return false;
    for (size_t i = 0; i < entries.size(); ++i) {
      const ucfs::DirEntry& x = entries[i];
      const ucfs::DirEntry& y = it->second[i];
      if (x.name != y.name || x.is_dir != y.is_dir || x.is_symlink != y.is_symlink) return false;
    }
  }
  for (const auto& [path, stat] : a.stats) {
    auto it = b.stats.find(path);
    if (it == b.stats.end() || !(it->second.identity == stat.identity) ||
        !(it->second.access == stat.access) || it->second.is_dir != stat.is_dir) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = Sealed(std::string(reinterpret_cast<const char*>(data), size));
  auto decoded = ucfs::DecodeTagSnapshot(input);
  if (!decoded.ok()) {
    if (decoded.status().code() != ucfs::Status::Code::kCorruption) Fail("not Corruption");
    return 0;
  }
  auto again = ucfs::DecodeTagSnapshot(ucfs::EncodeTagSnapshot(*decoded));
  if (!again.ok()) Fail("an encoded snapshot does not decode");
  if (!Same(*decoded, *again)) Fail("an encoded snapshot decodes to another");
  return 0;
}
