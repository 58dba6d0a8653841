#include "ucfs/codec/torch_tensor.h"

#include <array>

#include "ucfs/base/checked_math.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

constexpr std::array<DTypeInfo, 18> kDTypes = {{
    {DType::kFloat64, "DoubleStorage", "float64", 8},
    {DType::kFloat32, "FloatStorage", "float32", 4},
    {DType::kFloat16, "HalfStorage", "float16", 2},
    {DType::kBFloat16, "BFloat16Storage", "bfloat16", 2},
    {DType::kInt64, "LongStorage", "int64", 8},
    {DType::kInt32, "IntStorage", "int32", 4},
    {DType::kInt16, "ShortStorage", "int16", 2},
    {DType::kInt8, "CharStorage", "int8", 1},
    {DType::kUInt8, "ByteStorage", "uint8", 1},
    {DType::kBool, "BoolStorage", "bool", 1},
    {DType::kComplex64, "ComplexFloatStorage", "complex64", 8},
    {DType::kComplex128, "ComplexDoubleStorage", "complex128", 16},
    {DType::kQInt8, "QInt8Storage", "qint8", 1},
    {DType::kQUInt8, "QUInt8Storage", "quint8", 1},
    {DType::kQInt32, "QInt32Storage", "qint32", 4},
    {DType::kQUInt4x2, "QUInt4x2Storage", "quint4x2", 1},
    {DType::kQUInt2x4, "QUInt2x4Storage", "quint2x4", 1},
    {DType::kUntyped, "UntypedStorage", "uint8", 1},
}};

Status Malformed(const Document& doc, NodeId id, const std::string& what) {
  return Status::Corruption("malformed tensor " + doc.Repr(id, 160) + ": " + what);
}

}  // namespace

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat64 || dtype == DType::kFloat32 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

