#include "ucfs/checkpoint/checkpoint_layout.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

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

std::string Parent(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
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

// The rank files in a tag directory, by kind and DP rank.
struct RankFilesFound {
  std::map<uint32_t, std::string> optim, model;
  std::set<std::string> prefixes;  // of the optimizer files ("", "bf16_")
  std::set<uint32_t> mp_ranks;
  std::map<uint32_t, std::string> shared_model;  // mp_rank_NN_model_states.pt, by mp rank
};

Result<RankFilesFound> FindRankFiles(Env& env, const std::string& tag_dir) {
  UCFS_ASSIGN_OR_RETURN(auto entries, env.ListDir(tag_dir));
  RankFilesFound found;
  for (const auto& e : entries) {
    if (e.is_dir) continue;
    if (auto mp = ParseSharedModelFileName(e.name)) {
      found.shared_model.emplace(*mp, JoinPath(tag_dir, e.name));
      continue;
    }
    auto parsed = ParseRankFileName(e.name);
    if (!parsed) continue;
    found.mp_ranks.insert(parsed->mp_rank);
    auto& by_rank = parsed->kind == RankFileName::Kind::kOptim ? found.optim : found.model;
    if (parsed->kind == RankFileName::Kind::kOptim) found.prefixes.insert(parsed->prefix);
    auto [it, inserted] = by_rank.emplace(parsed->dp_rank, JoinPath(tag_dir, e.name));
    if (!inserted) {
      if (found.prefixes.size() > 1) break;  // reported below, more usefully
      return Status::Corruption(tag_dir + ": two files for DP rank " +
                                std::to_string(parsed->dp_rank) + ": " +
                                std::string(BaseName(it->second)) + " and " + e.name);
    }
  }
  return found;
}

}  // namespace

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

Result<CheckpointFiles> ListCheckpointFiles(Env& env, const std::string& path,
                                            const std::optional<std::string>& tag) {
  CheckpointFiles files;
  UCFS_RETURN_IF_ERROR(LocateTagDirectory(env, path, tag, &files));
  UCFS_ASSIGN_OR_RETURN(RankFilesFound found, FindRankFiles(env, files.tag_dir));
  auto& [optim, model, prefixes, mp_ranks, shared_model] = found;
  if (optim.empty()) {
    return Status::NotFound(
        files.tag_dir + ": no zero_pp_rank_*_optim_states.pt files" +
        (shared_model.empty() ? ""
                              : " (" + SharedModelFileName() +
                                    " alone is a checkpoint saved without ZeRO: its optimizer "
                                    "state is not partitioned, so there is nothing to reshard)"));
  }
  // ZeRO-3 saves a model-states file per DP rank, stages 0-2 one per
  // model-parallel rank.
  files.model_per_rank = !model.empty() || shared_model.empty();
  if (!files.model_per_rank) {
    for (const auto& [mp, name] : shared_model) mp_ranks.insert(mp);
  }
  if (mp_ranks.size() > 1 || *mp_ranks.begin() != 0) {
    return Status::NotSupported(files.tag_dir +
                                ": model-parallel ranks other than mp_rank_00: tensor or "
                                "pipeline parallelism, which ucfs does not support yet (it "
                                "handles data-parallel checkpoints of every ZeRO stage)");
  }
  if (prefixes.size() > 1) {
    return Status::Corruption(files.tag_dir +
                              ": both bf16_ and plain optimizer files; which "
                              "run do they belong to?");
  }
  files.optim_prefix = *prefixes.begin();
  // The world size comes from the highest rank in a file name, and callers
  // allocate per rank: a stray name (zero_pp_rank_999999999_...) must not
  // make a world of a billion. A rank far beyond the files that exist is an
  // error naming that file; a few missing ranks are still reported one by
  // one (DiscoverCheckpoint, verify).
  const size_t present = optim.size() + model.size();
  for (const auto* by_rank : {&optim, &model}) {
    if (by_rank->empty()) continue;
    const uint32_t highest = by_rank->rbegin()->first;
    if (highest >= kMaxRankGap + 2 * static_cast<uint64_t>(present)) {
      return Status::Corruption(
          by_rank->rbegin()->second + ": rank " + std::to_string(highest) + " is far beyond the " +
          std::to_string(present) +
          " rank files in the directory (a stray or misnamed file?); ucfs takes the world size "
          "from the highest rank, and refuses one that most files would be missing from");
    }
  }
  // The highest rank of either kind: a missing last optimizer file is
  // still a missing rank, not a smaller world.
  files.world_size = optim.rbegin()->first + 1;
  if (!model.empty()) files.world_size = std::max(files.world_size, model.rbegin()->first + 1);
  for (uint32_t r = 0; r < files.world_size; ++r) {
    auto it = optim.find(r);
    files.optim_files.push_back(it == optim.end() ? std::string() : it->second);
    auto m = model.find(r);
    files.model_files.push_back(m == model.end() ? std::string() : m->second);
  }
  if (!files.model_per_rank) files.model_files[0] = shared_model.begin()->second;
  return files;
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
  if (saved->mp_rank == 0 && saved->dp_rank < files.world_size) {
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
      return Status::NotFound(JoinPath(files.tag_dir, RankFileNameFor(RankFileName::Kind::kOptim,
                                                                      files.optim_prefix, r)) +
                              ": missing: the other files imply a world size of " +
                              std::to_string(files.world_size));
    }
  }
  if (files.model_files[0].empty()) {
    return Status::NotFound(
        JoinPath(files.tag_dir, RankFileNameFor(RankFileName::Kind::kModel, "", 0)) +
        ": missing: rank 0's model states hold the parameter shapes (for a ZeRO stage 1 or 2 "
        "checkpoint, " +
        SharedModelFileName() + ")");
  }
  return Status::OK();
}

}  // namespace ucfs
