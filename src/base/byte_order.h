// Little-endian loads and appends for the zip and pickle codecs.
#ifndef UCFS_BASE_BYTE_ORDER_H_
#define UCFS_BASE_BYTE_ORDER_H_

#include <cstdint>
#include <cstring>
#include <string>

namespace ucfs {

inline uint16_t LoadLE16(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint16_t>(u[0] | (u[1] << 8));
}
inline uint32_t LoadLE32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) | (static_cast<uint32_t>(u[1]) << 8) |
         (static_cast<uint32_t>(u[2]) << 16) | (static_cast<uint32_t>(u[3]) << 24);
}
inline uint64_t LoadLE64(const char* p) {
  return static_cast<uint64_t>(LoadLE32(p)) | (static_cast<uint64_t>(LoadLE32(p + 4)) << 32);
}

// One append each, not a push_back a byte: the reshard view writes a zip
// header of each of a rank file's thousands of records this way.
template <typename T>
inline void AppendLE(std::string* out, T v) {
  char bytes[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(bytes, sizeof(T));
}
inline void AppendLE16(std::string* out, uint16_t v) { AppendLE(out, v); }
inline void AppendLE32(std::string* out, uint32_t v) { AppendLE(out, v); }
inline void AppendLE64(std::string* out, uint64_t v) { AppendLE(out, v); }

}  // namespace ucfs

#endif  // UCFS_BASE_BYTE_ORDER_H_
