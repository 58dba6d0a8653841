#include "ucfs/base/checked_math.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace ucfs {
namespace {

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

TEST(CheckedMath, MulIsExactOrNothing) {
  EXPECT_EQ(CheckedMul<uint64_t>(3, 7), 21u);
  EXPECT_EQ(CheckedMul<uint64_t>(0, kMax64), 0u);
  EXPECT_EQ(CheckedMul<uint64_t>(uint64_t{1} << 32, uint64_t{1} << 31), uint64_t{1} << 63);
  EXPECT_EQ(CheckedMul<uint64_t>(uint64_t{1} << 32, uint64_t{1} << 32), std::nullopt);
  // The storage of the issue: 2^62 elements of 4 bytes wrap to 0.
  EXPECT_EQ(CheckedMul<uint64_t>(uint64_t{1} << 62, 4), std::nullopt);
  EXPECT_EQ(CheckedMul<uint64_t>(kMax64, 2), std::nullopt);
  // Signed: overflow either way, and the one product that only fits unsigned.
  EXPECT_EQ(CheckedMul<int64_t>(-3, 7), -21);
  EXPECT_EQ(CheckedMul<int64_t>(std::numeric_limits<int64_t>::min(), -1), std::nullopt);
  EXPECT_EQ(CheckedMul<int64_t>(int64_t{1} << 62, 2), std::nullopt);
  EXPECT_EQ(CheckedMul<int64_t>(int64_t{1} << 62, -2), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(CheckedMul<uint32_t>(65536, 65536), std::nullopt);
}

TEST(CheckedMath, AddAndSub) {
  EXPECT_EQ(CheckedAdd<uint64_t>(kMax64 - 1, 1), kMax64);
  EXPECT_EQ(CheckedAdd<uint64_t>(kMax64, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd<int64_t>(std::numeric_limits<int64_t>::max(), 1), std::nullopt);
  EXPECT_EQ(CheckedAdd<int64_t>(-5, 3), -2);
  EXPECT_EQ(CheckedSub<uint64_t>(3, 5), std::nullopt);
  EXPECT_EQ(CheckedSub<uint64_t>(5, 3), 2u);
  EXPECT_EQ(CheckedSub<int64_t>(std::numeric_limits<int64_t>::min(), 1), std::nullopt);
}

TEST(CheckedMath, MulAddChecksBothSteps) {
  EXPECT_EQ(CheckedMulAdd<uint64_t>(10, 4, 7), 47u);
  EXPECT_EQ(CheckedMulAdd<uint64_t>(uint64_t{1} << 62, 4, 0), std::nullopt);  // the product
  EXPECT_EQ(CheckedMulAdd<uint64_t>(uint64_t{1} << 62, 2, uint64_t{1} << 63), std::nullopt);
  EXPECT_EQ(CheckedMulAdd<uint64_t>(uint64_t{1} << 62, 2, (uint64_t{1} << 63) - 1), kMax64);
}

TEST(CheckedMath, BoundedVariantsRefuseWhatFitsButExceedsTheLimit) {
  EXPECT_EQ(CheckedMul<uint64_t>(uint64_t{1} << 31, 2, uint64_t{1} << 32), uint64_t{1} << 32);
  EXPECT_EQ(CheckedMul<uint64_t>(uint64_t{1} << 31, 4, uint64_t{1} << 32), std::nullopt);
  EXPECT_EQ(CheckedMul<uint64_t>(kMax64, 2, kMax64), std::nullopt);
  EXPECT_EQ(CheckedAdd<uint64_t>(kMaxFileQuantity, 0, kMaxFileQuantity), kMaxFileQuantity);
  EXPECT_EQ(CheckedAdd<uint64_t>(kMaxFileQuantity, 1, kMaxFileQuantity), std::nullopt);
  EXPECT_EQ(CheckedAdd<uint64_t>(kMax64, 1, kMax64), std::nullopt);
}

TEST(CheckedMath, ShapeProduct) {
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{}), 1u);  // a 0-dim tensor
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{3, 5, 7}), 105u);
  // The shape of the issue, whose product wraps to 5 in uint64_t.
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{3, 6148914691236517207}), std::nullopt);
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{int64_t{1} << 31, int64_t{1} << 31}),
            uint64_t{1} << 62);
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{int64_t{1} << 31, int64_t{1} << 31, 2}),
            std::nullopt);
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{4, 4}, 15), std::nullopt);
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{4, 4}, 16), 16u);
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{2, -1}), std::nullopt);
  // A zero dimension empties the tensor, wherever it is; negatives still fail.
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{0, std::numeric_limits<int64_t>::max(), 9}),
            0u);
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 0}), 0u);
  EXPECT_EQ(CheckedShapeProduct(std::vector<int64_t>{0, -3}), std::nullopt);
}

// Usable in constant expressions, like the arithmetic it replaces.
static_assert(CheckedMul<uint64_t>(6, 7) == 42u);
static_assert(!CheckedAdd<uint32_t>(0xffffffffu, 1u));

}  // namespace
}  // namespace ucfs
