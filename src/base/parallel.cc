#include "ucfs/base/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace ucfs {

unsigned WorkerCount(size_t n, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::clamp<size_t>(threads, 1, std::max<size_t>(n, 1)));
}

void ParallelFor(size_t n, unsigned threads,
                 const std::function<void(size_t index, unsigned worker)>& work) {
  const unsigned workers = WorkerCount(n, threads);
  std::atomic<size_t> next{0};
  auto run = [&](unsigned worker) {
    for (size_t i; (i = next.fetch_add(1)) < n;) work(i, worker);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (unsigned w = 1; w < workers; ++w) pool.emplace_back(run, w);
  run(0);
  for (std::thread& t : pool) t.join();
}

}  // namespace ucfs
