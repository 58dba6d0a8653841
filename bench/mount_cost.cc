// What a mount costs the source file system (issue 38, point 1): the
// opens, stats, listings and bytes read that a mount asks of the
// checkpoint's file system, counted at the Env (base/counting_env.h), and
// the wall time, in three steps as a node's first use makes them:
//
//   mount   PlanMount: discovery, the rank files' summaries, the view built
//   list    `ls -l` of the root and the tag directory (every entry's attrs)
//   first   one file read whole: rank 0's optimizer file in the reshard
//           view, the first param's fp32.pt in the universal view
//
// The mount is the daemon's own (mount/mount_plan.h) without the kernel:
// the same Envs, index and view; reads go through the view's SourceFiles
// as the FUSE adapter's do (it splices the same pieces). `--delay-ms D`
// sleeps D ms before each metadata operation (open, stat, listing, path
// walk): a loaded metadata server.
//
// usage: mount_cost CKPT [--world-size N] [--cache-dir DIR | --no-cache] [--index-dir DIR]
//                   [--root REL] [--upper DIR] [--delay-ms D] [--label TEXT] [--trace]
// `--upper DIR`: the writable mount's (its questions of DIR counted too).
// `--root REL`: CKPT is a run directory, and the steps list and read the
// checkpoint root at REL in it (the root's listing is then in `list`).
// `--trace` prints each metadata operation (kind and path) to stderr.
// Prints one line per step: label, step, opens, stats, listings, others,
// reads, bytes read, seconds.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ucfs/base/counting_env.h"
#include "ucfs/base/path.h"
#include "ucfs/mount/mount_plan.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/vfs/view.h"

namespace {

using Clock = std::chrono::steady_clock;

void Report(const std::string& label, const char* step, const ucfs::EnvCounts& c,
            Clock::time_point start) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%-36s %-6s %8llu %8llu %8llu %8llu %8llu %12llu %9.3f\n", label.c_str(), step,
              static_cast<unsigned long long>(c.opens), static_cast<unsigned long long>(c.stats),
              static_cast<unsigned long long>(c.listings),
              static_cast<unsigned long long>(c.others), static_cast<unsigned long long>(c.reads),
              static_cast<unsigned long long>(c.bytes_read), seconds);
  std::fflush(stdout);
}

