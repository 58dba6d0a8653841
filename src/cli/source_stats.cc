#include "cli/source_stats.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace ucfs::cli {

namespace {

// Above this the knob is a typo, not a metadata server: ten seconds a stat.
constexpr long kMaxDelayMs = 10'000;

std::string Bytes(uint64_t n) {
  char buf[32];
  if (n >= 1'000'000) {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(n) / 1e6);
  } else if (n >= 1'000) {
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(n) / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

}  // namespace

Result<std::chrono::milliseconds> MetadataDelayOf(const char* value) {
  if (value == nullptr || *value == '\0') return std::chrono::milliseconds(0);
  const std::string_view text(value);
  long ms = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || ms > kMaxDelayMs) {
      ms = kMaxDelayMs + 1;
      break;
    }
    ms = ms * 10 + (c - '0');
  }
  if (ms > kMaxDelayMs) {
    return Status::InvalidArgument(std::string(kMetadataDelayVariable) + "=" +
                                   TerminalSafe(std::string(text)) +
                                   ": want whole milliseconds, 0 to 10000");
  }
  return std::chrono::milliseconds(ms);
}

std::string DescribeCounts(const EnvCounts& c) {
  return std::to_string(c.opens) + " opens, " + std::to_string(c.stats) + " stats (" +
         std::to_string(c.fstats) + " of open files), " + std::to_string(c.listings) +
         " listings, " + std::to_string(c.others) + " path walks, " + std::to_string(c.reads) +
         " reads (" + Bytes(c.bytes_read) + ")";
}

Result<std::unique_ptr<CountingEnv>> SourceCounter(int verbosity) {
  UCFS_ASSIGN_OR_RETURN(std::chrono::milliseconds delay,
                        MetadataDelayOf(std::getenv(kMetadataDelayVariable)));
  if (verbosity < 1 && delay.count() == 0) return std::unique_ptr<CountingEnv>();
  auto counter = std::make_unique<CountingEnv>(EnvWrapper::NotOwned(Env::Posix()), delay);
  if (delay.count() > 0) {
    spdlog::warn("{}: each metadata operation on the source delayed by {} ms (a benchmark knob)",
                 kMetadataDelayVariable, delay.count());
  }
  if (verbosity >= 2) {
    counter->set_tracer([](const char* kind, const std::string& path) {
      spdlog::trace("source: {} {}", kind, TerminalSafe(path));
    });
  }
  return counter;
}

}  // namespace ucfs::cli
