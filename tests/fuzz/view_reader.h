// What the checkpoint fuzz targets check of every view they build: each
// file walked and read as export and the FUSE read path read it (Plan's
// pieces, resolved against the MemEnv, in chunks and in odd small reads
// that must agree), and the files ucfs makes well-formed. Shared by
// checkpoint_fuzz.cc and grid_fuzz.cc.
#ifndef UCFS_TESTS_FUZZ_VIEW_READER_H_
#define UCFS_TESTS_FUZZ_VIEW_READER_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bytes_file.h"
#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"
#include "ucfs/vfs/view.h"

namespace ucfs_fuzz {

using ucfs::pickle::Kind;
using ucfs::pickle::NodeId;

constexpr uint64_t kReadBudget = uint64_t{64} << 20;  // bytes read through views per input
constexpr uint64_t kChunk = uint64_t{256} << 10;      // one Plan call of a full read
constexpr uint64_t kEdgeBytes = uint64_t{64} << 10;   // head/tail of a file too big to read
constexpr uint64_t kMaxRecordBytes = uint64_t{16} << 20;

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz: %s\n", what.c_str());
  std::abort();
}

// How far inputs get through the views.
struct ReadStats {
  uint64_t views_built = 0, views_failed = 0, files_read = 0, read_errors = 0, bytes_read = 0;
};

// What a universal per-param file holds.
enum class UniversalForm {
  kBareFlat,        // ZeRO-3: a bare 1-D tensor filling its record
  kDictCatDim0,     // ZeRO-1/2: {'cat_dim': 0, 'param': tensor filling its record}
  kDictAnyStorage,  // a TP/PP grid's: {..., 'param': tensor}, its storage maybe larger
};

// --- files ucfs made must be well-formed -------------------------------------

// A safetensors file as a strict reader takes it: the header parses, every
// tensor's dtype and shape match its data_offsets, and the offsets tile the
// data exactly (a name written twice leaves a gap).
inline void CheckSafetensors(const std::string& what, const std::string& bytes) {
  if (bytes.size() < 8) Fail(what + ": shorter than a safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (n > bytes.size() - 8) Fail(what + ": header length past the end of the file");
  const auto header = nlohmann::json::parse(bytes.substr(8, static_cast<size_t>(n)), nullptr,
                                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) Fail(what + ": header is not a JSON object");
  static const std::map<std::string, uint64_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  const uint64_t data = bytes.size() - 8 - n;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = what + ": tensor '" + name + "'";
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") ||
        !t.contains("data_offsets") || !t["dtype"].is_string() || !t["shape"].is_array() ||
        !t["data_offsets"].is_array() || t["data_offsets"].size() != 2) {
      Fail(where + " lacks dtype, shape or data_offsets");
    }
    auto es = kSizes.find(t["dtype"].get<std::string>());
    if (es == kSizes.end()) Fail(where + " has dtype " + t["dtype"].get<std::string>());
    uint64_t numel = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() || __builtin_mul_overflow(numel, d.get<uint64_t>(), &numel)) {
        Fail(where + " has a bad shape");
      }
    }
    const auto& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      Fail(where + " has bad data_offsets");
    }
    const uint64_t a = off[0].get<uint64_t>(), b = off[1].get<uint64_t>();
    uint64_t size = 0;
    if (a > b || b > data || __builtin_mul_overflow(numel, es->second, &size) || b - a != size) {
      Fail(where + ": data_offsets [" + std::to_string(a) + ", " + std::to_string(b) +
           ") do not hold " + std::to_string(numel) + " elements of " + es->first + " in " +
           std::to_string(data) + " bytes of data");
    }
    spans.emplace_back(a, b);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [a, b] : spans) {
    if (a != at) {
      Fail(what + ": data_offsets leave a gap or overlap at " + std::to_string(at) + " (next [" +
           std::to_string(a) + ", " + std::to_string(b) + "))");
    }
    at = b;
  }
  if (at != data)
    Fail(what + ": " + std::to_string(data - at) + " bytes of data belong to no tensor");
}

