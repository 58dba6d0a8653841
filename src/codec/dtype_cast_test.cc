#include "ucfs/codec/dtype_cast.h"

#include <gtest/gtest.h>

#include <cstring>

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

}  // namespace
}  // namespace ucfs
