// Little-endian loads and appends for the zip and pickle codecs, and the
// length-prefixed fields of ucfs's own encodings (the index's summaries,
// the tag snapshot).
#ifndef UCFS_BASE_BYTE_ORDER_H_
#define UCFS_BASE_BYTE_ORDER_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

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

// A string as its length (64 bits) and its bytes.
inline void AppendLengthPrefixed(std::string* out, std::string_view s) {
  AppendLE64(out, s.size());
  out->append(s);
}

// Reads what the appends above write, each read checked against what is
// left: false (and nothing consumed past the end) for input too short.
class LEReader {
 public:
  explicit LEReader(std::string_view in) : in_(in) {}
  bool U64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = LoadLE64(in_.data());
    in_.remove_prefix(8);
    return true;
  }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!U64(&u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  // A length-prefixed string, viewed in the input.
  bool View(std::string_view* s) {
    uint64_t n;
    if (!U64(&n) || n > in_.size()) return false;
    *s = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  bool Str(std::string* s) {
    std::string_view v;
    if (!View(&v)) return false;
    s->assign(v);
    return true;
  }
  bool empty() const { return in_.empty(); }
  size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

}  // namespace ucfs

#endif  // UCFS_BASE_BYTE_ORDER_H_
