// What the checkpoint fuzz targets mutate with: the input read as a
// program's operands, and a torch.save file as its records and its parsed
// data.pkl, to edit and write back with every record kept. Shared by
// checkpoint_fuzz.cc and grid_fuzz.cc.
#ifndef UCFS_TESTS_FUZZ_MUTATION_SUPPORT_H_
#define UCFS_TESTS_FUZZ_MUTATION_SUPPORT_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucfs/codec/pickle.h"
#include "ucfs/codec/zip.h"
#include "view_reader.h"

namespace ucfs_fuzz {

using ucfs::pickle::Document;

// ---------------------------------------------------------------------------
// The program's bytes.

class Program {
 public:
  Program(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = U8();
    return static_cast<uint16_t>(lo | (U8() << 8));
  }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{U8()} << (8 * i);
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------
// Torch files as records plus a parsed data.pkl.

struct Archive {
  std::vector<std::pair<std::string, std::string>> records;  // full name -> bytes
  size_t pickle = 0;                                         // index of data.pkl
  std::string prefix;
  Document doc;
  bool dirty = false;

  // The record "<prefix>/data/<key>", or nullptr.
  std::string* Storage(std::string_view key) {
    const std::string name = prefix + "/data/" + std::string(key);
    for (auto& [n, bytes] : records) {
      if (n == name) return &bytes;
    }
    return nullptr;
  }
  // A new storage record, before `version` as torch orders them.
  void AddStorage(const std::string& key, std::string bytes) {
    auto at = records.end();
    if (!records.empty() && records.back().first.ends_with("/version")) --at;
    records.insert(at, {prefix + "/data/" + key, std::move(bytes)});
  }
};

inline std::optional<Archive> ParseArchive(const std::string& bytes) {
  BytesFile file(bytes, "rank.pt");
  auto zip = ucfs::ZipArchive::Open(file);
  if (!zip.ok()) return std::nullopt;
  Archive ar;
  ar.prefix = zip->prefix();
  bool found = false;
  for (const ucfs::ZipRecord& rec : zip->records()) {
    auto data = ucfs::ZipArchive::ReadRecord(file, rec, kMaxRecordBytes);
    if (!data.ok()) return std::nullopt;
    if (!found && rec.name.ends_with("/data.pkl")) {
      ar.pickle = ar.records.size();
      found = true;
    }
    ar.records.emplace_back(rec.name, std::move(*data));
  }
  if (!found) return std::nullopt;
  ucfs::pickle::ParseLimits limits;
  limits.max_nodes = uint64_t{1} << 20;
  auto doc = ucfs::pickle::Parse(ar.records[ar.pickle].second, limits);
  if (!doc.ok()) return std::nullopt;
  ar.doc = std::move(*doc);
  return ar;
}

// The torch.save zip of `ar` with its edited pickle; nullopt when the
// Document cannot be written (the edit is then dropped).
inline std::optional<std::string> Serialize(Archive& ar) {
  if (ar.dirty) {
    auto pkl = ucfs::pickle::Write(ar.doc);
    if (!pkl.ok()) return std::nullopt;
    ar.records[ar.pickle].second = std::move(*pkl);
  }
  std::vector<ucfs::ZipEntrySpec> specs;
  for (const auto& [name, bytes] : ar.records) {
    ucfs::ZipEntrySpec spec;
    spec.name = name;
    spec.size = bytes.size();
    spec.inline_data = bytes;
    specs.push_back(std::move(spec));
  }
  auto layout = ucfs::ZipLayout::Plan(std::move(specs));
  if (!layout.ok()) return std::nullopt;
  return layout->generated();  // every entry inline: this is the whole file
}

// --- the fixtures a target mutates ------------------------------------------

inline std::string ReadWhole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The fixture directories below `dir`, `env_var` naming another: each
// directory holding checkpoint/latest, sorted (byte 0 of an input picks one
// by its place).
inline std::vector<std::filesystem::path> FixtureDirs(const char* env_var, const char* dir) {
  namespace fs = std::filesystem;
  const char* env_dir = std::getenv(env_var);
  const fs::path from = env_dir != nullptr ? env_dir : dir;
  std::vector<fs::path> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    if (e.is_directory() && fs::is_regular_file(e.path() / "checkpoint" / "latest")) {
      names.push_back(e.path());
    }
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) Fail("no fixtures in " + from.string() + " (set " + env_var + ")");
  return names;
}

// The tag a checkpoint root's `latest` names.
inline std::string LatestTag(const std::filesystem::path& root) {
  std::string tag = ReadWhole(root / "latest");
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
  return tag;
}

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_MUTATION_SUPPORT_H_
