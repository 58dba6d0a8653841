#include "cli/mount_options.h"

#include <CLI/CLI.hpp>
#include <array>
#include <charconv>
#include <filesystem>

namespace ucfs::cli {
namespace {

// How a field of MountArgs takes a value, and says what it holds.
template <auto Field>
Status TakeText(MountArgs& a, const std::string& v) {
  a.*Field = v;
  return Status::OK();
}
template <auto Field>
std::vector<std::string> GivenText(const MountArgs& a) {
  const auto& v = a.*Field;
  if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
    return v.empty() ? std::vector<std::string>{} : std::vector<std::string>{v};
  } else {
    return v ? std::vector<std::string>{*v} : std::vector<std::string>{};
  }
}
template <auto Field>
Status TakeFlag(MountArgs& a, const std::string&) {
  a.*Field = true;
  return Status::OK();
}
template <auto Field>
std::vector<std::string> GivenFlag(const MountArgs& a) {
  return a.*Field ? std::vector<std::string>{""} : std::vector<std::string>{};
}
template <auto Field>
std::vector<std::string> GivenNumber(const MountArgs& a) {
  const auto& v = a.*Field;
  return v ? std::vector<std::string>{std::to_string(*v)} : std::vector<std::string>{};
}

std::optional<uint64_t> ParseUnsigned(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

Status TakeWorldSize(MountArgs& a, const std::string& v) {
  auto n = ParseUnsigned(v);
  if (!n || *n < 1 || *n > kMaxWorldSize) {
    return Status::InvalidArgument("the world size must be a number from 1 to " +
                                   std::to_string(kMaxWorldSize) + ", not " + v);
  }
  a.world_size = static_cast<uint32_t>(*n);
  return Status::OK();
}

Status TakeSubGroupSize(MountArgs& a, const std::string& v) {
  auto n = ParseUnsigned(v);
  if (!n || *n == 0) return Status::InvalidArgument("must be a positive number, not " + v);
  a.sub_group_size = *n;
  return Status::OK();
}

Status TakeLayer(MountArgs& a, const std::string& v) {
  a.layers.push_back(v);
  return Status::OK();
}
std::vector<std::string> GivenLayers(const MountArgs& a) { return a.layers; }

Status TakeFuseOptions(MountArgs& a, const std::string& v) {
  size_t start = 0;
  for (size_t comma; (comma = v.find(',', start)) != std::string::npos; start = comma + 1) {
    a.options.push_back(v.substr(start, comma - start));
  }
  a.options.push_back(v.substr(start));
  return Status::OK();
}
std::vector<std::string> GivenFuseOptions(const MountArgs& a) {
  std::string joined;
  for (const std::string& o : a.options) joined += (joined.empty() ? "" : ",") + o;
  return joined.empty() ? std::vector<std::string>{} : std::vector<std::string>{joined};
}

Status TakeVerbose(MountArgs& a, const std::string&) {
  ++a.verbosity;
  return Status::OK();
}
std::vector<std::string> GivenVerbose(const MountArgs& a) {
  return std::vector<std::string>(static_cast<size_t>(std::max(a.verbosity, 0)), "");
}

// In the order the helper's `ucfs mount` line names them.
const MountOption kOptions[] = {
    {"--world-size", "world_size", "N",
     "Show the checkpoint as DeepSpeed would have saved it with N ranks", false, true,
     TakeWorldSize, GivenNumber<&MountArgs::world_size>},
    {"--upper", "upper", "DIR",
     "Make the mount writable: whatever is written (new checkpoints, a rewritten `latest`) "
     "lands in this directory (created if missing); the source is never written",
     false, false, TakeText<&MountArgs::upper>, GivenText<&MountArgs::upper>},
    {"--layer", "layer", "DIR",
     "An earlier mount's --upper directory, laid over CKPT read-only (repeat, oldest first): the "
     "checkpoints a trainer saved into it are served like CKPT's own, resharded at --world-size "
     "and with their views",
     true, true, TakeLayer, GivenLayers},
    {"--tag", "tag", "TAG", "The tag to serve instead of the one `latest` names", false, true,
     TakeText<&MountArgs::tag>, GivenText<&MountArgs::tag>},
    {"--sub-group-size", "sub_group_size", "N",
     "The run's zero_optimization.sub_group_size, when its ds_config has none (default "
     "1000000000)",
     false, true, TakeSubGroupSize, GivenNumber<&MountArgs::sub_group_size>},
    {"--universal-info", "universal_info", "FILE",
     "A JSON file of universal_checkpoint_info keys (the pattern lists, original_vocab_size, "
     "...) laid over the saved ones, for a checkpoint saved without them (a TP run without it, "
     "a T = 1 run without row-parallel patterns)",
     false, true, TakeText<&MountArgs::universal_info>, GivenText<&MountArgs::universal_info>},
    {"--cache-dir", "cache_dir", "DIR",
     "Where the index of parsed rank files lives (default $XDG_CACHE_HOME/ucfs)", false, true,
     TakeText<&MountArgs::cache_dir>, GivenText<&MountArgs::cache_dir>},
    {"--index-dir", "index_dir", "DIR",
     "Where `ucfs index --index-dir` wrote the tag's shared index (looked in before the tag's "
     "side): for a checkpoint whose directory its indexer cannot write",
     false, true, TakeText<&MountArgs::index_dir>, GivenText<&MountArgs::index_dir>},
    {"--weights-dtype", "weights_dtype", "DTYPE",
     "The dtype of the Hugging Face weights shown beside a root's config.json: bf16, fp16 or "
     "fp32 (default: the training dtype)",
     false, false, TakeText<&MountArgs::weights_dtype>, GivenText<&MountArgs::weights_dtype>},
    {"--no-cache", "no_cache", "", "Neither read nor write the index", false, true,
     TakeFlag<&MountArgs::no_cache>, GivenFlag<&MountArgs::no_cache>},
    {"--crc", "crc", "",
     "Write real CRC-32s into the zip records of the files ucfs makes (reads every byte first; "
     "only Python's zipfile checks them)",
     false, true, TakeFlag<&MountArgs::crc>, GivenFlag<&MountArgs::crc>},
    {"--views", "views", "",
     "With --upper, a run directory's roots still show <tag>_universal/, latest_universal and "
     "<tag>_fp32/ (hidden by default: trainers count, sum and parse what they find there)",
     false, false, TakeFlag<&MountArgs::views>, GivenFlag<&MountArgs::views>},
    {"--no-rank-file-copies", "no_rank_file_copies", "",
     "With --world-size, give new ranks no copy of the frameworks' per-rank files "
     "(rng_state_{r}.pth, random_states_{r}.pkl, ...): a copy repeats another rank's random "
     "streams",
     false, false, TakeFlag<&MountArgs::no_rank_file_copies>,
     GivenFlag<&MountArgs::no_rank_file_copies>},
    {"--log-file", "log_file", "FILE", "Log to this file instead of syslog/stderr", false, false,
     TakeText<&MountArgs::log_file>, GivenText<&MountArgs::log_file>},
    {"-v,--verbose", "verbose", "", "More log output (repeat for more)", true, true, TakeVerbose,
     GivenVerbose},
    {"", "debug", "", "More log output, as verbose", true, false, TakeVerbose, nullptr},
    {"-o", "", "OPTION[,OPTION...]", "Mount options for libfuse and the kernel (allow_other, ...)",
     true, false, TakeFuseOptions, GivenFuseOptions},
    {"-f,--foreground", "", "", "Stay in the foreground (logs to stderr)", false, false,
     TakeFlag<&MountArgs::foreground>, nullptr},
    {"-d,--fuse-debug", "", "", "Log every FUSE request (implies -f)", false, false,
     TakeFlag<&MountArgs::fuse_debug>, nullptr},
    {"--no-prefetch", "", "",
     "Tuning: don't read ahead in the source files (to measure what it "
     "buys)",
     false, false, TakeFlag<&MountArgs::no_prefetch>, nullptr},
    {"--no-splice", "", "", "Tuning: copy source bytes to the kernel instead of splicing them",
     false, false, TakeFlag<&MountArgs::no_splice>, nullptr},
    {"--drop-source-pages", "", "",
     "Tuning: drop the source files' pages from the page cache once served (half the page cache "
     "a cold read fills, for a fifth less throughput)",
     false, false, TakeFlag<&MountArgs::drop_source_pages>, nullptr},
    {"--no-direct-writes", "", "",
     "Tuning: with --upper, write through the mount's page cache instead of handing write-only "
     "opens' bytes to the daemon directly",
     false, false, TakeFlag<&MountArgs::no_direct_writes>, nullptr},
    {"--no-passthrough", "no_passthrough", "",
     "Serve every read and write through the daemon, not files that are one real file whole "
     "through the kernel (FUSE passthrough: kernel >= 6.9, libfuse >= 3.16, as root)",
     false, false, TakeFlag<&MountArgs::no_passthrough>, GivenFlag<&MountArgs::no_passthrough>},
};

void TakeOrThrow(const MountOption& o, MountArgs* args, const std::string& value) {
  if (Status s = o.take(*args, value); !s.ok()) {
    throw CLI::ValidationError(std::string(o.flags), s.message());
  }
}

}  // namespace

std::span<const MountOption> MountOptions() { return kOptions; }

void AddMountOptions(CLI::App& app, MountArgs* args, bool for_export) {
  for (const MountOption& o : kOptions) {
    if (o.flags.empty() || (for_export && !o.for_export)) continue;
    const std::string flags(o.flags), help(o.help);
    if (o.value.empty()) {
      app.add_flag_function(
          flags,
          [&o, args](int64_t count) {
            for (int64_t i = 0; i < count; ++i) TakeOrThrow(o, args, "");
          },
          help);
    } else if (o.repeatable) {
      app.add_option_function<std::vector<std::string>>(
             flags,
             [&o, args](const std::vector<std::string>& values) {
               for (const std::string& v : values) TakeOrThrow(o, args, v);
             },
             help)
          ->type_name(std::string(o.value))
          ->type_size(1)
          ->allow_extra_args(false);
    } else {
      app.add_option_function<std::string>(
             flags, [&o, args](const std::string& v) { TakeOrThrow(o, args, v); }, help)
          ->type_name(std::string(o.value));
    }
  }
}

Result<MountRequest> RequestOf(const MountArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto absolute = [&ec](const std::string& path) {
    return fs::absolute(path, ec).lexically_normal().string();
  };
  MountRequest r;
  r.checkpoint = absolute(a.checkpoint);
  if (!a.mountpoint.empty()) r.mountpoint = absolute(a.mountpoint);
  r.tag = a.tag;
  r.cache_dir = a.cache_dir;
  if (a.index_dir) r.index_dir = absolute(*a.index_dir);
  r.no_cache = a.no_cache;
  r.crc = a.crc;
  r.world_size = a.world_size;
  r.sub_group_size = a.sub_group_size;
  if (a.universal_info) r.universal_info = fs::absolute(*a.universal_info, ec).string();
  r.copy_rank_files = !a.no_rank_file_copies;
  for (const std::string& layer : a.layers) r.layers.push_back(absolute(layer));
  if (a.weights_dtype) {
    UCFS_ASSIGN_OR_RETURN(r.weights_dtype, ParseWeightsDtype(*a.weights_dtype));
  }
  // Trainers count, sum and parse what a writable mount shows.
  r.extra_views = !a.upper || a.views;
  if (a.upper) r.upper = absolute(*a.upper);
  return r;
}

}  // namespace ucfs::cli
