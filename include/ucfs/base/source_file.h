// SourceFile: a file a mount serves bytes of, as it was when first seen.
// Checkpoints list their rank files as SourceFiles and views read them
// through SourceFiles (vfs/source_files.h), which refuses to serve a file
// whose identity has changed since: the record lives here, below both.
#ifndef UCFS_BASE_SOURCE_FILE_H_
#define UCFS_BASE_SOURCE_FILE_H_

#include <string>

#include "ucfs/base/env.h"

namespace ucfs {

struct SourceFile {
  std::string path;  // "" for an absent model-states file
  FileIdentity identity;
  FileAccess access;
};

}  // namespace ucfs

#endif  // UCFS_BASE_SOURCE_FILE_H_
