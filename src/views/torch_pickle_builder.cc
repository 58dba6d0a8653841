#include "ucfs/views/torch_pickle_builder.h"

#include <algorithm>
#include <unordered_map>

#include "ucfs/base/checked_math.h"

namespace ucfs {

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
    // torch.save pickles one 'storage' string for all ids (memoized), so
    // copied ids share it with new ones.
    if (doc_.AsStr((*fields)[0]) == "storage") (*fields)[0] = StorageString();
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

pickle::NodeId TorchPickleBuilder::StorageString() {
  if (storage_str_ == pickle::kNoNode) storage_str_ = doc_.AddStr("storage");
  return storage_str_;
}

pickle::NodeId TorchPickleBuilder::NewTensor(DType dtype, const std::vector<int64_t>& shape,
                                             bool requires_grad, std::vector<StorageRun> runs,
                                             std::optional<uint64_t> storage_numel, int64_t tag) {
  using pickle::NodeId;
  // torch.save shares one 'storage' and one location string between ids.
  StorageString();
  CpuString();
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
  const NodeId key = doc_.AddStr("new" + std::to_string(new_key_count_++));
  const NodeId pid = doc_.AddTuple(
      {storage_str_, doc_.Global("torch", std::string(Info(dtype).storage_class)), key, cpu_str_,
       doc_.AddInt(static_cast<int64_t>(storage_numel.value_or(numel)))});
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
  if (tag >= 0) tags_[key] = tag;
  return doc_.AddReduce(doc_.Global("torch._utils", "_rebuild_tensor_v2"), args);
}

Result<std::shared_ptr<TorchFileContent>> TorchPickleBuilder::Finish(
    std::shared_ptr<const Checkpoint> checkpoint, const std::string& prefix,
    SourceFiles* crc_reader) {
  const ContainerStyle style = checkpoint->container_style();
  return Finish(std::shared_ptr<const StateMapper>(std::move(checkpoint)), style, prefix,
                crc_reader);
}

Result<std::shared_ptr<TorchFileContent>> TorchPickleBuilder::Finish(
    std::shared_ptr<const StateMapper> mapper, const ContainerStyle& style,
    const std::string& prefix, SourceFiles* crc_reader) {
  UCFS_ASSIGN_OR_RETURN(Parts parts, FinishParts());
  return TorchFileContent::Make(std::move(mapper), style, prefix, std::move(parts.pickle),
                                std::move(parts.storages), crc_reader);
}

Result<TorchPickleBuilder::Parts> TorchPickleBuilder::FinishParts() {
  // Number storages as torch.save would: by first appearance in the pickle,
  // which the writer reports. Key strings may be shared between ids, so
  // every name is decided before any is changed; names change the pickle's
  // bytes, so it is written again after.
  std::vector<pickle::NodeId> pids;
  UCFS_RETURN_IF_ERROR(pickle::Write(doc_, &pids).status());
  std::unordered_map<pickle::NodeId, std::string> names;  // key node -> storage name
  Parts parts;
  for (pickle::NodeId pid : pids) {
    auto fields = *doc_.SequenceItems(doc_.node(pid).a);
    const pickle::NodeId key = fields[2];
    if (names.count(key)) continue;
    auto runs = storages_.find(key);
    if (runs == storages_.end()) return Status::InvalidArgument("a storage with no known bytes");
    const std::string name = std::to_string(names.size());
    names.emplace(key, name);
    parts.storages.push_back(StorageSpec{name, runs->second, 0, {}});
    const auto tag = tags_.find(key);
    parts.tags.push_back(tag == tags_.end() ? -1 : tag->second);
  }
  for (const auto& [key, name] : names) doc_.mutable_node(key).text = name;
  UCFS_ASSIGN_OR_RETURN(std::string pickle, pickle::Write(doc_));
  parts.pickle = std::make_shared<const std::string>(std::move(pickle));
  return parts;
}

namespace {

// _rebuild_tensor_v2 of storage "0" holding exactly a contiguous tensor of
// `shape`, as torch.save pickles one.
Result<pickle::NodeId> AddContiguousTensor(pickle::Document& doc, DType dtype,
                                           const std::vector<int64_t>& shape, bool requires_grad,
                                           std::optional<uint64_t> storage_numel = std::nullopt) {
  using pickle::NodeId;
  auto numel = CheckedShapeProduct(shape, kMaxFileQuantity / 16);
  if (!numel)
    return Status::InvalidArgument("a tensor of shape " + ShapeString(shape) +
                                   " has too many elements");
  if (storage_numel) {
    if (*storage_numel < *numel || *storage_numel > kMaxFileQuantity / 16) {
      return Status::InvalidArgument("a storage of " + std::to_string(*storage_numel) +
                                     " elements cannot hold a tensor of shape " +
                                     ShapeString(shape));
    }
    numel = storage_numel;
  }
  std::vector<NodeId> sizes, strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = doc.AddInt(stride);
    stride *= std::max<int64_t>(shape[d], 1);
  }
  for (int64_t n : shape) sizes.push_back(doc.AddInt(n));
  const NodeId rebuild = doc.Global("torch._utils", "_rebuild_tensor_v2");
  const NodeId pid = doc.AddTuple(
      {doc.AddStr("storage"), doc.Global("torch", std::string(Info(dtype).storage_class)),
       doc.AddStr("0"), doc.AddStr("cpu"), doc.AddInt(static_cast<int64_t>(*numel))});
  const NodeId hooks = doc.AddReduce(doc.Global("collections", "OrderedDict"), doc.AddTuple({}));
  const NodeId args =
      doc.AddTuple({doc.AddPersistentId(pid), doc.AddInt(0), doc.AddTuple(std::move(sizes)),
                    doc.AddTuple(std::move(strides)), doc.AddBool(requires_grad), hooks});
  return doc.AddReduce(rebuild, args);
}

}  // namespace

