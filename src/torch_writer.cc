#include "ucfs/torch_writer.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

namespace ucfs {

uint64_t StorageSpec::size() const {
  uint64_t n = 0;
  for (const auto& r : runs) n += r.length;
  return n;
}

Result<std::string_view> DeferredBytes::Get() const {
  std::call_once(once_, [this] {
    auto made = make_();
    if (made.ok()) {
      bytes_ = std::move(made).value();
    } else {
      status_ = made.status();
    }
  });
  if (!status_.ok()) return status_;
  return std::string_view(bytes_);
}

void StorageSpec::FillRunStarts() {
  run_starts.clear();
  uint64_t at = 0;
  for (const auto& run : runs) {
    run_starts.push_back(at);
    at += run.length;
  }
}

PieceReader::PieceReader(Env& env, std::function<SourceFile(uint32_t)> source)
    : files_(env, std::move(source)) {}

Status PieceReader::Read(const std::vector<ReadPiece>& pieces, std::string* out) {
  return files_.Read(pieces, out);
}

Result<uint32_t> PieceReader::Crc32(const std::vector<ReadPiece>& pieces) {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  uLong crc = crc32(0, nullptr, 0);
  std::string chunk;
  for (const ReadPiece& p : pieces) {
    for (uint64_t done = 0; done < p.length; done += kChunk) {
      ReadPiece part = p;
      part.length = std::min(kChunk, p.length - done);
      if (p.kind == ReadPiece::Kind::kBytes) part.bytes = p.bytes.substr(done, part.length);
      if (p.kind == ReadPiece::Kind::kSource) part.offset = p.offset + done;
      chunk.clear();
      UCFS_RETURN_IF_ERROR(Read({part}, &chunk));
      crc =
          crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(chunk.size()));
    }
  }
  return static_cast<uint32_t>(crc);
}

TorchFileContent::TorchFileContent(std::shared_ptr<const Checkpoint> checkpoint, ZipLayout layout,
                                   std::vector<StorageSpec> storages,
                                   std::vector<int> storage_of_entry)
    : checkpoint_(std::move(checkpoint)),
      layout_(std::move(layout)),
      storages_(std::move(storages)),
      storage_of_entry_(std::move(storage_of_entry)) {}

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
    std::vector<StorageSpec> storages, PieceReader* crc_reader) {
  using Records = ContainerStyle::Records;
  const ContainerStyle style = checkpoint->container_style();
  // Reshard flats have a run per parameter: reads find theirs by bisection.
  for (auto& storage : storages) storage.FillRunStarts();
  // torch <= 2.6 writes storage records sorted by key as strings, later
  // torch in the order it pickled them: keys are "0", "1", ... in that order.
  std::sort(storages.begin(), storages.end(), [&](const StorageSpec& a, const StorageSpec& b) {
    if (style.records == Records::kTorch27 && a.key.size() != b.key.size()) {
      return a.key.size() < b.key.size();
    }
    return a.key < b.key;
  });
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
  auto add_inline = [&](const std::string& name, std::string data) {
    ZipEntrySpec e;
    e.name = prefix + "/" + name;
    e.size = data.size();
    e.crc32 = crc_reader == nullptr ? 0 : Crc32Of(data);
    heads.push_back(data.substr(0, 8));
    e.inline_data = std::move(data);
    entries.push_back(std::move(e));
    storage_of_entry.push_back(-1);
  };
  add_inline("data.pkl", std::move(pickle));
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
  return std::shared_ptr<TorchFileContent>(new TorchFileContent(
      std::move(checkpoint), std::move(layout), std::move(storages), std::move(storage_of_entry)));
}

