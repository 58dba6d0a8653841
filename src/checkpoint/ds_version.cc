#include "ucfs/checkpoint/ds_version.h"

#include <cstddef>

namespace ucfs {

bool VersionAtLeast(std::string_view version, std::array<int, 3> least) {
  std::array<int, 3> v{};
  for (int& part : v) {
    int n = 0;
    size_t digits = 0;
    while (digits < version.size() && digits < 6 && version[digits] >= '0' &&
           version[digits] <= '9') {
      n = n * 10 + (version[digits++] - '0');
    }
    if (digits == 0) return false;
    part = n;
    version.remove_prefix(digits);
    if (version.empty() || version[0] != '.') break;
    version.remove_prefix(1);
  }
  return v >= least;
}

}  // namespace ucfs