Result<std::string> BareTensorPickle(DType dtype, const std::vector<int64_t>& shape,
                                     bool requires_grad) {
  pickle::Document doc;
  UCFS_ASSIGN_OR_RETURN(pickle::NodeId tensor,
                        AddContiguousTensor(doc, dtype, shape, requires_grad));
  doc.set_root(tensor);
  return pickle::Write(doc);
}

Result<std::string> UniversalParamPickle(DType dtype, const std::vector<int64_t>& shape,
                                         bool requires_grad) {
  pickle::Document doc;
  // Insertion order as ds_to_universal fills the dict: cat_dim, then param.
  const pickle::NodeId cat_dim = doc.AddStr("cat_dim");
  const pickle::NodeId zero = doc.AddInt(0);
  const pickle::NodeId param = doc.AddStr("param");
  UCFS_ASSIGN_OR_RETURN(pickle::NodeId tensor,
                        AddContiguousTensor(doc, dtype, shape, requires_grad));
  doc.set_root(doc.AddDict({cat_dim, zero, param, tensor}));
  return pickle::Write(doc);
}

Result<std::string> UniversalDictPickle(DType dtype, const std::vector<int64_t>& shape,
                                        uint64_t storage_numel, bool requires_grad,
                                        const std::vector<UniversalKey>& keys) {
  pickle::Document doc;
  std::vector<pickle::NodeId> kv;
  for (const UniversalKey& k : keys) {
    kv.push_back(doc.AddStr(k.name));
    kv.push_back(k.make      ? k.make(doc)
                 : k.is_bool ? doc.AddBool(k.value != 0)
                             : doc.AddInt(k.value));
  }
  kv.push_back(doc.AddStr("param"));
  UCFS_ASSIGN_OR_RETURN(pickle::NodeId tensor,
                        AddContiguousTensor(doc, dtype, shape, requires_grad, storage_numel));
  kv.push_back(tensor);
  doc.set_root(doc.AddDict(std::move(kv)));
  return pickle::Write(doc);
}

pickle::NodeId* ValueSlot(pickle::Document& doc, pickle::NodeId mapping, std::string_view key) {
  if (mapping == pickle::kNoNode) return nullptr;
  pickle::Node& n = doc.mutable_node(mapping);
  const size_t begin = n.kind == pickle::Kind::kDict ? 0 : n.list_items;
  for (size_t i = begin; i + 1 < n.items.size(); i += 2) {
    auto k = doc.AsStr(n.items[i]);
    if (k && *k == key) return &n.items[i + 1];
  }
  return nullptr;
}

Result<std::string> UniversalExpertPickle(DType dtype, const std::vector<int64_t>& shape,
                                          bool requires_grad, int64_t ep_num_experts) {
  pickle::Document doc;
  const pickle::NodeId param = doc.AddStr("param");
  UCFS_ASSIGN_OR_RETURN(pickle::NodeId tensor,
                        AddContiguousTensor(doc, dtype, shape, requires_grad));
  doc.set_root(doc.AddDict({param, tensor, doc.AddStr("cat_dim"), doc.AddInt(0),
                            doc.AddStr("is_expert_param"), doc.AddBool(true),
                            doc.AddStr("ep_num_experts"), doc.AddInt(ep_num_experts)}));
  return pickle::Write(doc);
}

Result<std::string> NumberPickle(double value, bool is_float) {
  pickle::Document doc;
  if (is_float) {
    doc.set_root(doc.AddFloat(value));
  } else {
    if (!(value >= -0x1p63 && value < 0x1p63)) {
      return Status::NotSupported("an int step of " + std::to_string(value) +
                                  " does not fit an int64");
    }
    doc.set_root(doc.AddInt(static_cast<int64_t>(value)));
  }
  return pickle::Write(doc);
}

}  // namespace ucfs