Status PlanStorage(const Checkpoint& checkpoint, const StorageSpec& storage, uint64_t begin,
                   uint64_t end, std::vector<ReadPiece>* out) {
  std::vector<Extent> extents;
  // Start at the run holding `begin`.
  size_t first = static_cast<size_t>(
      std::upper_bound(storage.run_starts.begin(), storage.run_starts.end(), begin) -
      storage.run_starts.begin());
  first = first == 0 ? 0 : first - 1;
  for (size_t i = first; i < storage.runs.size(); ++i) {
    const StorageRun& run = storage.runs[i];
    const uint64_t run_start = storage.run_starts[i];
    const uint64_t run_end = run_start + run.length;
    const uint64_t a = std::max(begin, run_start);
    const uint64_t b = std::min(end, run_end);
    if (a < b) {
      ReadPiece p;
      p.length = b - a;
      switch (run.kind) {
        case StorageRun::Kind::kZeros:
          p.kind = ReadPiece::Kind::kZeros;
          out->push_back(p);
          break;
        case StorageRun::Kind::kSource:
          p.kind = ReadPiece::Kind::kSource;
          p.source = run.source;
          p.offset = run.source_offset + (a - run_start);
          out->push_back(p);
          break;
        case StorageRun::Kind::kBytes: {
          UCFS_ASSIGN_OR_RETURN(std::string_view bytes, run.bytes->Get());
          if (bytes.size() != run.length) {
            return Status::Corruption("computed " + std::to_string(bytes.size()) + " bytes where " +
                                      std::to_string(run.length) + " were planned");
          }
          p.kind = ReadPiece::Kind::kBytes;
          p.bytes = bytes.substr(a - run_start, b - a);
          out->push_back(p);
          break;
        }
        case StorageRun::Kind::kState:
        case StorageRun::Kind::kFrozen: {
          extents.clear();
          const uint64_t from = run.state_offset + (a - run_start);
          UCFS_RETURN_IF_ERROR(
              run.kind == StorageRun::Kind::kState
                  ? checkpoint.MapState(run.param, run.state, from, from + (b - a), &extents)
                  : checkpoint.MapFrozen(run.param, from, from + (b - a), &extents));
          for (const Extent& e : extents) {
            ReadPiece sp;
            sp.kind = ReadPiece::Kind::kSource;
            sp.source = e.file;
            sp.offset = e.offset;
            sp.length = e.length;
            out->push_back(sp);
          }
          break;
        }
      }
    }
    if (run_end >= end) break;
  }
  return Status::OK();
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
    } else {
      const int storage = storage_of_entry_[static_cast<size_t>(seg.entry)];
      const uint64_t within = seg.entry_offset + (a - seg.offset);
      UCFS_RETURN_IF_ERROR(PlanStorage(*checkpoint_, storages_[static_cast<size_t>(storage)],
                                       within, within + (b - a), out));
    }
  }
  return Status::OK();
}

Result<pickle::NodeId> TorchPickleBuilder::Copy(const pickle::Document& source_doc,
                                                pickle::NodeId id, const TorchFileSummary& summary,
                                                uint32_t source_index,
                                                std::vector<pickle::NodeId>* copied) {
  const size_t before = doc_.size();
  const pickle::NodeId root = doc_.CopyFrom(source_doc, id, copied);
  // Every persistent id copied now names a storage record of `summary`.
  for (size_t i = before; i < doc_.size(); ++i) {
    const pickle::NodeId pid = static_cast<pickle::NodeId>(i);
    if (doc_.node(pid).kind != pickle::Kind::kPersistentId) continue;
    auto fields = doc_.SequenceItems(doc_.node(pid).a);
    auto key = fields && fields->size() >= 5 ? doc_.AsStr((*fields)[2]) : std::nullopt;
    if (!key) return Status::Corruption(summary.path + ": a storage id is not ('storage', ...)");
    // The legacy format's ids carry a sixth field (view metadata, None);
    // the zip format's persistent_load takes exactly five.
    fields->resize(5);
    // The id gets a tuple of its own, a key string of its own (shared only by
    // the ids of one storage) and the one 'cpu' string: Finish renames keys
    // in place, and the source may share the nodes it had there with anything
    // (found by checkpoint_fuzz: an id with a storage class global where the
    // location goes had Finish rename that global, every tensor's, to cpu).
    auto [own, added] = own_keys_.try_emplace((*fields)[2], pickle::kNoNode);
    if (added) own->second = doc_.AddStr(std::string(*key));
    (*fields)[2] = own->second;
    (*fields)[3] = CpuString();
    doc_.mutable_node(pid).a = doc_.AddTuple(*fields);
    const pickle::NodeId key_node = (*fields)[2];
    if (storages_.count(key_node)) continue;
    const ZipRecord* rec = summary.Find("data/" + std::string(*key));
    if (rec == nullptr || rec->method != 0) {
      return Status::Corruption(summary.path + ": storage record 'data/" + std::string(*key) +
                                "' is missing or compressed");
    }
    StorageRun run;
    run.kind = StorageRun::Kind::kSource;
    run.length = rec->size;
    run.source = source_index;
    run.source_offset = rec->data_offset;
    storages_[key_node] = {run};
  }
  return root;
}

