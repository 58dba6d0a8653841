// Overflow-checked arithmetic for every size, offset, element count, shape
// product and stride computed from file data.
//
// A checkpoint is untrusted input: a storage numel of 2^62 times an element
// size of 4 wraps to 0, and a shape [3, 6148914691236517207] has a product
// that wraps to 5. Either turns into wrong bytes served without an error
// unless every such computation is checked. These helpers are the one way
// ucfs does it: each returns std::nullopt when the exact result does not fit
// the type (or exceeds the given bound), never a wrapped value, and is built
// on the compiler's __builtin_*_overflow, so it is exact and UBSan clean for
// signed and unsigned types alike.
#ifndef UCFS_BASE_CHECKED_MATH_H_
#define UCFS_BASE_CHECKED_MATH_H_

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>

namespace ucfs {

// The largest byte size or element count ucfs accepts for anything read from
// a file: a tensor's storage, a record, an archive. 2^62 leaves room for one
// more addition of a like value (an offset plus a size) without wrapping a
// uint64_t, and fits off_t.
inline constexpr uint64_t kMaxFileQuantity = uint64_t{1} << 62;

// a * b, or nullopt if it does not fit T.
template <std::integral T>
constexpr std::optional<T> CheckedMul(T a, T b) {
  T out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt if it does not fit T.
template <std::integral T>
constexpr std::optional<T> CheckedAdd(T a, T b) {
  T out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a - b, or nullopt if it does not fit T (for unsigned T: if b > a).
template <std::integral T>
constexpr std::optional<T> CheckedSub(T a, T b) {
  T out;
  if (__builtin_sub_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a * b + c, or nullopt if any step does not fit T: an element offset scaled
// to bytes and added to a base offset.
template <std::integral T>
constexpr std::optional<T> CheckedMulAdd(T a, T b, T c) {
  auto m = CheckedMul(a, b);
  if (!m) return std::nullopt;
  return CheckedAdd(*m, c);
}

// The same, with a bound: nullopt when the exact result exceeds `limit`.
template <std::unsigned_integral T>
constexpr std::optional<T> CheckedMul(T a, T b, T limit) {
  auto r = CheckedMul(a, b);
  if (!r || *r > limit) return std::nullopt;
  return r;
}
template <std::unsigned_integral T>
constexpr std::optional<T> CheckedAdd(T a, T b, T limit) {
  auto r = CheckedAdd(a, b);
  if (!r || *r > limit) return std::nullopt;
  return r;
}

// The product of a shape's dimensions (its element count), or nullopt when a
// dimension is negative or the product exceeds `limit`. An empty shape (a
// 0-dim tensor) has one element. A zero dimension makes the product 0
// whatever the others are, as in torch; the others must still be
// non-negative.
constexpr std::optional<uint64_t> CheckedShapeProduct(std::span<const int64_t> shape,
                                                      uint64_t limit = kMaxFileQuantity) {
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    zero = zero || d == 0;
  }
  if (zero) return 0;
  uint64_t n = 1;
  for (int64_t d : shape) {
    auto next = CheckedMul<uint64_t>(n, static_cast<uint64_t>(d), limit);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

}  // namespace ucfs

#endif  // UCFS_BASE_CHECKED_MATH_H_
