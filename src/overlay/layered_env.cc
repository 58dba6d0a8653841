#include "ucfs/overlay/layered_env.h"

#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "overlay/upper_dir.h"

namespace ucfs {

namespace {

class LayeredEnv final : public Env {
 public:
  LayeredEnv(std::shared_ptr<Env> base, std::string dir, std::vector<EnvLayer> layers)
      : dir_(std::move(dir)) {
    // Top first: the order every lookup goes in.
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      layers_.push_back({std::move(it->env), std::move(it->dir), true});
    }
    layers_.push_back({std::move(base), dir_, false});
  }

  Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    std::string rel;
    if (!Below(path, &rel)) return layers_.back().env->Open(path);
    UCFS_ASSIGN_OR_RETURN(Resolution r, Resolve(path, rel));
    const Layer& top = layers_[r.layers.front()];
    return top.env->Open(r.paths.front());
  }

  Result<FileStat> Stat(const std::string& path) override {
    std::string rel;
    if (!Below(path, &rel)) return layers_.back().env->Stat(path);
    UCFS_ASSIGN_OR_RETURN(Resolution r, Resolve(path, rel));
    return layers_[r.layers.front()].env->Stat(r.paths.front());
  }

  std::string Where(const std::string& path) override {
    std::string rel;
    if (!Below(path, &rel)) return layers_.back().env->Where(path);
    auto r = Resolve(path, rel);
    if (!r.ok()) return path;
    return layers_[r->layers.front()].env->Where(r->paths.front());
  }

  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    std::string rel;
    if (!Below(path, &rel)) return layers_.back().env->ListDir(path);
    UCFS_ASSIGN_OR_RETURN(Resolution r, Resolve(path, rel));
    if (!r.is_dir) return Status::InvalidArgument(path + ": not a directory");
    std::map<std::string, DirEntry> merged;
    std::set<std::string> hidden;  // whited out by a layer above
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const Layer& layer = layers_[r.layers[i]];
      UCFS_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, layer.env->ListDir(r.paths[i]));
      std::vector<std::string> whiteouts;
      for (DirEntry& e : entries) {
        std::string name = e.name;
        if (layer.is_upper) {
          switch (Classify(e.name, &name)) {
            case Stored::kInternal:
              continue;
            case Stored::kWhiteout:
              whiteouts.push_back(std::move(name));
              continue;
            case Stored::kEntry:
              break;
          }
        }
        if (!hidden.contains(name)) merged.emplace(name, DirEntry{name, e.is_dir, e.is_symlink});
      }
      // A layer's whiteouts hide what lies below it, not its own entries.
      hidden.insert(whiteouts.begin(), whiteouts.end());
    }
    std::vector<DirEntry> out;
    out.reserve(merged.size());
    for (auto& [name, entry] : merged) out.push_back(std::move(entry));
    return out;
  }

  Result<LinkInfo> ReadLink(const std::string& path) override {
    std::string rel;
    if (!Below(path, &rel) || rel.empty()) return layers_.back().env->ReadLink(path);
    auto [parent, name] = SplitLast(rel);
    UCFS_ASSIGN_OR_RETURN(Resolution r, Resolve(path, parent));
    if (!r.is_dir) return Status::NotFound(path + ": not a directory on the way");
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const Layer& layer = layers_[r.layers[i]];
      const std::string real =
          JoinPath(r.paths[i], layer.is_upper ? StoredName(name) : std::string(name));
      auto link = layer.env->ReadLink(real);
      if (link.ok() || layer.env->Stat(real).ok()) return link;
      if (layer.is_upper && layer.env->Stat(JoinPath(r.paths[i], WhiteoutName(name))).ok()) break;
    }
    return Status::NotFound(path + ": no such file or directory");
  }

 private:
  struct Layer {
    std::shared_ptr<Env> env;
    std::string dir;
    bool is_upper = false;  // stored in the upper directory's format (not the source)
  };
  // Where a path lies: the layers that show it, top first, with its real
  // path in each. A file lies in one; a directory merges its layers down to
  // the first opaque one.
  struct Resolution {
    bool is_dir = true;
    std::vector<size_t> layers;
    std::vector<std::string> paths;
  };

  bool Below(const std::string& path, std::string* rel) const {
    std::optional<std::string_view> below = RelativeBelow(path, dir_);
    if (below) *rel = *below;
    return below.has_value();
  }

  Result<Resolution> Resolve(const std::string& path, std::string_view rel) const {
    Resolution r;
    for (size_t i = 0; i < layers_.size(); ++i) {
      r.layers.push_back(i);
      r.paths.push_back(layers_[i].dir);
    }
    for (std::string_view c : Components(rel)) {
      if (!r.is_dir) return Status::NotFound(path + ": not a directory on the way");
      Resolution next;
      next.is_dir = false;
      for (size_t i = 0; i < r.layers.size(); ++i) {
        const Layer& layer = layers_[r.layers[i]];
        const std::string& parent = r.paths[i];
        std::string real = JoinPath(parent, layer.is_upper ? StoredName(c) : std::string(c));
        auto st = layer.env->Stat(real);
        if (!st.ok()) {
          if (st.status().code() != Status::Code::kNotFound) return st.status();
          // A whiteout hides the name in every layer below its own.
          if (layer.is_upper && layer.env->Stat(JoinPath(parent, WhiteoutName(c))).ok()) break;
          continue;
        }
        if (!st->is_dir) {
          // A file above every directory of the name is the entry; one
          // below a directory is hidden by it.
          if (next.layers.empty()) {
            next.layers.push_back(r.layers[i]);
            next.paths.push_back(std::move(real));
          }
          break;
        }
        next.is_dir = true;
        next.layers.push_back(r.layers[i]);
        next.paths.push_back(real);
        if (layer.is_upper && layer.env->Stat(JoinPath(real, kOpaque)).ok()) break;
      }
      if (next.layers.empty()) return Status::NotFound(path + ": no such file or directory");
      r = std::move(next);
    }
    return r;
  }

  const std::string dir_;
  std::vector<Layer> layers_;  // top first; the base last
};

}  // namespace

std::unique_ptr<Env> NewLayeredEnv(std::shared_ptr<Env> base, std::string dir,
                                   std::vector<EnvLayer> layers) {
  return std::make_unique<LayeredEnv>(std::move(base), std::move(dir), std::move(layers));
}

}  // namespace ucfs
