// LayeredEnv: a source directory with earlier mounts' upper directories laid
// over it, read-only — overlayfs's stack of lower directories.
//
// A trainer that resumed through `ucfs mount --world-size 3 --upper U`
// saved its next checkpoints into U, at 3 ranks. To resume from them at
// another size, U must be read like the source is: its rank files
// resharded, its roots given their views. `ucfs mount --layer U --upper V
// --world-size 2 RUN MNT` builds the view over this Env, which shows RUN
// as the mount through U showed it: U's entries shadow RUN's, U's
// whiteouts hide them, U's opaque directories hide everything below them,
// U's escaped names are unescaped, and ucfs's own bookkeeping never shows
// (overlay.h has the format). The new writes go to V; U and RUN are only
// read.
//
// Paths below `dir` are resolved through the layers; any other path is the
// base Env's. A file is opened where it lies, so errors name its real path.
// ReadLink gives a layer's link as it is (the views show it as a link); a
// path through a link resolves within the layer holding the link.
//
// Thread-safe as its Envs are: it keeps no state of its own after
// construction.
#ifndef UCFS_OVERLAY_LAYERED_ENV_H_
#define UCFS_OVERLAY_LAYERED_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"

namespace ucfs {

struct EnvLayer {
  std::shared_ptr<Env> env;  // reads the layer's files (confined to `dir`)
  std::string dir;           // the layer's top: what the mount's root was
};

// `base` shows `dir`; `layers` lie over it in order, each over the ones
// before it (the first is the oldest upper directory).
std::unique_ptr<Env> NewLayeredEnv(std::shared_ptr<Env> base, std::string dir,
                                   std::vector<EnvLayer> layers);

}  // namespace ucfs

#endif  // UCFS_OVERLAY_LAYERED_ENV_H_