std::optional<DType> DTypeFromStorageClass(std::string_view storage_class) {
  for (const auto& info : kDTypes) {
    if (info.storage_class == storage_class) return info.dtype;
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromTorchName(std::string_view name) {
  static constexpr std::pair<std::string_view, DType> kAliases[] = {
      {"float", DType::kFloat32}, {"double", DType::kFloat64}, {"half", DType::kFloat16},
      {"long", DType::kInt64},    {"int", DType::kInt32},      {"short", DType::kInt16},
  };
  for (const auto& [alias, dtype] : kAliases) {
    if (alias == name) return dtype;
  }
  for (const auto& info : kDTypes) {
    if (info.dtype != DType::kUntyped && info.torch_name == name) return info.dtype;
  }
  return std::nullopt;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t NumelOf(const std::vector<int64_t>& shape) {
  // Shapes reaching here were checked (MatchTensor, Checkpoint::Open); one
  // that was not is a bug, and saturating beats serving a wrapped size.
  return CheckedShapeProduct(shape).value_or(kMaxFileQuantity);
}

uint64_t TensorRef::numel() const { return NumelOf(shape); }

bool TensorRef::contiguous() const {
  if (numel() == 0) return true;  // nothing to lay out; torch agrees
  uint64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && static_cast<uint64_t>(stride[i]) != expected) return false;
    // Cannot fail: the running product is a prefix of numel() <= 2^62, which
    // MatchTensor checked.
    expected = CheckedMul(expected, static_cast<uint64_t>(shape[i])).value_or(kMaxFileQuantity);
  }
  return true;
}

std::optional<std::vector<int64_t>> MatchShape(const Document& doc, NodeId id) {
  if (id == pickle::kNoNode) return std::nullopt;
  const auto& n = doc.node(id);
  if (n.kind == Kind::kReduce && doc.IsGlobal(n.a, "torch", "Size")) {
    auto args = doc.SequenceItems(n.b);
    if (!args || args->size() != 1) return std::nullopt;
    return MatchShape(doc, (*args)[0]);
  }
  if (n.kind != Kind::kTuple && n.kind != Kind::kList) return std::nullopt;
  std::vector<int64_t> dims;
  for (NodeId item : n.items) {
    auto v = doc.AsInt(item);
    if (!v || *v < 0) return std::nullopt;
    dims.push_back(*v);
  }
  return dims;
}

namespace {

// _rebuild_tensor_v2 or _v3: the calls that rebuild a plain tensor.
bool IsRebuildTensor(const Document& doc, NodeId fn) {
  return doc.IsGlobal(fn, "torch._utils", "_rebuild_tensor_v2") ||
         doc.IsGlobal(fn, "torch._utils", "_rebuild_tensor_v3");
}

// _rebuild_from_type_v2(func, type, args, state): replaces `*args` by the
// inner call's and `*rebuild_fn` by its function.
Status UnwrapFromTypeV2(const Document& doc, NodeId id, NodeId* rebuild_fn,
                        std::vector<NodeId>* args) {
  if (args->size() < 3) return Malformed(doc, id, "_rebuild_from_type_v2 needs 3 arguments");
  auto inner_args = doc.SequenceItems((*args)[2]);
  if (!inner_args) return Malformed(doc, id, "_rebuild_from_type_v2 arguments not a tuple");
  // The inner call is func(*args); func must be a tensor rebuild.
  const auto& func = doc.node((*args)[0]);
  if (func.kind != Kind::kGlobal) return Malformed(doc, id, "rebuild function is not a global");
  if (!IsRebuildTensor(doc, (*args)[0])) {
    return Malformed(doc, id, "unknown rebuild function " + func.text + "." + func.name);
  }
  *rebuild_fn = (*args)[0];
  *args = std::move(*inner_args);
  return Status::OK();
}

// _rebuild_parameter(data, requires_grad, hooks): the tensor `data` rebuilds.
Result<std::optional<TensorRef>> MatchParameter(const Document& doc, NodeId id,
                                                const std::vector<NodeId>& args) {
  if (args.size() < 2) return Malformed(doc, id, "_rebuild_parameter needs 2 arguments");
  // The data is a plain tensor: refuse wrappers of wrappers, which
  // would make this recursion as deep as the input wants.
  const auto& data = doc.node(args[0]);
  if (data.kind != Kind::kReduce || !IsRebuildTensor(doc, data.a)) {
    return Malformed(doc, id, "_rebuild_parameter data is not a plain tensor");
  }
  UCFS_ASSIGN_OR_RETURN(auto inner, MatchTensor(doc, args[0]));
  if (!inner) return Malformed(doc, id, "_rebuild_parameter data is not a tensor");
  auto rg = doc.AsInt(args[1]);
  if (!rg) return Malformed(doc, id, "requires_grad is not a bool");
  inner->node = id;
  inner->requires_grad = *rg != 0;
  return inner;
}

// The storage named by the persistent id `storage`: its record key,
// location, dtype and element count.
Status ReadStorage(const Document& doc, NodeId id, NodeId storage, TensorRef* t) {
  const auto& pid_node = doc.node(storage);
  if (pid_node.kind != Kind::kPersistentId)
    return Malformed(doc, id, "storage is not a persistent id");
  auto pid = doc.SequenceItems(pid_node.a);
  if (!pid || pid->size() < 5) return Malformed(doc, id, "persistent id is not a 5-tuple");
  auto tag = doc.AsStr((*pid)[0]);
  if (!tag || *tag != "storage") return Malformed(doc, id, "persistent id is not a 'storage' id");
  const auto& cls = doc.node((*pid)[1]);
  if (cls.kind != Kind::kGlobal || cls.text != "torch") {
    return Malformed(doc, id, "storage type is not a torch global");
  }
  auto dtype = DTypeFromStorageClass(cls.name);
  if (!dtype) return Malformed(doc, id, "unknown storage type torch." + cls.name);
  auto key = doc.AsStr((*pid)[2]);
  auto location = doc.AsStr((*pid)[3]);
  auto storage_numel = doc.AsInt((*pid)[4]);
  if (!key || !location || !storage_numel || *storage_numel < 0) {
    return Malformed(doc, id, "persistent id fields have the wrong types");
  }
  t->storage_key = std::string(*key);
  t->location = std::string(*location);
  t->dtype = *dtype;
  t->storage_numel = static_cast<uint64_t>(*storage_numel);
  return Status::OK();
}

// The storage offset, size, stride and requires_grad rebuild arguments.
Status ReadGeometry(const Document& doc, NodeId id, const std::vector<NodeId>& args, TensorRef* t) {
  auto offset = doc.AsInt(args[1]);
  auto shape = MatchShape(doc, args[2]);
  auto stride = MatchShape(doc, args[3]);
  auto rg = doc.AsInt(args[4]);
  if (!offset || *offset < 0 || !shape || !stride || !rg || shape->size() != stride->size()) {
    return Malformed(doc, id, "offset, size, stride or requires_grad malformed");
  }
  t->storage_offset = static_cast<uint64_t>(*offset);
  t->shape = std::move(*shape);
  t->stride = std::move(*stride);
  t->requires_grad = *rg != 0;
  if (t->shape.size() > 64) return Malformed(doc, id, "more than 64 dimensions");
  if (!CheckedShapeProduct(t->shape)) {
    return Malformed(doc, id, "shape " + ShapeString(t->shape) + " has more than 2^62 elements");
  }
  return Status::OK();
}

// _rebuild_tensor_v3's dtype argument, which overrides the storage's.
Status ReadV3DType(const Document& doc, NodeId id, const std::vector<NodeId>& args, TensorRef* t) {
  if (args.size() < 7) return Malformed(doc, id, "_rebuild_tensor_v3 without a dtype");
  const auto& dt = doc.node(args[6]);
  auto real =
      dt.kind == Kind::kGlobal && dt.text == "torch" ? DTypeFromTorchName(dt.name) : std::nullopt;
  if (!real) return Malformed(doc, id, "_rebuild_tensor_v3 dtype is not a torch dtype");
  // An untyped storage counts bytes; express the storage in elements.
  const uint32_t es = Info(*real).element_size;
  if (t->dtype == DType::kUntyped) {
    if (t->storage_numel % es != 0)
      return Malformed(doc, id, "untyped storage not a whole number of elements");
    t->storage_numel /= es;
  }
  t->dtype = *real;
  return Status::OK();
}

// The storage, the tensor's bytes and its offset must all be sizes a file
// can have, so that byte_offset(), byte_size() and storage bytes never
// wrap wherever they are used.
Status CheckSizesFitFile(const Document& doc, NodeId id, const TensorRef& t) {
  const uint64_t es = t.element_size();
  if (!CheckedMul(t.storage_numel, es, kMaxFileQuantity)) {
    return Malformed(doc, id,
                     "a storage of " + std::to_string(t.storage_numel) + " elements of " +
                         std::to_string(es) + " bytes is more than 2^62 bytes");
  }
  if (!CheckedMul(t.numel(), es, kMaxFileQuantity)) {
    return Malformed(doc, id, "shape " + ShapeString(t.shape) + " is more than 2^62 bytes");
  }
  if (t.storage_offset > t.storage_numel) {
    return Malformed(doc, id,
                     "storage offset " + std::to_string(t.storage_offset) +
                         " is past the end of a storage of " + std::to_string(t.storage_numel));
  }
  return Status::OK();
}

// Every element the tensor can reach must lie inside its storage.
Status CheckReachInsideStorage(const Document& doc, NodeId id, const TensorRef& t) {
  if (t.numel() == 0) return Status::OK();
  uint64_t last = t.storage_offset;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.stride[i] < 0) return Malformed(doc, id, "negative stride");
    auto reach = CheckedMulAdd(static_cast<uint64_t>(t.shape[i] - 1),
                               static_cast<uint64_t>(t.stride[i]), last);
    if (!reach) return Malformed(doc, id, "strides overflow");
    last = *reach;
  }
  if (last >= t.storage_numel) {
    return Malformed(doc, id,
                     "reaches element " + std::to_string(last) + " of a storage of " +
                         std::to_string(t.storage_numel));
  }
  return Status::OK();
}

}  // namespace

