// libfuse's low-level API at the version the adapter is written against:
// the one place it is chosen. Internal to the FUSE adapter.
#ifndef UCFS_FUSE_LIBFUSE_H_
#define UCFS_FUSE_LIBFUSE_H_

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#endif  // UCFS_FUSE_LIBFUSE_H_
