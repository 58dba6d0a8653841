// The values a mutation program puts into a pickle: edge-case ints, floats,
// strings and globals chosen by an operand byte (often derived from the value
// they replace), and new nodes made of them.
#ifndef UCFS_TESTS_FUZZ_PICKLE_VALUES_H_
#define UCFS_TESTS_FUZZ_PICKLE_VALUES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "pickle_surgery.h"

namespace ucfs_fuzz {

// `which` picks an edit of `old` (off by one, doubled, negated ...) or a
// fixed edge value (0, -1, 2^31, 2^62 ...); `raw` is a free 64-bit operand.
int64_t IntValue(uint8_t which, int64_t old, uint64_t raw);
double FloatValue(uint8_t which, double old);
std::string StrValue(uint8_t which, std::string_view old);
// (module, name) of a global: torch storage classes first, then others.
std::pair<const char*, const char*> GlobalValue(uint8_t which);

// A node whose Python value is an int too large for int64 (pickle LONG1).
NodeId AddLong(Document& doc, uint8_t which);
// A new node made from (gen, x); `into` is the container it will sit in (a
// shared node must not reach it); `other`, another rank's file, may give a
// node to copy. kNoNode when nothing fits.
NodeId MakeValue(Document& doc, uint8_t gen, uint8_t x, uint64_t raw, NodeId into,
                 const Document* other);

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_PICKLE_VALUES_H_
