#include "ucfs/codec/dtype_cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ucfs {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(DTypeCast, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(Float32BitsToBFloat16(Bits(1.0f)), 0x3F80);
  EXPECT_EQ(Float32BitsToBFloat16(Bits(-2.0f)), 0xC000);
  EXPECT_EQ(Float32BitsToBFloat16(0x3F808000u), 0x3F80);  // a tie, to even (down)
  EXPECT_EQ(Float32BitsToBFloat16(0x3F818000u), 0x3F82);  // a tie, to even (up)
  EXPECT_EQ(Float32BitsToBFloat16(0x3F808001u), 0x3F81);  // past the tie
  EXPECT_EQ(Float32BitsToBFloat16(0x7F7FFFFFu), 0x7F80);  // rounds up to infinity
  EXPECT_EQ(Float32BitsToBFloat16(0x7F800000u), 0x7F80);
  EXPECT_EQ(Float32BitsToBFloat16(0xFFC00001u), 0x7FC0);  // NaN, as c10::BFloat16
}

TEST(DTypeCast, Float16RoundsOverflowsAndKeepsSubnormals) {
  EXPECT_EQ(Float32BitsToFloat16(Bits(1.0f)), 0x3C00);
  EXPECT_EQ(Float32BitsToFloat16(Bits(-0.0f)), 0x8000);
  EXPECT_EQ(Float32BitsToFloat16(Bits(65504.0f)), 0x7BFF);  // the largest
  EXPECT_EQ(Float32BitsToFloat16(Bits(65519.0f)), 0x7BFF);
  EXPECT_EQ(Float32BitsToFloat16(Bits(65520.0f)), 0x7C00);  // the tie past it: infinity
  EXPECT_EQ(Float32BitsToFloat16(Bits(0x1p-24f)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(Float32BitsToFloat16(Bits(0x1p-25f)), 0x0000);  // half of it: to even, zero
  EXPECT_EQ(Float32BitsToFloat16(Bits(0x1.8p-25f)), 0x0001);
  EXPECT_EQ(Float32BitsToFloat16(Bits(0x1.ffcp-15f)), 0x0400);  // a tie up to the smallest normal
  EXPECT_EQ(Float32BitsToFloat16(Bits(1.0f + 0x1p-11f)), 0x3C00);  // a tie, to even
  EXPECT_EQ(Float32BitsToFloat16(Bits(1.0f + 0x3p-11f)), 0x3C02);
  EXPECT_EQ(Float32BitsToFloat16(0x7F800000u), 0x7C00);
  EXPECT_EQ(Float32BitsToFloat16(0x7FC00000u) & 0x7E00, 0x7E00);  // a quiet NaN
}

TEST(DTypeCast, CastFloat32WholeBuffers) {
  const float in[3] = {1.0f, -2.0f, 0.5f};
  std::string out;
  ASSERT_TRUE(
      CastFloat32(std::string_view(reinterpret_cast<const char*>(in), 12), DType::kBFloat16, &out)
          .ok());
  EXPECT_EQ(out, std::string("\x80\x3F\x00\xC0\x00\x3F", 6));
  out.clear();
  ASSERT_TRUE(
      CastFloat32(std::string_view(reinterpret_cast<const char*>(in), 12), DType::kFloat32, &out)
          .ok());
  EXPECT_EQ(out.size(), 12u);
  EXPECT_FALSE(CastFloat32("abc", DType::kFloat16, &out).ok());
  EXPECT_FALSE(CastFloat32("abcd", DType::kInt8, &out).ok());
}

Result<std::string> Widen(DType dtype, const std::string& bytes) {
  std::string out;
  UCFS_RETURN_IF_ERROR(WidenToFloat32(bytes, dtype, &out));
  return out;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <typename T, size_t N>
std::string Bytes(const T (&values)[N]) {
  return std::string(reinterpret_cast<const char*>(values), sizeof values);
}

// Buffers and frozen params in other dtypes become float32 as torch's
// .float() makes them.
TEST(WidenToFloat32, ConvertsLikeTorch) {
  // float16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal), inf.
  const uint16_t half[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00};
  auto f = Widen(DType::kFloat16, Bytes(half));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(Floats(*f), (std::vector<float>{1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f,
                                            std::numeric_limits<float>::infinity()}));
  const uint16_t nan16[] = {0x7e00};
  EXPECT_TRUE(std::isnan(Floats(*Widen(DType::kFloat16, Bytes(nan16)))[0]));
  // bfloat16 is the top half of a float32.
  const uint16_t bf[] = {0x3f80, 0xc0a0};
  EXPECT_EQ(Floats(*Widen(DType::kBFloat16, Bytes(bf))), (std::vector<float>{1.0f, -5.0f}));
  const int64_t ints[] = {-3, 1 << 20};
  EXPECT_EQ(Floats(*Widen(DType::kInt64, Bytes(ints))), (std::vector<float>{-3.0f, 1048576.0f}));
  const bool flags[] = {true, false};
  EXPECT_EQ(Floats(*Widen(DType::kBool, Bytes(flags))), (std::vector<float>{1.0f, 0.0f}));
  // Appended after what is there.
  std::string out = "xyz";
  ASSERT_TRUE(WidenToFloat32(Bytes(bf), DType::kBFloat16, &out).ok());
  EXPECT_EQ(out.size(), 3u + 8u);
  auto complex = Widen(DType::kComplex64, std::string(8, '\0'));
  ASSERT_FALSE(complex.ok());
  EXPECT_NE(complex.status().message().find("complex"), std::string::npos);
  std::string none;
  EXPECT_FALSE(WidenToFloat32("", DType::kComplex64, &none).ok());  // refused even with no bytes
}

}  // namespace
}  // namespace ucfs
