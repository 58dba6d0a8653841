// What a mount asks of its source, counted in the daemon (issue 38).
//
// On a parallel file system every open, stat and listing is a round trip
// to a metadata server that every node of a job shares, so what one mount
// asks of it is worth seeing on a real cluster, not only in
// bench/mount_cost. At -v the daemon plans its mount through a CountingEnv
// (base/counting_env.h) and logs the counts once mounted and again at
// unmount; at -vv each question too. Without -v nothing is wrapped.
//
// UCFS_BENCH_METADATA_DELAY_MS is a benchmark knob, not an option: each
// metadata operation the daemon asks of the source sleeps that long first,
// a loaded metadata server simulated on a local disk (bench/many_nodes.sh).
#ifndef UCFS_CLI_SOURCE_STATS_H_
#define UCFS_CLI_SOURCE_STATS_H_

#include <chrono>
#include <memory>
#include <string>

#include "ucfs/base/counting_env.h"
#include "ucfs/base/status.h"

namespace ucfs::cli {

inline constexpr char kMetadataDelayVariable[] = "UCFS_BENCH_METADATA_DELAY_MS";

// The delay the variable's `value` asks for (nullptr or "": none), 0 to
// 10,000 ms; InvalidArgument naming the variable otherwise.
Result<std::chrono::milliseconds> MetadataDelayOf(const char* value);

// "2 opens, 6 stats (2 of open files), 2 listings, 2 path walks, 3 reads
// (13.7 MB)".
std::string DescribeCounts(const EnvCounts& counts);

// The host Env a mount is planned on: counting at `verbosity` >= 1 or with a
// delay (tracing each question at >= 2), else nullptr (the plain host).
// The variable is read from the environment here.
Result<std::unique_ptr<CountingEnv>> SourceCounter(int verbosity);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_SOURCE_STATS_H_