// A torch.save file ucfs wrote: a zip whose data.pkl parses and whose every
// persistent id names a storage record it has. A universal per-param file
// is moreover one flat tensor filling its one record.
inline void CheckTorchFile(const std::string& what, const std::string& path,
                           const std::string& bytes, UniversalForm form) {
  BytesFile file(bytes, "rank.pt");
  auto zip = ucfs::ZipArchive::Open(file);
  if (!zip.ok()) Fail(what + ": not a zip ucfs can read: " + zip.status().ToString());
  const ucfs::ZipRecord* pkl = zip->Find("data.pkl");
  if (pkl == nullptr) Fail(what + ": no data.pkl");
  auto pickle = ucfs::ZipArchive::ReadRecord(file, *pkl, kMaxRecordBytes * 4);
  if (!pickle.ok()) Fail(what + ": data.pkl unreadable: " + pickle.status().ToString());
  ucfs::pickle::ParseLimits limits;
  limits.max_nodes = uint64_t{1} << 22;
  auto doc = ucfs::pickle::Parse(*pickle, limits);
  if (!doc.ok()) Fail(what + ": data.pkl does not parse: " + doc.status().ToString());
  for (NodeId i = 0; i < doc->size(); ++i) {
    if (doc->node(i).kind != Kind::kPersistentId) continue;
    auto fields = doc->SequenceItems(doc->node(i).a);
    auto key = fields && fields->size() >= 5 ? doc->AsStr((*fields)[2]) : std::nullopt;
    if (!key) Fail(what + ": a persistent id is not ('storage', ...)");
    if (zip->Find("data/" + std::string(*key)) == nullptr) {
      Fail(what + ": no record for storage '" + std::string(*key) + "'");
    }
  }
  // "/<tag>_universal/zero/<param>/<state>.pt": ZeRO-3's a bare 1-D tensor;
  // ZeRO-1/2's {'cat_dim': 0, 'param': tensor at the param's shape};
  // a tensor-parallel grid's {..., 'param': tensor} whose storage may hold
  // more (a vocabulary keeps its padded rows). And a step.pt, a 0-dim
  // tensor or a number.
  if (std::count(path.begin(), path.end(), '/') == 4 &&
      path.find("_universal/zero/") != std::string::npos && !path.ends_with("/step.pt")) {
    const bool dict = form != UniversalForm::kBareFlat;
    const NodeId tensor = dict ? doc->Get(doc->root(), "param") : doc->root();
    if (form == UniversalForm::kDictCatDim0 && doc->AsInt(doc->Get(doc->root(), "cat_dim")) != 0) {
      Fail(what + ": no 'cat_dim': 0");
    }
    auto t = ucfs::MatchTensor(*doc, tensor);
    if (!t.ok() || !t->has_value()) Fail(what + ": not a bare tensor");
    const ucfs::ZipRecord* rec = zip->Find("data/" + (*t)->storage_key);
    const bool fills = form == UniversalForm::kDictAnyStorage
                           ? rec != nullptr && rec->size >= (*t)->byte_size()
                           : rec != nullptr && rec->size == (*t)->byte_size() &&
                                 (*t)->storage_numel == (*t)->numel();
    if ((dict ? false : (*t)->shape.size() != 1) ||
        (form == UniversalForm::kDictCatDim0 && (*t)->shape.empty()) || !(*t)->contiguous() ||
        (*t)->storage_offset != 0 || !fills) {
      Fail(what + ": not a flat tensor filling its record: shape " +
           ucfs::ShapeString((*t)->shape) + ", record of " +
           (rec ? std::to_string(rec->size) : std::string("no")) + " bytes");
    }
  }
}

inline void CheckGenerated(const std::string& what, const std::string& path,
                           const std::string& bytes, UniversalForm form) {
  if (path.ends_with(".safetensors")) {
    CheckSafetensors(what, bytes);
  } else if (path.ends_with(".pt") || path.ends_with(".bin")) {
    CheckTorchFile(what, path, bytes, form);
  } else if (path.ends_with(".json")) {
    if (nlohmann::json::parse(bytes, nullptr, false).is_discarded()) Fail(what + ": not JSON");
  }
}

