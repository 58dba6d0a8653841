#include "ucfs/base/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace ucfs {
namespace {

TEST(ParallelFor, CallsEveryIndexOnceOnTheWorkersItSays) {
  for (unsigned threads : {0u, 1u, 3u, 64u}) {
    const size_t n = 1000;
    std::vector<std::atomic<int>> calls(n);
    std::mutex mu;
    std::set<unsigned> workers;
    std::set<std::thread::id> thread_ids;
    ParallelFor(n, threads, [&](size_t i, unsigned worker) {
      calls[i]++;
      std::lock_guard lock(mu);
      workers.insert(worker);
      thread_ids.insert(std::this_thread::get_id());
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(calls[i].load(), 1) << i;
    EXPECT_LE(workers.size(), WorkerCount(n, threads));
    EXPECT_LT(*workers.rbegin(), WorkerCount(n, threads));
    EXPECT_EQ(workers.size(), thread_ids.size());
  }
}

TEST(ParallelFor, NeverMoreWorkersThanItems) {
  EXPECT_EQ(WorkerCount(3, 16), 3u);
  EXPECT_EQ(WorkerCount(0, 16), 1u);
  EXPECT_EQ(WorkerCount(100, 1), 1u);
  EXPECT_GE(WorkerCount(100, 0), 1u);
  int calls = 0;
  ParallelFor(0, 4, [&](size_t, unsigned) { ++calls; });
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace ucfs
