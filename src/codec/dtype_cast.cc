#include "ucfs/codec/dtype_cast.h"

#include <bit>
#include <cstring>

#include "base/byte_order.h"

namespace ucfs {
namespace {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);  // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
  }
  return std::bit_cast<float>(bits);
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Appends the whole elements of `in`, each a little-endian T made a float
// by `convert`.
template <typename T, typename Convert>
void WidenElements(std::string_view in, std::string* out, Convert convert) {
  const size_t n = in.size() / sizeof(T);
  const size_t at = out->size();
  out->resize(at + n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float v = convert(Load<T>(in.data() + i * sizeof(T)));
    std::memcpy(out->data() + at + i * 4, &v, 4);
  }
}

}  // namespace

uint16_t Float32BitsToBFloat16(uint32_t bits) {
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  // Add just under half an ulp, plus one when the kept part is odd: ties go
  // to even, and a carry into the exponent rounds up to infinity.
  const uint32_t bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + bias) >> 16);
}

uint16_t Float32BitsToFloat16(uint32_t bits) {
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t exponent = (bits >> 23) & 0xFFu;
  uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0xFF) {
    if (mantissa == 0) return static_cast<uint16_t>(sign | 0x7C00u);  // infinity
    return static_cast<uint16_t>(sign | 0x7E00u | (mantissa >> 13));  // quiet NaN
  }
  // The exponent re-biased for float16 (bias 15 instead of 127).
  const int32_t e = static_cast<int32_t>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);  // too large: infinity
  auto round = [](uint32_t value, uint32_t shift) {
    const uint32_t kept = value >> shift;
    const uint32_t rest = value & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  };
  if (e <= 0) {
    // A float16 subnormal (or zero): the 24-bit significand scaled to units
    // of 2^-24, which may round up into the smallest normal.
    if (e < -10) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    mantissa |= 0x800000u;
    return static_cast<uint16_t>(sign | round(mantissa, static_cast<uint32_t>(14 - e)));
  }
  // A carry out of the mantissa bumps the exponent, up to infinity.
  return static_cast<uint16_t>(sign | round((static_cast<uint32_t>(e) << 23) | mantissa, 13));
}

Status CastFloat32(std::string_view in, DType to, std::string* out) {
  if (in.size() % 4 != 0)
    return Status::InvalidArgument("float32 bytes that are not whole elements");
  if (to == DType::kFloat32) {
    out->append(in);
    return Status::OK();
  }
  if (to != DType::kBFloat16 && to != DType::kFloat16) {
    return Status::InvalidArgument(std::string("float32 cannot be cast to ") +
                                   std::string(Info(to).torch_name) + " here");
  }
  const size_t n = in.size() / 4;
  const size_t at = out->size();
  out->resize(at + 2 * n);
  char* dst = out->data() + at;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = LoadLE32(in.data() + 4 * i);
    const uint16_t half =
        to == DType::kBFloat16 ? Float32BitsToBFloat16(bits) : Float32BitsToFloat16(bits);
    dst[2 * i] = static_cast<char>(half & 0xFF);
    dst[2 * i + 1] = static_cast<char>(half >> 8);
  }
  return Status::OK();
}

Status WidenToFloat32(std::string_view in, DType dtype, std::string* out) {
  auto value = [](auto v) { return static_cast<float>(v); };
  switch (dtype) {
    case DType::kFloat64:
      WidenElements<double>(in, out, value);
      break;
    case DType::kFloat16:
      WidenElements<uint16_t>(in, out, HalfToFloat);
      break;
    case DType::kBFloat16:  // the top half of a float32
      WidenElements<uint16_t>(
          in, out, [](uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); });
      break;
    case DType::kInt64:
      WidenElements<int64_t>(in, out, value);
      break;
    case DType::kInt32:
      WidenElements<int32_t>(in, out, value);
      break;
    case DType::kInt16:
      WidenElements<int16_t>(in, out, value);
      break;
    case DType::kInt8:
      WidenElements<int8_t>(in, out, value);
      break;
    case DType::kUInt8:
      WidenElements<uint8_t>(in, out, value);
      break;
    case DType::kBool:
      WidenElements<uint8_t>(in, out, [](uint8_t b) { return b != 0 ? 1.0f : 0.0f; });
      break;
    default:
      return Status::NotSupported("cannot convert " + std::string(Info(dtype).torch_name) +
                                  " to float32");
  }
  return Status::OK();
}

}  // namespace ucfs
