#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>

#include "ucfs/tools/verify.h"

// Counting NaN and Inf in each floating dtype, as `ucfs verify` does over
// every state (CountNonFinite, IsNonFinite).
namespace ucfs {
namespace {

template <typename U>
std::string Bits(std::initializer_list<U> values) {
  std::string out(values.size() * sizeof(U), '\0');
  size_t i = 0;
  for (U v : values) std::memcpy(out.data() + sizeof(U) * i++, &v, sizeof(U));
  return out;
}

// IEEE 754: an all-ones exponent is Inf with a zero mantissa, else NaN.
TEST(CountNonFinite, EveryFloatingDtype) {
  const std::string f32 = Bits<uint32_t>({0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                          0xffffffffu, 0x7f7fffffu, 0x00000000u, 0x80000001u});
  NonFiniteTally t = CountNonFinite(f32.data(), 8, DType::kFloat32);
  EXPECT_EQ(t.nan, 3u);
  EXPECT_EQ(t.inf, 2u);
  const std::string f64 = Bits<double>({std::numeric_limits<double>::infinity(),
                                        -std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::max(), 1.0});
  t = CountNonFinite(f64.data(), 4, DType::kFloat64);
  EXPECT_EQ(t.nan, 1u);
  EXPECT_EQ(t.inf, 1u);
  // bfloat16: the top half of a float32.
  const std::string bf16 = Bits<uint16_t>({0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x7f7f, 0x3f80});
  t = CountNonFinite(bf16.data(), 6, DType::kBFloat16);
  EXPECT_EQ(t.nan, 2u);
  EXPECT_EQ(t.inf, 2u);
  // float16: 5 exponent bits; 0x7bff is 65504, the largest finite.
  const std::string f16 = Bits<uint16_t>({0x7c00, 0xfc00, 0x7e00, 0x7bff, 0x3c00});
  t = CountNonFinite(f16.data(), 5, DType::kFloat16);
  EXPECT_EQ(t.nan, 1u);
  EXPECT_EQ(t.inf, 2u);
  EXPECT_TRUE(IsNonFinite(f16.data() + 4, DType::kFloat16));
  EXPECT_FALSE(IsNonFinite(f16.data() + 6, DType::kFloat16));
  // Integers have no NaN.
  const std::string i32 = Bits<uint32_t>({0x7f800000u});
  t = CountNonFinite(i32.data(), 1, DType::kInt32);
  EXPECT_EQ(t.nan + t.inf, 0u);
}

}  // namespace
}  // namespace ucfs