Result<std::optional<TensorRef>> MatchTensor(const Document& doc, NodeId id) {
  if (id == pickle::kNoNode) return std::optional<TensorRef>();
  const auto& call = doc.node(id);
  if (call.kind != Kind::kReduce) return std::optional<TensorRef>();
  auto args = doc.SequenceItems(call.b);
  if (!args) return std::optional<TensorRef>();
  NodeId rebuild_fn = call.a;

  // Wrappers: _rebuild_from_type_v2(func, type, args, state) and
  // _rebuild_parameter(data, requires_grad, hooks) hold an inner tensor call.
  if (doc.IsGlobal(call.a, "torch._tensor", "_rebuild_from_type_v2")) {
    UCFS_RETURN_IF_ERROR(UnwrapFromTypeV2(doc, id, &rebuild_fn, &*args));
  } else if (doc.IsGlobal(call.a, "torch._utils", "_rebuild_parameter") ||
             doc.IsGlobal(call.a, "torch._utils", "_rebuild_parameter_with_state")) {
    return MatchParameter(doc, id, *args);
  } else if (!IsRebuildTensor(doc, call.a)) {
    return std::optional<TensorRef>();
  }
  const bool v3 = doc.IsGlobal(rebuild_fn, "torch._utils", "_rebuild_tensor_v3");

  // (storage_pid, storage_offset, size, stride, requires_grad, hooks[, dtype][, metadata])
  if (args->size() < 5) return Malformed(doc, id, "fewer than 5 rebuild arguments");
  TensorRef t;
  t.node = id;
  UCFS_RETURN_IF_ERROR(ReadStorage(doc, id, (*args)[0], &t));
  UCFS_RETURN_IF_ERROR(ReadGeometry(doc, id, *args, &t));
  if (v3) UCFS_RETURN_IF_ERROR(ReadV3DType(doc, id, *args, &t));
  UCFS_RETURN_IF_ERROR(CheckSizesFitFile(doc, id, t));
  UCFS_RETURN_IF_ERROR(CheckReachInsideStorage(doc, id, t));
  return std::optional<TensorRef>(std::move(t));
}

}  // namespace ucfs
