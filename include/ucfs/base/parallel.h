// ParallelFor: the one thread pool of ucfs's batch commands (verify's scan,
// export's copy), so both share how work is handed out and joined.
#ifndef UCFS_BASE_PARALLEL_H_
#define UCFS_BASE_PARALLEL_H_

#include <cstddef>
#include <functional>

namespace ucfs {

// How many workers ParallelFor runs for `n` items when asked for `threads`
// (0: one per CPU): at least one, never more than there are items.
unsigned WorkerCount(size_t n, unsigned threads);

// Calls work(i, worker) once for every i in [0, n), on WorkerCount(n,
// threads) threads — the calling thread is worker 0 — each taking the next
// index in turn, so items start in order; `worker` < WorkerCount indexes
// per-worker state (a read buffer). Returns when every call has returned.
void ParallelFor(size_t n, unsigned threads,
                 const std::function<void(size_t index, unsigned worker)>& work);

}  // namespace ucfs

#endif  // UCFS_BASE_PARALLEL_H_
