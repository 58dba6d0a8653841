// UpperRootViews: the views of the checkpoints a trainer saves through a
// writable mount of its run.
//
// They land in the upper directory, which the run view never lists (the
// overlay shows it, src/design/run-directories.md), so the overlay asks
// for them: when it lists an upper directory, or misses in one a name that
// a view could make (MightShow), it calls Update with the directory's path
// in the mount and in the upper directory. A root there gets, in the
// view's directory of the same path (made where the view has none), what a
// source root gets outside the reshard: with `extra_views`, each complete
// tag's `<tag>_universal/` and `<tag>_fp32/` and `latest_universal`; beside a
// config.json with no weights, model.safetensors of latest's tag. Tags open
// as their directories are first looked into, as in the run view.
//
// A checkpoint is written in place over some seconds, and some tags are
// saved again under the same name (accelerate's `pytorch_model`): what a
// tag's views were made from is remembered (each rank file's size, mtime
// and inode), and when it changes the tag gets its views anew; a view made
// from a half-written file (its build failed) is so replaced once the file
// is whole. Tags saved into the upper directory are at the mount's world
// size already: they are never resharded.
//
// Thread-safe. Lock order: the overlay's, then this one's (a leaf but for
// the View's, taken under it).
#ifndef UCFS_VIEWS_UPPER_ROOT_VIEWS_H_
#define UCFS_VIEWS_UPPER_ROOT_VIEWS_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "ucfs/base/env.h"
#include "ucfs/vfs/view.h"
#include "ucfs/views/run_view.h"

namespace ucfs {

class UpperRootViews {
 public:
  // `env` reads the upper directory (and whatever else `view` reads); it
  // and `view` must outlive this.
  UpperRootViews(std::shared_ptr<View> view, Env& env, RunViewOptions options);

  // Whether `name` is one the views could add to a root: a lookup that
  // missed another name needs no look at its directory.
  static bool MightShow(std::string_view name);

  // Looks at upper directory `dir`, shown at `path` ('/'-separated, "" the
  // mount's root); true when the view gained or changed entries there.
  bool Update(const std::string& path, const std::string& dir);

 private:
  // What a root's views were made from.
  struct Served {
    std::map<std::string, std::string> tags;  // tag -> its rank files' identities
    std::string latest;                       // the tag latest_universal names
    std::string weights;                      // the identities model.safetensors was made of
  };

  const std::shared_ptr<View> view_;
  Env& env_;
  const RunViewOptions options_;
  std::mutex mu_;
  std::map<std::string, Served> served_;  // by upper directory
};

}  // namespace ucfs

#endif  // UCFS_VIEWS_UPPER_ROOT_VIEWS_H_
