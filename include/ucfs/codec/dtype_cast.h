// float32 to bfloat16 or float16, as torch's Tensor.to() rounds: to
// nearest, ties to even, overflow to infinity, float16 subnormals kept.
// NaN becomes bfloat16's 0x7FC0 (c10::BFloat16 drops the sign and
// payload) or a quiet float16 NaN with the sign and the payload's top bits
// (as F16C's vcvtps2ph, which torch's CPU kernels use).
#ifndef UCFS_CODEC_DTYPE_CAST_H_
#define UCFS_CODEC_DTYPE_CAST_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "ucfs/base/status.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {

uint16_t Float32BitsToBFloat16(uint32_t bits);
uint16_t Float32BitsToFloat16(uint32_t bits);

// Appends the little-endian float32 elements of `in` cast to `to`
// (kFloat32: copied; kBFloat16, kFloat16) to `out`. InvalidArgument when
// `in` is not whole elements or `to` is another dtype.
Status CastFloat32(std::string_view in, DType to, std::string* out);

// Appends the little-endian elements of `dtype` in `in` widened to float32,
// as torch's .float() makes them (float16 subnormals, inf and NaN kept;
// integers and bools as their values), to `out`. NotSupported for a dtype
// with no such conversion (complex).
Status WidenToFloat32(std::string_view in, DType dtype, std::string* out);

}  // namespace ucfs

#endif  // UCFS_CODEC_DTYPE_CAST_H_
