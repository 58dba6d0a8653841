// libfuse's low-level API at the version the adapter is written against:
// the one place it is chosen. Internal to the FUSE adapter.
#ifndef UCFS_FUSE_LIBFUSE_H_
#define UCFS_FUSE_LIBFUSE_H_

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

// FUSE passthrough (fuse/passthrough.h): libfuse 3.16 brought
// fuse_passthrough_open/close, fuse_file_info::backing_id and
// FUSE_CAP_PASSTHROUGH. Built against an older libfuse (Debian 12's 3.14),
// the adapter serves every read itself, as before.
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 16)
#define UCFS_FUSE_PASSTHROUGH 1
#else
#define UCFS_FUSE_PASSTHROUGH 0
#endif

#endif  // UCFS_FUSE_LIBFUSE_H_
