#include "ucfs/codec/legacy_format.h"

#include <algorithm>
#include <unordered_map>

#include "base/byte_order.h"
#include "ucfs/base/checked_math.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {

namespace {

using pickle::Document;
using pickle::NodeId;

// torch.serialization.MAGIC_NUMBER, as the little-endian bytes of LONG1.
constexpr std::string_view kMagic = "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
constexpr int64_t kProtocolVersion = 1001;
// The pickles come first; a head of this size holds them in every file
// but those with huge pickles, for which it grows.
constexpr uint64_t kFirstHead = uint64_t{1} << 20;

Status Bad(const RandomAccessFile& file, const std::string& what) {
  return Status::Corruption(file.path() + ": legacy torch.save file: " + what);
}

// What the object pickle says of one storage.
struct StorageDecl {
  uint32_t element_size = 0;
  uint64_t numel = 0;
};

// The pickles at the head of the file, parsed.
struct Head {
  std::string object_pickle;
  std::vector<std::string> keys;
  std::unordered_map<std::string, StorageDecl> storages;
  uint64_t storages_offset = 0;  // where the first storage's count is
};

Result<StorageDecl> DeclOf(const Document& doc, NodeId pid_node, std::string* key) {
  auto fields = doc.SequenceItems(doc.node(pid_node).a);
  if (!fields || fields->size() != 6 || doc.AsStr((*fields)[0]) != "storage") {
    return Status::Corruption(
        "a persistent id is not ('storage', type, key, location, numel, "
        "view_metadata)");
  }
  const pickle::Node& cls = doc.node((*fields)[1]);
  auto dtype = cls.kind == pickle::Kind::kGlobal && cls.text == "torch"
                   ? DTypeFromStorageClass(cls.name)
                   : std::nullopt;
  auto k = doc.AsStr((*fields)[2]);
  auto numel = doc.AsInt((*fields)[4]);
  if (!dtype || !k || !numel || *numel < 0) {
    return Status::Corruption("persistent id " + doc.Repr(doc.node(pid_node).a, 120) +
                              " has fields of the wrong types");
  }
  if (doc.node((*fields)[5]).kind != pickle::Kind::kNone) {
    return Status::NotSupported("storage '" + Printable(*k) +
                                "' is a view of another storage (torch < 1.0 files)");
  }
  *key = std::string(*k);
  return StorageDecl{Info(*dtype).element_size, static_cast<uint64_t>(*numel)};
}

// Parses the five pickles from `head`; a truncation error means the head
// was too short.
Result<Head> ParseHead(const RandomAccessFile& file, std::string_view head) {
  Head out;
  size_t at = 0;
  auto next = [&](const char* what) -> Result<Document> {
    size_t end = 0;
    auto doc = pickle::ParsePrefix(head.substr(at), &end);
    if (!doc.ok()) {
      if (pickle::IsTruncation(doc.status())) return doc.status();
      return doc.status().Annotate(file.path() + ": legacy torch.save file: " + what);
    }
    at += end;
    return doc;
  };
  UCFS_ASSIGN_OR_RETURN(Document magic, next("magic number"));
  const pickle::Node& m = magic.node(magic.root());
  if (m.kind != pickle::Kind::kLong || m.text != kMagic) {
    return Bad(file, "starts with a pickle of " + magic.Repr(magic.root(), 40) +
                         ", not torch's magic number");
  }
  UCFS_ASSIGN_OR_RETURN(Document protocol, next("protocol version"));
  if (protocol.AsInt(protocol.root()) != kProtocolVersion) {
    return Bad(file, "protocol version " + protocol.Repr(protocol.root(), 40) + ", not 1001");
  }
  UCFS_ASSIGN_OR_RETURN(Document sys_info, next("sys_info"));
  if (sys_info.AsInt(sys_info.Get(sys_info.root(), "little_endian")) != 1) {
    return Status::NotSupported(file.path() +
                                ": legacy torch.save file written on a big-endian machine");
  }
  const size_t object_start = at;
  UCFS_ASSIGN_OR_RETURN(Document object, next("object pickle"));
  out.object_pickle = std::string(head.substr(object_start, at - object_start));
  UCFS_ASSIGN_OR_RETURN(Document keys, next("storage key list"));
  auto key_nodes = keys.SequenceItems(keys.root());
  if (!key_nodes || keys.node(keys.root()).kind != pickle::Kind::kList) {
    return Bad(file, "the storage key list is a " + keys.Repr(keys.root(), 40));
  }
  for (NodeId k : *key_nodes) {
    auto s = keys.AsStr(k);
    if (!s) return Bad(file, "a storage key is not a string");
    out.keys.emplace_back(*s);
  }
  out.storages_offset = at;

  for (size_t i = 0; i < object.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    if (object.node(id).kind != pickle::Kind::kPersistentId) continue;
    std::string key;
    auto decl = DeclOf(object, id, &key);
    if (!decl.ok()) return decl.status().Annotate(file.path() + ": legacy torch.save file");
    auto [it, inserted] = out.storages.emplace(key, *decl);
    if (!inserted &&
        (it->second.element_size != decl->element_size || it->second.numel != decl->numel)) {
      return Bad(
          file, "storage '" + Printable(key) + "' is declared twice with different types or sizes");
    }
  }
  return out;
}

// Where each listed storage's bytes are: a count, then count elements.
Result<LegacyArchive> LayOutStorages(const RandomAccessFile& file, Head head) {
  const uint64_t size = file.Size();
  LegacyArchive out;
  out.pickle = std::move(head.object_pickle);
  uint64_t cursor = head.storages_offset;
  for (const std::string& key : head.keys) {
    auto decl = head.storages.find(key);
    if (decl == head.storages.end()) {
      return Bad(file,
                 "storage '" + Printable(key) + "' is listed but no tensor of the pickle uses it");
    }
    char count_bytes[8];
    if (size - cursor < 8) {
      return Bad(file, "truncated: storage '" + Printable(key) + "' should start at byte " +
                           std::to_string(cursor) + " of " + std::to_string(size));
    }
    UCFS_RETURN_IF_ERROR(file.ReadExact(cursor, 8, count_bytes));
    const uint64_t count = LoadLE64(count_bytes);
    if (count != decl->second.numel) {
      return Bad(file, "storage '" + Printable(key) + "' holds " + std::to_string(count) +
                           " elements, the pickle says " + std::to_string(decl->second.numel));
    }
    auto checked = CheckedMul<uint64_t>(count, decl->second.element_size, size - cursor - 8);
    if (!checked) {
      return Bad(file, "truncated: storage '" + Printable(key) + "' of " + std::to_string(count) +
                           " elements runs past the end of the file");
    }
    const uint64_t bytes = *checked;
    ZipRecord rec;
    rec.name = std::string(kLegacyPrefix) + "/data/" + key;
    rec.header_offset = cursor;
    rec.data_offset = cursor + 8;
    rec.size = rec.compressed_size = bytes;
    out.records.push_back(std::move(rec));
    cursor += 8 + bytes;
  }
  if (cursor != size) {
    return Bad(file, std::to_string(size - cursor) + " bytes after the last storage");
  }
  if (out.records.size() != head.storages.size()) {
    return Bad(file, "the pickle uses " + std::to_string(head.storages.size()) +
                         " storages, the key list names " + std::to_string(out.records.size()));
  }
  return out;
}

}  // namespace

bool LooksLikeLegacyTorchFile(std::string_view head) {
  // PROTO 2 (torch.save's DEFAULT_PROTOCOL) or any later protocol.
  return head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 &&
         static_cast<unsigned char>(head[1]) >= 2 && static_cast<unsigned char>(head[1]) <= 5;
}

Result<LegacyArchive> ReadLegacyArchive(const RandomAccessFile& file) {
  const uint64_t size = file.Size();
  const uint64_t max_head = pickle::ParseLimits{}.max_bytes;
  for (uint64_t want = std::min(size, kFirstHead);; want = std::min({size, want * 4, max_head})) {
    UCFS_ASSIGN_OR_RETURN(std::string bytes, file.ReadString(0, want));
    auto head = ParseHead(file, bytes);
    if (head.ok()) return LayOutStorages(file, std::move(head).value());
    if (!pickle::IsTruncation(head.status())) return head.status();
    if (want == size || want == max_head) {
      return Bad(file, "truncated inside its pickles (" + head.status().message() + ")");
    }
  }
}

}  // namespace ucfs
