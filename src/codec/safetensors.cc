#include "ucfs/codec/safetensors.h"

#include <nlohmann/json.hpp>

#include "base/byte_order.h"
#include "ucfs/base/checked_math.h"

namespace ucfs {

std::optional<std::string_view> SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return "F64";
    case DType::kFloat32:
      return "F32";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kInt64:
      return "I64";
    case DType::kInt32:
      return "I32";
    case DType::kInt16:
      return "I16";
    case DType::kInt8:
      return "I8";
    case DType::kUInt8:
      return "U8";
    case DType::kBool:
      return "BOOL";
    default:
      return std::nullopt;
  }
}

Result<SafetensorsHeader> MakeSafetensorsHeader(
    const std::vector<SafetensorsEntry>& entries,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  SafetensorsHeader out;
  // Key order as the tensors come (the data is laid out in that order).
  nlohmann::ordered_json fields;
  fields["__metadata__"] = nlohmann::ordered_json::object();
  for (const auto& [key, value] : metadata) fields["__metadata__"][key] = value;
  uint64_t at = 0;
  for (const SafetensorsEntry& e : entries) {
    auto dtype = SafetensorsDType(e.dtype);
    if (!dtype) {
      return Status::NotSupported(e.name + ": no safetensors dtype for " +
                                  std::string(Info(e.dtype).torch_name));
    }
    auto end = CheckedAdd(at, e.bytes, kMaxFileQuantity);
    if (!end) return Status::Corruption(e.name + ": the tensors are more than 2^62 bytes in all");
    fields[e.name] = {{"dtype", *dtype}, {"shape", e.shape}, {"data_offsets", {at, *end}}};
    out.data_starts.push_back(at);
    at = *end;
  }
  // A name that is not UTF-8 is written with U+FFFD in its place, not
  // refused: the header stays valid JSON.
  std::string json = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // The data starts 8-aligned, as the reference writer pads the header.
  json.append((8 - json.size() % 8) % 8, ' ');
  AppendLE64(&out.bytes, json.size());
  out.bytes += json;
  out.data_size = at;
  return out;
}

std::string ShardIndexJson(uint64_t total, const std::map<std::string, std::string>& weight_map) {
  nlohmann::json index;  // std::map underneath: keys sorted
  index["metadata"]["total_size"] = total;
  index["weight_map"] = weight_map;
  return index.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ucfs
