#include "cli/verify_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/progress.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/mount/source_env.h"

namespace ucfs::cli {
namespace {

std::string Step(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string Plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Left-aligned columns.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string VerifyText(const VerifyReport& r) {
  std::string out;
  const bool grid = r.degrees.mp() > 1;
  out += "checkpoint  " + TerminalSafe(r.tag_dir) + "\n";
  if (grid) out += "grid        " + DescribeDegrees(r.degrees) + "\n";
  out += "world size  " + std::to_string(r.world_size) + (grid ? " (data-parallel)" : "") + "\n";
  out += "step        " + (r.step ? Step(*r.step) : std::string("-")) + "\n";
  out += (grid ? "files       " : "rank files  ") + std::to_string(r.files_checked) +
         (grid ? " (rank and layer files)" : "") + "\n";
  if (r.scanned) {
    out += "scanned     " + Plural(r.params, "param", "params") + " x " +
           Plural(r.states.size(), "state", "states") + " (" + TerminalSafe(Join(r.states, ", ")) +
           "), " + Progress::Bytes(static_cast<double>(r.bytes_scanned)) + " of valid elements\n";
  } else {
    out += "scanned     nothing: the NaN/Inf scan needs the checkpoint to open as a whole\n";
  }
  if (!r.optimizer.empty()) out += "optimizer   " + TerminalSafe(r.optimizer) + "\n";
  for (size_t g = 0; g < r.group_states.size(); ++g) {
    out += "group " + std::to_string(g) + "     " + TerminalSafe(r.group_states[g]) + "\n";
  }
  if (r.param_alignment > 1) {
    out += "alignment   parameter alignment: each param starts at a multiple of " +
           std::to_string(r.param_alignment) + " elements (param_alignment_paddings checked)\n";
  }
  if (r.bytes_compared > 0) {
    out += "replicas    " + Progress::Bytes(static_cast<double>(r.bytes_compared)) +
           " of replicated params' copies compared\n";
  }
  if (!r.warnings.empty()) out += "\n";
  for (const VerifyProblem& w : r.warnings) {
    out += "WARNING: " + TerminalSafe(w.file) + ": " + TerminalSafe(w.message) + "\n";
  }
  if (!r.problems.empty()) out += "\n";
  for (const VerifyProblem& p : r.problems)
    out += TerminalSafe(p.file) + ": " + TerminalSafe(p.message) + "\n";
  if (!r.nonfinite.empty()) {
    std::vector<std::vector<std::string>> rows{{"param", "state", "NaN", "Inf", "ranks"}};
    if (grid) rows[0].insert(rows[0].begin(), "mp_rank");
    for (const NonFiniteCount& n : r.nonfinite) {
      std::vector<std::string> ranks;
      for (const auto& pr : n.ranks) ranks.push_back(std::to_string(pr.rank));
      rows.push_back({Printable(n.param), Printable(n.state), std::to_string(n.nan),
                      std::to_string(n.inf), Join(ranks, " ")});
      if (grid) rows.back().insert(rows.back().begin(), std::to_string(n.mp_rank));
    }
    out += "\nNaN/Inf by param and state (padding excluded):\n" + Table(rows);
  }
  out += "\n";
  if (r.ok()) {
    out +=
        "OK: " +
        (grid ? Plural(r.files_checked, "file", "files") + ", " + DescribeDegrees(r.degrees)
              : Plural(r.files_checked, "rank file", "rank files") + ", world size " +
                    std::to_string(r.world_size)) +
        ", step " + (r.step ? Step(*r.step) : "-") + ", no NaN or Inf in " +
        Progress::Bytes(static_cast<double>(r.bytes_scanned)) +
        (r.bytes_compared > 0 ? ", replicated params' copies equal" : "") +
        (r.warnings.empty() ? "" : " (" + Plural(r.warnings.size(), "warning", "warnings") + ")") +
        "\n";
  } else {
    out += Plural(r.problems.size(), "problem", "problems") + "\n";
  }
  return out;
}

nlohmann::ordered_json VerifyJson(const VerifyReport& r) {
  using json = nlohmann::ordered_json;
  json j;
  j["tag_dir"] = r.tag_dir;
  j["ok"] = r.ok();
  j["degrees"] = {{"pp", r.degrees.pp}, {"tp", r.degrees.tp}, {"dp", r.degrees.dp}};
  j["world_size"] = r.world_size;
  j["step"] = r.step ? json(*r.step) : json(nullptr);
  j["files_checked"] = r.files_checked;
  j["params"] = r.params;
  j["states"] = r.states;
  j["optimizer"] = r.optimizer;
  j["group_states"] = r.group_states;
  j["scanned"] = r.scanned;
  j["param_alignment"] = r.param_alignment;
  j["bytes_scanned"] = r.bytes_scanned;
  j["bytes_compared"] = r.bytes_compared;
  for (const char* key : {"problems", "warnings"}) {
    j[key] = json::array();
    for (const VerifyProblem& p : key == std::string("problems") ? r.problems : r.warnings) {
      j[key].push_back({{"file", p.file}, {"kind", KindName(p.kind)}, {"message", p.message}});
    }
  }
  j["nonfinite"] = json::array();
  for (const NonFiniteCount& n : r.nonfinite) {
    json ranks = json::array();
    for (const auto& pr : n.ranks) {
      ranks.push_back({{"rank", pr.rank},
                       {"file", pr.file},
                       {"nan", pr.nan},
                       {"inf", pr.inf},
                       {"first_element", pr.first_element}});
    }
    j["nonfinite"].push_back({{"mp_rank", n.mp_rank},
                              {"param", n.param},
                              {"state", n.state},
                              {"nan", n.nan},
                              {"inf", n.inf},
                              {"ranks", std::move(ranks)}});
  }
  return j;
}

// verify of a run directory: every tag of every root, each scanned as
// `ucfs verify ROOT --tag TAG` would; fails if any fails.
static int RunVerifyRun(const VerifyArgs& a, const VerifyOptions& base, Env& env,
                        const std::string& path) {
  using json = nlohmann::ordered_json;
  auto roots = FindRoots(env, path);
  if (!roots.ok()) {
    std::fprintf(stderr, "ucfs verify: %s\n", ucfs::TerminalSafe(roots.status().message()).c_str());
    return 1;
  }
  auto reports = json::array();
  bool all_ok = true;
  for (const RootListing& root : *roots) {
    for (const TagListing& tag : root.tags) {
      VerifyOptions options;
      options.tag = tag.name;
      options.threads = a.threads;
      options.universal_info = base.universal_info;
      auto report = Verify(env, root.dir, options);
      if (!report.ok()) {
        all_ok = false;
        std::fprintf(stderr, "ucfs verify: %s\n",
                     ucfs::TerminalSafe(report.status().message()).c_str());
        reports.push_back(
            {{"root", root.dir}, {"tag", tag.name}, {"error", report.status().message()}});
        continue;
      }
      all_ok = all_ok && report->ok();
      if (a.json) {
        reports.push_back({{"root", root.dir}, {"tag", tag.name}, {"report", VerifyJson(*report)}});
      } else {
        std::cout << "== " << ucfs::TerminalSafe(root.dir) << "  (tag "
                  << ucfs::TerminalSafe(tag.name) << ")\n"
                  << VerifyText(*report) << "\n";
      }
    }
  }
  if (a.json) {
    json out = {{"run", path}, {"ok", all_ok}, {"checkpoints", std::move(reports)}};
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return all_ok ? 0 : 1;
}

int RunVerify(const VerifyArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Progress> progress;
  VerifyOptions options;
  options.tag = a.tag;
  options.threads = a.threads;
  auto supplied = ReadSuppliedUniversalInfo(*Env::Posix(), a.universal_info);
  if (!supplied.ok()) {
    std::fprintf(stderr, "ucfs verify: %s\n", TerminalSafe(supplied.status().message()).c_str());
    return 1;
  }
  options.universal_info = *supplied;
  options.on_scan_start = [&](uint64_t total) {
    progress = std::make_unique<Progress>("verifying", total);
  };
  options.on_bytes = [&](uint64_t n) { progress->Add(n); };
  auto source = OpenCheckpointEnv(*Env::Posix(), a.checkpoint);
  if (source.ok() && !a.tag && !IsCheckpointDirectory(*source->env, source->path) &&
      source->env->IsDirectory(source->path)) {
    return RunVerifyRun(a, options, *source->env, source->path);
  }
  auto report = source.ok() ? Verify(*source->env, source->path, options)
                            : Result<VerifyReport>(source.status());
  if (!report.ok()) {
    std::fprintf(stderr, "ucfs verify: %s\n",
                 ucfs::TerminalSafe(report.status().message()).c_str());
    return 1;
  }
  if (progress) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s", s);
    progress->Finish(
        "scanned " + Progress::Bytes(static_cast<double>(report->bytes_scanned)) + " in " +
        seconds + " (" +
        Progress::Bytes(static_cast<double>(report->bytes_scanned) / std::max(s, 1e-9)) + "/s)");
  }
  if (a.json) {
    std::cout << VerifyJson(*report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << VerifyText(*report);
  }
  return report->ok() ? 0 : 1;
}

}  // namespace ucfs::cli
