// What every WriteEnv shares: the loop over short writes, and how a failed
// call is reported.
#include "ucfs/base/write_env.h"

#include <cerrno>
#include <string>

namespace ucfs {

Status WriteEnv::WriteAll(int fd, std::string_view data, uint64_t offset, size_t* written) {
  size_t ignored = 0;
  size_t& done = written != nullptr ? *written : ignored;
  done = 0;
  while (!data.empty()) {
    UCFS_ASSIGN_OR_RETURN(const size_t wrote, Write(fd, data, offset));
    if (wrote == 0) {
      // write(2) never answers 0 for bytes it was given; a seam that did
      // would loop here forever.
      return Failed("write of " + std::to_string(data.size()) + " bytes at offset " +
                        std::to_string(offset) + " wrote nothing",
                    EIO);
    }
    data.remove_prefix(wrote);
    offset += wrote;
    done += wrote;
  }
  return Status::OK();
}

Status WriteEnv::Failed(std::string_view op, int err) { return Status::FromErrno(op, err); }

}  // namespace ucfs