int Fail(const std::string& what, const ucfs::Status& s) {
  std::fprintf(stderr, "mount_cost: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// `ls -l DIR`: its entries and each one's attributes.
ucfs::Status List(ucfs::View& view, ucfs::InodeId dir) {
  UCFS_ASSIGN_OR_RETURN(auto entries, view.ReadDir(dir));
  for (const auto& [name, attr] : entries) {
    UCFS_ASSIGN_OR_RETURN(ucfs::InodeId node, view.Lookup(dir, name));
    UCFS_RETURN_IF_ERROR(view.GetAttr(node).status());
  }
  return ucfs::Status::OK();
}

// The file the first tensor is read from, below the tag directory.
ucfs::Result<ucfs::InodeId> FirstFile(ucfs::View& view, ucfs::InodeId tag_dir, bool reshard) {
  UCFS_ASSIGN_OR_RETURN(auto entries, view.ReadDir(tag_dir));
  if (reshard) {
    for (const auto& [name, attr] : entries) {
      if (name.find("zero_pp_rank_0_") != std::string::npos && name.ends_with("_optim_states.pt")) {
        return attr.inode;
      }
    }
    return ucfs::Status::NotFound("no rank 0 optimizer file in the view");
  }
  UCFS_ASSIGN_OR_RETURN(ucfs::InodeId zero, view.Lookup(tag_dir, "zero"));
  UCFS_ASSIGN_OR_RETURN(auto params, view.ReadDir(zero));
  for (const auto& [name, attr] : params) {
    if (!attr.is_dir) continue;
    return view.Lookup(attr.inode, "fp32.pt");
  }
  return ucfs::Status::NotFound("no param folder in the universal view");
}

}  // namespace

int main(int argc, char** argv) {
  ucfs::MountRequest request;
  std::string label;
  long delay_ms = 0;
  bool trace = false;
  std::string root_path;  // in a run directory
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mount_cost: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--world-size") {
      request.world_size = static_cast<uint32_t>(std::stoul(value()));
    } else if (arg == "--cache-dir") {
      request.cache_dir = value();
    } else if (arg == "--index-dir") {
      request.index_dir = value();
    } else if (arg == "--upper") {
      request.upper = value();
    } else if (arg == "--no-cache") {
      request.no_cache = true;
    } else if (arg == "--delay-ms") {
      delay_ms = std::stol(value());
    } else if (arg == "--trace") {
      trace = true;
    } else if (arg == "--root") {
      root_path = value();
    } else if (arg == "--label") {
      label = value();
    } else if (request.checkpoint.empty() && !arg.starts_with("-")) {
      request.checkpoint = arg;
    } else {
      std::fprintf(stderr,
                   "usage: mount_cost CKPT [--world-size N] [--cache-dir DIR | --no-cache] "
                   "[--index-dir DIR] [--root REL] [--upper DIR] "
                   "[--delay-ms D] [--label TEXT] [--trace]\n");
      return 2;
    }
  }
  if (request.checkpoint.empty()) return Fail("no checkpoint given", ucfs::Status::OK());
  if (label.empty()) {
    label = request.world_size ? "reshard N=" + std::to_string(*request.world_size) : "universal";
  }
  request.extra_views = true;
  spdlog::set_level(spdlog::level::err);  // the batch-size advice of every reshard mount
  ucfs::CountingEnv host(ucfs::EnvWrapper::NotOwned(ucfs::Env::Posix()),
                         std::chrono::milliseconds(delay_ms));
  if (trace) {
    host.set_tracer([](const char* kind, const std::string& path) {
      std::fprintf(stderr, "  %-8s %s\n", kind, path.c_str());
    });
  }
  const auto start = Clock::now();
  auto plan = ucfs::PlanMount(host, request);
  if (!plan.ok()) return Fail("mount " + request.checkpoint, plan.status());
  Report(label, "mount", host.counts(), start);

  ucfs::View& view = *plan->view;
  ucfs::InodeId root = ucfs::kRootInode;
  for (const std::string_view name : ucfs::Components(root_path)) {
    auto below = view.Lookup(root, name);
    if (!below.ok()) return Fail("--root " + root_path, below.status());
    root = *below;
  }
  auto latest = view.Lookup(root, "latest");
  if (!latest.ok()) return Fail("latest", latest.status());
  std::vector<ucfs::ReadPiece> pieces;
  ucfs::SourceFiles reader(view);
  std::string tag;
  auto latest_attr = view.GetAttr(*latest);
  if (!latest_attr.ok()) return Fail("latest", latest_attr.status());
  if (auto s = view.Plan(*latest, 0, latest_attr->size, &pieces); !s.ok()) return Fail("latest", s);
  if (auto s = reader.Read(pieces, &tag); !s.ok()) return Fail("latest", s);
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
  auto tag_dir = view.Lookup(root, request.world_size ? tag : tag + "_universal");
  if (!tag_dir.ok()) return Fail("tag " + tag, tag_dir.status());
  if (auto s = List(view, root); !s.ok()) return Fail("ls -l /" + root_path, s);
  if (auto s = List(view, *tag_dir); !s.ok()) return Fail("ls -l " + tag, s);
  Report(label, "list", host.counts(), start);

  auto first = FirstFile(view, *tag_dir, request.world_size.has_value());
  if (!first.ok()) return Fail("first file", first.status());
  auto attr = view.GetAttr(*first);
  if (!attr.ok()) return Fail("first file", attr.status());
  pieces.clear();
  std::string bytes;
  if (auto s = view.Plan(*first, 0, attr->size, &pieces); !s.ok()) return Fail("first file", s);
  if (auto s = reader.Read(pieces, &bytes); !s.ok()) return Fail("first file", s);
  Report(label, "first", host.counts(), start);
  return 0;
}
