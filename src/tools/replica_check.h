// The copies of each tensor-parallel replicated param, compared: every
// tensor-parallel rank of a stage holds the whole of a LayerNorm's weight
// (and its Adam moments), which must be equal, element for element.
// ds_to_universal.py asserts it (torch.equal) and keeps rank 0's copy, as
// ucfs's universal view does; copies that drifted apart (a run without
// tensor-parallel all-reduce of their grads) would resume as one of them.
// Internal to verify.cc.
#ifndef UCFS_TOOLS_REPLICA_CHECK_H_
#define UCFS_TOOLS_REPLICA_CHECK_H_

#include "tools/file_checks.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/tools/verify.h"

namespace ucfs {

// Compares every copy with tensor-parallel rank 0's, in chunks of
// options.chunk_bytes, adding the bytes read to report->bytes_compared.
// A param state whose copies differ is a kReplica problem of the file of
// the first differing element; a file that cannot be read, kUnreadable.
void CheckReplicas(Env& env, const ParallelCheckpoint& grid, const VerifyOptions& options,
                   VerifyReport* report, const ProblemSink& problem);

}  // namespace ucfs

#endif  // UCFS_TOOLS_REPLICA_CHECK_H_
