#include "ucfs/checkpoint/checkpoint_layout.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

#include "checkpoint/unserved_layouts.h"

namespace ucfs {
namespace {

bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// A decimal number without sign or leading '+'.
bool ConsumeNumber(std::string_view* s, uint32_t* out) {
  size_t digits = 0;
  while (digits < s->size() && (*s)[digits] >= '0' && (*s)[digits] <= '9') ++digits;
  if (digits == 0 || digits > 9) return false;
  std::from_chars(s->data(), s->data() + digits, *out);
  s->remove_prefix(digits);
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The directory `path` is in ("." for a bare name).
std::string Parent(const std::string& path) {
  const std::string_view parent = SplitLast(path).first;
  return parent.empty() ? "." : std::string(parent);
}

bool HasRankFiles(Env& env, const std::string& dir) {
  auto entries = env.ListDir(dir);
  if (!entries.ok()) return false;
  for (const auto& e : *entries) {
    auto parsed = ParseRankFileName(e.name);
    if (!e.is_dir && parsed && parsed->kind == RankFileName::Kind::kOptim) return true;
  }
  return false;
}

// "mp_rank_03_model_states.pt" -> 3.
std::optional<uint32_t> ParseSharedModelFileName(std::string_view name) {
  uint32_t mp = 0;
  if (!ConsumePrefix(&name, "mp_rank_") || !ConsumeNumber(&name, &mp) ||
      name != "_model_states.pt") {
    return std::nullopt;
  }
  return mp;
}

// How far the highest rank may lie past twice the rank files present.
constexpr uint64_t kMaxRankGap = 64;

}  // namespace

std::optional<RankFileName> ParseRankFileName(std::string_view name) {
  RankFileName out;
  if (ConsumePrefix(&name, "bf16_")) out.prefix = "bf16_";
  if (!ConsumePrefix(&name, "zero_pp_rank_") || !ConsumeNumber(&name, &out.dp_rank) ||
      !ConsumePrefix(&name, "_mp_rank_") || !ConsumeNumber(&name, &out.mp_rank)) {
    return std::nullopt;
  }
  // The legacy "..._mp_rank_00optim_states.pt" lacks the underscore.
  ConsumePrefix(&name, "_");
  if (name == "optim_states.pt") {
    out.kind = RankFileName::Kind::kOptim;
  } else if (name == "model_states.pt" && out.prefix.empty()) {
    out.kind = RankFileName::Kind::kModel;
  } else {
    return std::nullopt;
  }
  return out;
}

std::string SharedModelFileName(uint32_t mp_rank) {
  std::string mp = std::to_string(mp_rank);
  if (mp.size() < 2) mp.insert(0, 2 - mp.size(), '0');
  return "mp_rank_" + mp + "_model_states.pt";
}

std::optional<LayerFileName> ParseLayerFileName(std::string_view name) {
  LayerFileName out;
  if (!ConsumePrefix(&name, "layer_") || !ConsumeNumber(&name, &out.layer)) return std::nullopt;
  // "-model_NN" is the tensor-parallel rank; "-model_states.pt" the end.
  uint32_t t = 0;
  if (std::string_view rest = name; ConsumePrefix(&rest, "-model_") && ConsumeNumber(&rest, &t)) {
    out.tp_rank = t;
    name = rest;
  }
  if (name != "-model_states.pt") return std::nullopt;
  return out;
}

bool IsExpertFileName(std::string_view name) {
  uint32_t n = 0;
  if (ConsumePrefix(&name, "layer_")) {
    if (!ConsumeNumber(&name, &n) || !ConsumePrefix(&name, "_")) return false;
  }
  return ConsumePrefix(&name, "expert_") && ConsumeNumber(&name, &n) &&
         ConsumePrefix(&name, "_mp_rank_") && ConsumeNumber(&name, &n) &&
         name == "_model_states.pt";
}

std::string LayerFileNameFor(uint32_t layer, std::optional<uint32_t> tp_rank) {
  auto two = [](uint32_t n) {
    std::string s = std::to_string(n);
    if (s.size() < 2) s.insert(0, 2 - s.size(), '0');
    return s;
  };
  return "layer_" + two(layer) + (tp_rank ? "-model_" + two(*tp_rank) : "") + "-model_states.pt";
}

std::string RankFileNameFor(RankFileName::Kind kind, std::string_view prefix, uint32_t dp_rank,
                            uint32_t mp_rank) {
  std::string mp = std::to_string(mp_rank);
  if (mp.size() < 2) mp.insert(0, 2 - mp.size(), '0');
  std::string out(kind == RankFileName::Kind::kOptim ? prefix : "");
  out += "zero_pp_rank_" + std::to_string(dp_rank) + "_mp_rank_" + mp;
  out += kind == RankFileName::Kind::kOptim ? "_optim_states.pt" : "_model_states.pt";
  return out;
}

namespace {

// Why `t` cannot be a tag directory's name, or nullptr if it can. Tags are
// names DeepSpeed's users choose ("global_step1000"): printable, one path
// component, at most NAME_MAX bytes.
const char* WhyNotATagName(std::string_view t) {
  if (t.empty()) return "empty";
  if (t.size() > 255) return "longer than a file name can be";
  if (t == "." || t == "..") return "'.' or '..'";
  for (const char c : t) {
    if (c == '/') return "a path, not one directory name";
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "control characters";
  }
  return nullptr;
}

// Where the tag directory is: `tag` in root `path`, the tag `path`'s
// `latest` names, or `path` itself when it holds rank files.
Status LocateTagDirectory(Env& env, const std::string& path, const std::optional<std::string>& tag,
                          CheckpointFiles* files) {
  if (!env.IsDirectory(path)) {
    return Status::NotFound(path +
                            ": not a directory (expected a DeepSpeed checkpoint root "
                            "with a `latest` file, or a tag directory)");
  }
  const std::string latest = JoinPath(path, "latest");
  if (tag) {
    if (const char* wrong = WhyNotATagName(*tag)) {
      return Status::InvalidArgument(std::string("--tag is not a directory name (") + wrong + ")");
    }
    files->root = path;
    files->tag = *tag;
  } else if (env.Stat(latest).ok()) {
    UCFS_ASSIGN_OR_RETURN(files->tag, ReadLatestTag(env, latest));
    files->root = path;
  } else if (HasRankFiles(env, path)) {
    files->tag_dir = path;
    files->tag = std::string(BaseName(path));
    std::string parent = Parent(path);
    if (env.Stat(JoinPath(parent, "latest")).ok()) files->root = parent;
  } else {
    return Status::NotFound(path +
                            ": no `latest` file and no *_optim_states.pt files; not a "
                            "DeepSpeed checkpoint root or tag directory");
  }
  if (files->tag_dir.empty()) files->tag_dir = JoinPath(files->root, files->tag);
  if (!env.IsDirectory(files->tag_dir)) {
    return Status::NotFound(files->tag_dir + ": tag directory does not exist" +
                            (tag ? "" : " (named by " + latest + ")"));
  }
  return Status::OK();
}

// The rank files in a tag directory, by kind and (mp rank, DP rank).
struct RankFilesFound {
  std::map<std::pair<uint32_t, uint32_t>, std::string> optim, model;
  std::set<std::string> prefixes;                // of the optimizer files ("", "bf16_")
  std::map<uint32_t, std::string> shared_model;  // mp_rank_NN_model_states.pt, by mp rank
  std::map<std::pair<uint32_t, uint32_t>, std::string> layers;  // (layer, t)
  bool layers_with_rank = false, layers_without_rank = false;
};

std::string RankWords(uint32_t mp, uint32_t dp) {
  return "DP rank " + std::to_string(dp) + (mp == 0 ? "" : " of mp rank " + std::to_string(mp));
}

Result<RankFilesFound> FindRankFiles(Env& env, const std::string& tag_dir) {
  UCFS_ASSIGN_OR_RETURN(auto entries, env.ListDir(tag_dir));
  RankFilesFound found;
  for (const auto& e : entries) {
    UCFS_RETURN_IF_ERROR(RefuseUnservedTagEntry(tag_dir, e));
    if (e.is_dir) continue;
    if (auto mp = ParseSharedModelFileName(e.name)) {
      found.shared_model.emplace(*mp, JoinPath(tag_dir, e.name));
      continue;
    }
    if (auto layer = ParseLayerFileName(e.name)) {
      (layer->tp_rank ? found.layers_with_rank : found.layers_without_rank) = true;
      found.layers.emplace(std::pair(layer->layer, layer->tp_rank.value_or(0)),
                           JoinPath(tag_dir, e.name));
      continue;
    }
    auto parsed = ParseRankFileName(e.name);
    if (!parsed) continue;
    auto& by_rank = parsed->kind == RankFileName::Kind::kOptim ? found.optim : found.model;
    if (parsed->kind == RankFileName::Kind::kOptim) found.prefixes.insert(parsed->prefix);
    auto [it, inserted] =
        by_rank.emplace(std::pair(parsed->mp_rank, parsed->dp_rank), JoinPath(tag_dir, e.name));
    if (!inserted) {
      if (found.prefixes.size() > 1) break;  // reported below, more usefully
      return Status::Corruption(tag_dir + ": two files for " +
                                RankWords(parsed->mp_rank, parsed->dp_rank) + ": " +
                                std::string(BaseName(it->second)) + " and " + e.name);
    }
  }
  return found;
}

// A rank far beyond the files that exist is an error naming that file:
// callers allocate per rank, and a stray name (zero_pp_rank_999999999_...)
// must not make a world of a billion.
Status CheckRankBound(uint32_t highest, const std::string& file, size_t present, const char* what) {
  if (highest < kMaxRankGap + 2 * static_cast<uint64_t>(present)) return Status::OK();
  return Status::Corruption(
      file + ": " + what + " " + std::to_string(highest) + " is far beyond the " +
      std::to_string(present) +
      " rank files in the directory (a stray or misnamed file?); ucfs takes the world size "
      "from the highest rank, and refuses one that most files would be missing from");
}

}  // namespace

Result<std::string> ResolveCheckpointRoot(Env& host, const std::string& path) {
  UCFS_ASSIGN_OR_RETURN(std::string dir, host.RealPath(path));
  if (dir == "/") return dir;
  // `latest` may be a link: it is there if it is a file or a link. Its stat
  // also says whether `dir` is a directory (ENOTDIR), without a stat of its
  // own: each is a round trip to a shared file system's metadata server.
  const std::string latest = JoinPath(dir, "latest");
  auto latest_stat = host.Stat(latest);
  if (latest_stat.ok()) return dir;
  if (latest_stat.status().posix_errno() == ENOTDIR) return dir;  // reported by the Open
  if (host.ReadLink(latest).ok()) return dir;
  auto has_latest = [&host](const std::string& d) {
    const std::string l = JoinPath(d, "latest");
    return host.Stat(l).ok() || host.ReadLink(l).ok();
  };
  // A tag directory (no `latest` of its own) whose parent is the root.
  const std::string parent(SplitLast(dir).first);
  return has_latest(parent) ? parent : dir;
}

Result<std::string> ReadLatestTag(Env& env, const std::string& latest) {
  UCFS_ASSIGN_OR_RETURN(std::string content, env.ReadSmallFile(latest, 4096));
  std::string_view t = Trim(content);
  // What is wrong is said without echoing the contents: `latest` may be
  // any file (the error may reach another user through a mount's log).
  if (const char* wrong = WhyNotATagName(t)) {
    return Status::Corruption(latest + ": does not name a tag directory (" +
                              std::to_string(content.size()) + " bytes: " + wrong + ")");
  }
  return std::string(t);
}

Result<ParallelCheckpointFiles> ListParallelCheckpointFiles(Env& env, const std::string& path,
                                                            const std::optional<std::string>& tag) {
  CheckpointFiles base;
  UCFS_RETURN_IF_ERROR(LocateTagDirectory(env, path, tag, &base));
  UCFS_ASSIGN_OR_RETURN(RankFilesFound found, FindRankFiles(env, base.tag_dir));
  const auto& [optim, model, prefixes, shared_model, layers, with_rank, without_rank] = found;
  if (optim.empty()) {
    return Status::NotFound(
        base.tag_dir + ": no zero_pp_rank_*_optim_states.pt files" +
        (shared_model.empty() ? ""
                              : " (" + SharedModelFileName() +
                                    " alone is a checkpoint saved without ZeRO: its optimizer "
                                    "state is not partitioned, so there is nothing to reshard)"));
  }
  // ZeRO-3 saves a model-states file per DP rank, stages 0-2 one per
  // model-parallel rank.
  base.model_per_rank = !model.empty() || shared_model.empty();
  if (prefixes.size() > 1) {
    return Status::Corruption(base.tag_dir +
                              ": both bf16_ and plain optimizer files; which "
                              "run do they belong to?");
  }
  base.optim_prefix = *prefixes.begin();
  // The degrees come from the highest ranks in the names; a few missing
  // ranks are reported one by one (CheckNoParallelFileMissing, verify).
  const size_t present = optim.size() + model.size() + shared_model.size() + layers.size();
  uint32_t dp = 0, mp = 0;
  for (const auto* by_rank : {&optim, &model}) {
    for (const auto& [ranks, file] : *by_rank) {
      UCFS_RETURN_IF_ERROR(CheckRankBound(ranks.second, file, present, "rank"));
      UCFS_RETURN_IF_ERROR(CheckRankBound(ranks.first, file, present, "mp rank"));
      dp = std::max(dp, ranks.second);
      mp = std::max(mp, ranks.first);
    }
  }
  if (!base.model_per_rank) {
    for (const auto& [m, file] : shared_model) {
      UCFS_RETURN_IF_ERROR(CheckRankBound(m, file, present, "mp rank"));
      mp = std::max(mp, m);
    }
  }
  ParallelCheckpointFiles grid;
  grid.degrees.dp = dp + 1;
  const uint32_t mp_size = mp + 1;
  if (layers.empty()) {
    grid.degrees.tp = mp_size;  // tensor parallel alone (or ZeRO-3 with TP)
  } else {
    if (base.model_per_rank) {
      return Status::NotSupported(layers.begin()->second +
                                  ": a pipeline's layer file beside ZeRO-3 rank files (DeepSpeed "
                                  "trains pipelines with ZeRO stages 0-1 only)");
    }
    if (with_rank && without_rank) {
      return Status::Corruption(base.tag_dir +
                                ": layer files both with and without a model_NN rank; which run "
                                "do they belong to?");
    }
    uint32_t tp = 0;
    for (const auto& [key, file] : layers) {
      UCFS_RETURN_IF_ERROR(CheckRankBound(key.second, file, present, "tensor-parallel rank"));
      tp = std::max(tp, key.second);
    }
    grid.degrees.tp = tp + 1;
    if (mp_size % grid.degrees.tp != 0) {
      return Status::Corruption(base.tag_dir + ": " + std::to_string(mp_size) +
                                " model-parallel ranks are no whole number of pipeline stages of " +
                                std::to_string(grid.degrees.tp) +
                                " tensor-parallel ranks (the layer files' model_NN)");
    }
    grid.degrees.pp = mp_size / grid.degrees.tp;
  }
  grid.layer_files = layers;
  for (uint32_t m = 0; m < mp_size; ++m) {
    CheckpointFiles shard = base;
    shard.mp_rank = m;
    shard.world_size = grid.degrees.dp;
    for (uint32_t d = 0; d < grid.degrees.dp; ++d) {
      auto o = optim.find({m, d});
      shard.optim_files.push_back(o == optim.end() ? std::string() : o->second);
      auto f = model.find({m, d});
      shard.model_files.push_back(f == model.end() ? std::string() : f->second);
    }
    if (!shard.model_per_rank) {
      auto f = shared_model.find(m);
      shard.model_files[0] = f == shared_model.end() ? std::string() : f->second;
    }
    grid.shards.push_back(std::move(shard));
  }
  return grid;
}

std::string DescribeDegrees(const ParallelDegrees& d) {
  auto part = [](uint32_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  return part(d.pp, "pipeline stage", "pipeline stages") + " x " +
         part(d.tp, "tensor-parallel rank", "tensor-parallel ranks") + " x " +
         part(d.dp, "data-parallel rank", "data-parallel ranks");
}

Result<CheckpointFiles> ListCheckpointFiles(Env& env, const std::string& path,
                                            const std::optional<std::string>& tag) {
  UCFS_ASSIGN_OR_RETURN(ParallelCheckpointFiles grid, ListParallelCheckpointFiles(env, path, tag));
  if (grid.degrees.mp() == 1) return std::move(grid.shards[0]);
  // Named by a file that says so, in case it is a stray one.
  std::string evidence;
  for (auto it = grid.shards.rbegin(); it != grid.shards.rend() && evidence.empty(); ++it) {
    for (const auto* list : {&it->optim_files, &it->model_files}) {
      for (const std::string& f : *list) {
        if (!f.empty() && evidence.empty()) evidence = std::string(BaseName(f));
      }
    }
  }
  if (!grid.layer_files.empty())
    evidence = std::string(BaseName(grid.layer_files.rbegin()->second));
  return Status::NotSupported(grid.shards[0].tag_dir +
                              ": a tensor- or pipeline-parallel checkpoint (" +
                              DescribeDegrees(grid.degrees) + ", by " + evidence +
                              "), whose shard groups open one by one (ParallelCheckpoint), "
                              "not as one data-parallel checkpoint");
}

Status CheckNoParallelFileMissing(const ParallelCheckpointFiles& files) {
  for (const CheckpointFiles& shard : files.shards) {
    UCFS_RETURN_IF_ERROR(CheckNoRankFileMissing(shard));
  }
  // Every layer one tensor-parallel rank saved, every other rank saved too.
  std::set<uint32_t> layers;
  for (const auto& [key, file] : files.layer_files) layers.insert(key.first);
  for (uint32_t layer : layers) {
    for (uint32_t t = 0; t < files.degrees.tp; ++t) {
      if (files.layer_files.contains({layer, t})) continue;
      const std::string& tag_dir = files.shards[0].tag_dir;
      return Status::NotFound(JoinPath(tag_dir, LayerFileNameFor(layer, t)) +
                              ": missing: tensor-parallel rank " + std::to_string(t) +
                              "'s part of layer " + std::to_string(layer));
    }
  }
  return Status::OK();
}

Status CheckRankFileIdentity(const CheckpointFiles& files, const std::string& path,
                             std::string_view archive_prefix) {
  auto own = ParseRankFileName(BaseName(path));
  auto saved = ParseRankFileName(std::string(archive_prefix) + ".pt");
  if (!own || !saved) return Status::OK();
  if (own->kind == saved->kind && own->dp_rank == saved->dp_rank &&
      own->mp_rank == saved->mp_rank) {
    return Status::OK();
  }
  std::string other;
  if (saved->mp_rank == files.mp_rank && saved->dp_rank < files.world_size) {
    const auto& by_rank =
        saved->kind == RankFileName::Kind::kOptim ? files.optim_files : files.model_files;
    if (saved->dp_rank < by_rank.size()) other = by_rank[saved->dp_rank];
  }
  return Status::Corruption(
      path + ": was saved as " + Printable(archive_prefix) +
      ".pt (the top folder of its zip records), not under its own name: rank files renamed or "
      "swapped" +
      (other.empty() ? std::string() : "; " + other + " is the file of that name here"));
}

bool IsCheckpointDirectory(Env& env, const std::string& path) {
  auto latest = env.Stat(JoinPath(path, "latest"));
  return (latest.ok() && !latest->is_dir) || HasRankFiles(env, path);
}

Result<CheckpointFiles> DiscoverCheckpoint(Env& env, const std::string& path,
                                           const std::optional<std::string>& tag) {
  UCFS_ASSIGN_OR_RETURN(CheckpointFiles files, ListCheckpointFiles(env, path, tag));
  UCFS_RETURN_IF_ERROR(CheckNoRankFileMissing(files));
  return files;
}

Status CheckNoRankFileMissing(const CheckpointFiles& files) {
  for (uint32_t r = 0; r < files.world_size; ++r) {
    if (files.optim_files[r].empty()) {
      return Status::NotFound(
          JoinPath(files.tag_dir, RankFileNameFor(RankFileName::Kind::kOptim, files.optim_prefix, r,
                                                  files.mp_rank)) +
          ": missing: the other files imply a world size of " + std::to_string(files.world_size));
    }
  }
  if (files.model_files[0].empty()) {
    return Status::NotFound(
        JoinPath(files.tag_dir, RankFileNameFor(RankFileName::Kind::kModel, "", 0, files.mp_rank)) +
        ": missing: rank 0's model states hold the parameter shapes (for a ZeRO stage 1 or 2 "
        "checkpoint, " +
        SharedModelFileName(files.mp_rank) + ")");
  }
  return Status::OK();
}

}  // namespace ucfs