struct Reader {
  ucfs::Env& env;
  bool strict;  // an unmutated fixture: every build and read must succeed
  ReadStats& stats;
  UniversalForm form;  // of the universal view's per-param files
  uint64_t budget = kReadBudget;

  void Check(const ucfs::Status& s, const std::string& what) const {
    if (strict && !s.ok()) Fail("unmutated fixture: " + what + ": " + s.ToString());
  }
  // A view's build: counted, and checked as Check does.
  void Built(const ucfs::Status& s, const std::string& what) const {
    ++(s.ok() ? stats.views_built : stats.views_failed);
    Check(s, what);
  }

  // Bytes [offset, offset + length) of a view file, checking the pieces.
  ucfs::Status ReadRange(ucfs::View& view, ucfs::InodeId inode, uint64_t size, uint64_t offset,
                         uint64_t length,
                         std::map<uint32_t, std::unique_ptr<ucfs::RandomAccessFile>>& files,
                         const std::string& what, std::string* out) {
    std::vector<ucfs::ReadPiece> pieces;
    UCFS_RETURN_IF_ERROR(view.Plan(inode, offset, length, &pieces));
    const uint64_t want = offset >= size ? 0 : std::min(length, size - offset);
    uint64_t got = 0;
    out->clear();
    for (const ucfs::ReadPiece& p : pieces) {
      if (__builtin_add_overflow(got, p.length, &got) || got > want) {
        Fail(what + ": pieces run past the range asked for: [" + std::to_string(offset) + ", +" +
             std::to_string(length) + ") of a file of " + std::to_string(size));
      }
      switch (p.kind) {
        case ucfs::ReadPiece::Kind::kBytes:
          if (p.bytes.size() != p.length) {
            Fail(what + ": a bytes piece of " + std::to_string(p.length) + " bytes holds " +
                 std::to_string(p.bytes.size()));
          }
          out->append(p.bytes);
          break;
        case ucfs::ReadPiece::Kind::kZeros:
          out->append(static_cast<size_t>(p.length), '\0');
          break;
        case ucfs::ReadPiece::Kind::kSource: {
          const ucfs::SourceFile src = view.source(p.source);
          uint64_t end = 0;
          if (__builtin_add_overflow(p.offset, p.length, &end) || end > src.identity.size) {
            Fail(what + ": a source piece [" + std::to_string(p.offset) + ", +" +
                 std::to_string(p.length) + ") lies past the end of " + src.path + " (" +
                 std::to_string(src.identity.size) + " bytes)");
          }
          auto& file = files[p.source];
          if (!file) {
            UCFS_ASSIGN_OR_RETURN(file, env.Open(src.path));
          }
          const size_t at = out->size();
          out->resize(at + static_cast<size_t>(p.length));
          UCFS_RETURN_IF_ERROR(
              file->ReadExact(p.offset, static_cast<size_t>(p.length), out->data() + at));
          break;
        }
      }
    }
    if (got != want) {
      Fail(what + ": pieces cover " + std::to_string(got) + " of the " + std::to_string(want) +
           " bytes asked for at " + std::to_string(offset) + " of a file of " +
           std::to_string(size));
    }
    return ucfs::Status::OK();
  }

