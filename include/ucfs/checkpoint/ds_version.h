// The DeepSpeed version a checkpoint records (model states' ds_version):
// what DeepSpeed's own tools write of a checkpoint changed from release to
// release, and ucfs writes what the saving version's tools would.
#ifndef UCFS_CHECKPOINT_DS_VERSION_H_
#define UCFS_CHECKPOINT_DS_VERSION_H_

#include <array>
#include <string_view>

namespace ucfs {

// Whether `version` ("0.15.3", "0.16.4+a1b2c3", "0.19.8") is at least
// major.minor.patch; false for a version that does not start with a number.
bool VersionAtLeast(std::string_view version, std::array<int, 3> least);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_DS_VERSION_H_
