// The NaN/Inf scan of `ucfs verify`: every floating-point state of every
// param, padding excluded, read in parallel chunks from the very files
// Checkpoint::Open read, and counted per param, state and rank. Internal
// to verify.cc.
#ifndef UCFS_TOOLS_NONFINITE_SCAN_H_
#define UCFS_TOOLS_NONFINITE_SCAN_H_

#include <functional>
#include <string>

#include "tools/file_checks.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/tools/verify.h"

namespace ucfs {

// Fills report->scanned, bytes_scanned and nonfinite, reporting what it
// could not read and each param state's NaN and Inf per rank through
// `problem` (called from one thread at a time). `tag_dir` is what a problem
// of the checkpoint as a whole is reported against.
void ScanNonFinite(Env& env, const Checkpoint& c, const VerifyOptions& options,
                   const std::string& tag_dir, VerifyReport* report, const ProblemSink& problem);

}  // namespace ucfs

#endif  // UCFS_TOOLS_NONFINITE_SCAN_H_