pickle::NodeId TorchPickleBuilder::CpuString() {
  if (cpu_str_ == pickle::kNoNode) cpu_str_ = doc_.AddStr("cpu");
  return cpu_str_;
}

pickle::NodeId TorchPickleBuilder::NewTensor(DType dtype, const std::vector<int64_t>& shape,
                                             bool requires_grad, std::vector<StorageRun> runs) {
  using pickle::NodeId;
  // torch.save shares one 'storage' and one location string between ids.
  if (storage_str_ == pickle::kNoNode) storage_str_ = doc_.AddStr("storage");
  CpuString();
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
  const NodeId key = doc_.AddStr("new" + std::to_string(new_key_count_++));
  const NodeId pid =
      doc_.AddTuple({storage_str_, doc_.Global("torch", std::string(Info(dtype).storage_class)),
                     key, cpu_str_, doc_.AddInt(static_cast<int64_t>(numel))});
  std::vector<NodeId> dims, strides;
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides.insert(strides.begin(), doc_.AddInt(stride));
    stride *= shape[i];
  }
  for (int64_t d : shape) dims.push_back(doc_.AddInt(d));
  const NodeId hooks = doc_.AddReduce(doc_.Global("collections", "OrderedDict"), doc_.AddTuple({}));
  const NodeId args = doc_.AddTuple({doc_.AddPersistentId(pid), doc_.AddInt(0), doc_.AddTuple(dims),
                                     doc_.AddTuple(strides), doc_.AddBool(requires_grad), hooks});
  storages_[key] = std::move(runs);
  return doc_.AddReduce(doc_.Global("torch._utils", "_rebuild_tensor_v2"), args);
}

Result<std::shared_ptr<TorchFileContent>> TorchPickleBuilder::Finish(
    std::shared_ptr<const Checkpoint> checkpoint, const std::string& prefix,
    PieceReader* crc_reader) {
  // Number storages as torch.save would: by first appearance in the pickle,
  // which the writer reports. Key strings may be shared between ids, so
  // every name is decided before any is changed; names change the pickle's
  // bytes, so it is written again after.
  std::vector<pickle::NodeId> pids;
  UCFS_RETURN_IF_ERROR(pickle::Write(doc_, &pids).status());
  std::unordered_map<pickle::NodeId, std::string> names;  // key node -> storage name
  std::vector<StorageSpec> specs;
  for (pickle::NodeId pid : pids) {
    auto fields = *doc_.SequenceItems(doc_.node(pid).a);
    const pickle::NodeId key = fields[2];
    if (names.count(key)) continue;
    auto runs = storages_.find(key);
    if (runs == storages_.end()) return Status::InvalidArgument("a storage with no known bytes");
    const std::string name = std::to_string(names.size());
    names.emplace(key, name);
    specs.push_back(StorageSpec{name, runs->second, 0, {}});
  }
  for (const auto& [key, name] : names) doc_.mutable_node(key).text = name;
  UCFS_ASSIGN_OR_RETURN(std::string bytes, pickle::Write(doc_));
  return TorchFileContent::Make(std::move(checkpoint), prefix, std::move(bytes), std::move(specs),
                                crc_reader);
}

Result<std::string> BareTensorPickle(DType dtype, uint64_t numel, bool requires_grad) {
  using pickle::NodeId;
  pickle::Document doc;
  const NodeId rebuild = doc.Global("torch._utils", "_rebuild_tensor_v2");
  const NodeId pid = doc.AddTuple(
      {doc.AddStr("storage"), doc.Global("torch", std::string(Info(dtype).storage_class)),
       doc.AddStr("0"), doc.AddStr("cpu"), doc.AddInt(static_cast<int64_t>(numel))});
  const NodeId hooks = doc.AddReduce(doc.Global("collections", "OrderedDict"), doc.AddTuple({}));
  const NodeId args =
      doc.AddTuple({doc.AddPersistentId(pid), doc.AddInt(0),
                    doc.AddTuple({doc.AddInt(static_cast<int64_t>(numel))}),
                    doc.AddTuple({doc.AddInt(1)}), doc.AddBool(requires_grad), hooks});
  doc.set_root(doc.AddReduce(rebuild, args));
  return pickle::Write(doc);
}

std::string ArchivePrefixFor(std::string_view file_name) {
  auto dot = file_name.rfind('.');
  return std::string(dot == std::string_view::npos || dot == 0 ? file_name
                                                               : file_name.substr(0, dot));
}

}  // namespace ucfs
