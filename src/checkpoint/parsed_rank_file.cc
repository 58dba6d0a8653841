#include "checkpoint/parsed_rank_file.h"

#include <spdlog/spdlog.h>

#include <bit>
#include <chrono>
#include <cstring>

#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

Result<uint64_t> ParsedRankFile::DataOffset(const TensorRef& t) const {
  UCFS_ASSIGN_OR_RETURN(const ZipRecord* rec, Record(t));
  auto offset = CheckedAdd(rec->data_offset, t.byte_offset());
  if (!offset) return Error("storage record '" + Printable(rec->name) + "': offset overflows");
  return *offset;
}

Result<const ZipRecord*> ParsedRankFile::Record(const TensorRef& t) const {
  const ZipRecord* rec = summary.Find("data/" + t.storage_key);
  if (rec == nullptr) return Error("no storage record 'data/" + t.storage_key + "'");
  if (rec->method != 0) {
    return Status::NotSupported(path() + ": storage record '" + Printable(rec->name) +
                                "' is compressed; ucfs serves tensor bytes in place and needs "
                                "stored records (torch.save never compresses them)");
  }
  // storage_numel goes up to 2^63: the product may wrap.
  auto need = CheckedMul(t.storage_numel, t.element_size());
  if (!need || rec->size < *need) {
    return Error("storage record '" + Printable(rec->name) + "' holds " +
                 std::to_string(rec->size) + " bytes, its storage of " +
                 std::to_string(t.storage_numel) + " " + std::string(Info(t.dtype).torch_name) +
                 " elements needs " +
                 (need ? std::to_string(*need) : std::string("more than 2^64")));
  }
  return rec;
}

Result<double> ParsedRankFile::ScalarValue(const TensorRef& t) const {
  UCFS_RETURN_IF_ERROR(Record(t).status());
  const std::string* bytes = summary.SmallRecord("data/" + t.storage_key);
  auto end = CheckedAdd(t.byte_offset(), t.element_size());
  if (bytes == nullptr || !end || bytes->size() < *end) {
    return Error("scalar record 'data/" + t.storage_key + "' is not small");
  }
  auto v = DecodeScalar(bytes->data() + t.byte_offset(), t.dtype);
  if (!v.ok()) return v.status().Annotate(path());
  return v;
}

Result<std::optional<TensorRef>> ParsedRankFile::MatchTensor(NodeId id) const {
  auto t = ucfs::MatchTensor(*doc, id);
  if (!t.ok()) return t.status().Annotate(path());
  return t;
}

Result<TensorRef> ParsedRankFile::RequireTensor(NodeId id, const std::string& what) const {
  auto t = ucfs::MatchTensor(*doc, id);
  if (!t.ok()) return t.status().Annotate(path() + ": " + what);
  if (!t->has_value()) return Error(what + " is not a tensor");
  return std::move(**t);
}

Result<ParsedRankFile> LoadParsedRankFile(TorchFileSource& source, const std::string& path) {
  auto start = std::chrono::steady_clock::now();
  ParsedRankFile tf;
  UCFS_ASSIGN_OR_RETURN(tf.summary, source.Summarize(path));
  UCFS_RETURN_IF_ERROR(CheckTorchLoadable(tf.summary));
  auto doc = pickle::Parse(tf.summary.pickle);
  if (!doc.ok()) return doc.status().Annotate(path + ": data.pkl");
  tf.doc = std::make_shared<Document>(std::move(doc).value());
  spdlog::debug(
      "parsed {} ({} records, {} pickle bytes, {} values) in {:.3f} ms", path,
      tf.summary.records.size(), tf.summary.pickle.size(), tf.doc->size(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return tf;
}

// Elements of a param_shapes shape, or nullopt past 2^62 / 16: any state of

std::optional<uint64_t> CheckedNumel(const std::vector<int64_t>& shape) {
  return CheckedShapeProduct(shape, kMaxFileQuantity / 16);
}

// ZeroStageEnum is pickled as getattr(ZeroStageEnum, 'weights') by Python
// 3.11, as ZeroStageEnum(3) by older Pythons; some writers store a plain int.
std::optional<int> DecodeZeroStage(const Document& doc, NodeId id) {
  if (auto v = doc.AsInt(id)) return static_cast<int>(*v);
  if (id == pickle::kNoNode) return std::nullopt;
  const auto& n = doc.node(id);
  if (n.kind != Kind::kReduce) return std::nullopt;
  auto args = doc.SequenceItems(n.b);
  if (!args) return std::nullopt;
  if (doc.IsGlobal(n.a, "__builtin__", "getattr") || doc.IsGlobal(n.a, "builtins", "getattr")) {
    if (args->size() != 2) return std::nullopt;
    auto name = doc.AsStr((*args)[1]);
    if (!name) return std::nullopt;
    static constexpr std::pair<std::string_view, int> kNames[] = {{"disabled", 0},
                                                                  {"optimizer_states", 1},
                                                                  {"gradients", 2},
                                                                  {"weights", 3},
                                                                  {"max_stage", 3}};
    for (const auto& [k, v] : kNames) {
      if (*name == k) return v;
    }
    return std::nullopt;
  }
  if (doc.node(n.a).kind == Kind::kGlobal && doc.node(n.a).name == "ZeroStageEnum" &&
      args->size() == 1) {
    if (auto v = doc.AsInt((*args)[0])) return static_cast<int>(*v);
  }
  return std::nullopt;
}

Result<double> DecodeScalar(const char* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return static_cast<double>(f);
    }
    case DType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::kBFloat16: {
      uint32_t bits =
          static_cast<uint32_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8))
          << 16;
      return static_cast<double>(std::bit_cast<float>(bits));
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<double>(v);
    }
    default:
      return Status::NotSupported("scalar state of dtype " + std::string(Info(dtype).torch_name));
  }
}

// Builds a Checkpoint from its files. One method per part of the model, in

}  // namespace ucfs