  // Reads one file as export does, in chunks, then a few odd reads that must
  // agree with it.
  // `all` gets the whole file, when it is read whole (else stays empty).
  ucfs::Status ReadFile(ucfs::View& view, ucfs::InodeId inode, uint64_t size,
                        const std::string& what, std::string* all_out) {
    std::map<uint32_t, std::unique_ptr<ucfs::RandomAccessFile>> files;
    std::string chunk;
    const bool whole = size <= budget;
    std::string& all = *all_out;
    all.clear();
    if (whole) {
      budget -= size;
      stats.bytes_read += size;
      for (uint64_t at = 0; at < size; at += kChunk) {
        UCFS_RETURN_IF_ERROR(ReadRange(view, inode, size, at, kChunk, files, what, &chunk));
        all += chunk;
      }
      // One past the end reads nothing.
      UCFS_RETURN_IF_ERROR(ReadRange(view, inode, size, size, 1, files, what, &chunk));
      if (!chunk.empty()) Fail(what + ": a read at the end of a file returned bytes");
    } else {
      // Too big to read: its head and its tail, where the zip records are.
      const uint64_t edge = std::min<uint64_t>(kEdgeBytes, budget / 2);
      budget -= 2 * edge;
      UCFS_RETURN_IF_ERROR(ReadRange(view, inode, size, 0, edge, files, what, &chunk));
      UCFS_RETURN_IF_ERROR(ReadRange(view, inode, size, size - edge, edge, files, what, &chunk));
    }
    // Odd reads: across piece boundaries, at the end, of one byte.
    const uint64_t probes[][2] = {
        {size / 3, 17}, {size / 2 + 1, 4099}, {size > 5 ? size - 5 : 0, 64}, {1, 1}, {size / 7, 1}};
    for (const auto& [offset, length] : probes) {
      UCFS_RETURN_IF_ERROR(ReadRange(view, inode, size, offset, length, files, what, &chunk));
      if (whole && chunk != all.substr(std::min<uint64_t>(offset, all.size()), length)) {
        Fail(what + ": reading " + std::to_string(length) + " bytes at " + std::to_string(offset) +
             " gives other bytes than reading the whole file");
      }
    }
    return ucfs::Status::OK();
  }

  // Every file of a view, as ListExport + Export walk it. Files below the
  // `generated` prefixes ("/global_step4_universal/zero/") are ucfs's own,
  // and must be well-formed.
  // Files below `keep_prefix` read whole go to *keep (path -> bytes).
  void ReadTree(ucfs::View& view, const std::string& what,
                const std::vector<std::string>& generated,
                std::map<std::string, std::string>* keep = nullptr,
                const std::string& keep_prefix = "") {
    std::vector<std::pair<ucfs::InodeId, std::string>> stack = {{ucfs::kRootInode, ""}};
    while (!stack.empty()) {
      auto [dir, path] = stack.back();
      stack.pop_back();
      auto entries = view.ReadDir(dir);
      Check(entries.status(), what + " " + path);
      if (!entries.ok()) continue;
      for (const auto& [name, attr] : *entries) {
        const std::string child = path + "/" + name;
        if (!ucfs::IsSafePathComponent(name)) Fail(what + ": unsafe name in a listing: " + child);
        auto found = view.Lookup(dir, name);
        if (!found.ok() || *found != attr.inode)
          Fail(what + ": " + child + " listed but not found");
        auto xattrs = view.Xattrs(attr.inode);
        Check(xattrs.status(), what + " xattrs " + child);
        if (attr.is_dir) {
          stack.emplace_back(attr.inode, child);
          continue;
        }
        auto again = view.GetAttr(attr.inode);
        if (!again.ok() || again->size != attr.size) Fail(what + ": " + child + " changes size");
        std::string bytes;
        const ucfs::Status read = ReadFile(view, attr.inode, attr.size, what + " " + child, &bytes);
        ++stats.files_read;
        if (!read.ok()) ++stats.read_errors;
        Check(read, what + " read " + child);
        const bool ours = std::any_of(generated.begin(), generated.end(),
                                      [&](const std::string& g) { return child.starts_with(g); });
        if (read.ok() && ours && bytes.size() == attr.size) {
          CheckGenerated(what + " " + child, child, bytes, form);
        }
        if (keep != nullptr && read.ok() && bytes.size() == attr.size &&
            child.starts_with(keep_prefix)) {
          (*keep)[child] = std::move(bytes);
        }
      }
    }
  }
};

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_VIEW_READER_H_
