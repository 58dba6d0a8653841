// The copies of each Muon param's momentum at ZeRO-1/2, compared. Each rank
// holds the whole params its partition touches (checkpoint/whole_params.h),
// so a param crossing a partition boundary is held by every rank it
// touches; DeepSpeed all-reduces its update, so the copies must be equal,
// element for element. ucfs's views read the lowest rank's copy: copies
// that drifted apart would resume every rank with that one. Internal to
// shard_verifier.cc.
#ifndef UCFS_TOOLS_WHOLE_PARAM_REPLICAS_H_
#define UCFS_TOOLS_WHOLE_PARAM_REPLICAS_H_

#include "tools/file_checks.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/tools/verify.h"

namespace ucfs {

// Compares every further copy with the lowest rank's, in chunks of
// options.chunk_bytes, adding the bytes read to report->bytes_compared. A
// param whose copies differ is a kReplica problem of the file of the
// differing copy; a file that cannot be read, kUnreadable.
void CheckWholeParamReplicas(Env& env, const Checkpoint& c, const VerifyOptions& options,
                             VerifyReport* report, const ProblemSink& problem);

}  // namespace ucfs

#endif  // UCFS_TOOLS_WHOLE_PARAM_REPLICAS_H_
