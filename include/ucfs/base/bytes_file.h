// Bytes in memory as a file whose stat is what it was when they were read:
// a small file a plan remembers (mount/plan_memo_env.h), or one a shared
// index recorded (checkpoint/snapshot_env.h).
#ifndef UCFS_BASE_BYTES_FILE_H_
#define UCFS_BASE_BYTES_FILE_H_

#include <memory>
#include <string>

#include "ucfs/base/env.h"

namespace ucfs {

// `bytes` is shared, not copied: an aliasing shared_ptr may keep whatever
// holds them alive.
std::unique_ptr<RandomAccessFile> NewBytesFile(std::string path,
                                               std::shared_ptr<const std::string> bytes,
                                               FileStat stat);

}  // namespace ucfs

#endif  // UCFS_BASE_BYTES_FILE_H_
