#include "ucfs/vfs/lazy_content.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ucfs {
namespace {

// A factory that counts its calls and makes "<name>-bytes".
ContentFactory Counting(std::string name, std::atomic<int>* calls) {
  return [name, calls]() -> Result<std::shared_ptr<const FileContent>> {
    ++*calls;
    return std::shared_ptr<const FileContent>(std::make_shared<InlineContent>(name + "-bytes"));
  };
}

std::string ReadAll(const FileContent& c) {
  std::vector<ReadPiece> pieces;
  EXPECT_TRUE(c.Plan(0, 1 << 20, &pieces).ok());
  std::string out;
  for (const ReadPiece& p : pieces) out += p.bytes;
  return out;
}

TEST(LazyContent, BuildsOnFirstUseAndKeepsOnlyTheSize) {
  auto cache = std::make_shared<ContentCache>(1);
  std::atomic<int> a_calls = 0, b_calls = 0;
  LazyContent a(Counting("a", &a_calls), cache);
  LazyContent b(Counting("b", &b_calls), cache);
  EXPECT_EQ(a_calls, 0);  // nothing built before it is needed
  EXPECT_EQ(a.size(), 7u);
  EXPECT_EQ(ReadAll(a), "a-bytes");
  EXPECT_EQ(a_calls, 1);  // the size's build served the read
  EXPECT_EQ(ReadAll(b), "b-bytes");
  EXPECT_EQ(cache->size(), 1u);  // `a` was dropped for `b`
  EXPECT_EQ(a.size(), 7u);       // its size was not
  EXPECT_EQ(a_calls, 1);
  EXPECT_EQ(ReadAll(a), "a-bytes");  // rebuilt
  EXPECT_EQ(a_calls, 2);
  EXPECT_EQ(cache->builds(), 3u);
}

TEST(LazyContent, PiecesOutliveTheirEviction) {
  auto cache = std::make_shared<ContentCache>(1);
  std::atomic<int> calls = 0;
  LazyContent a(Counting("a", &calls), cache);
  LazyContent b(Counting("b", &calls), cache);
  std::vector<ReadPiece> pieces;
  ASSERT_TRUE(a.Plan(2, 3, &pieces).ok());
  EXPECT_EQ(ReadAll(b), "b-bytes");  // evicts a's content
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_NE(pieces[0].owner, nullptr);
  EXPECT_EQ(pieces[0].bytes, "byt");  // still alive through `owner`
}

TEST(LazyContent, AFailedBuildIsReportedByPlan) {
  auto cache = std::make_shared<ContentCache>(4);
  LazyContent bad(
      []() -> Result<std::shared_ptr<const FileContent>> {
        return Status::Corruption("rank3.pt: no param_shapes");
      },
      cache);
  EXPECT_EQ(bad.size(), 0u);
  std::vector<ReadPiece> pieces;
  Status s = bad.Plan(0, 10, &pieces);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("rank3.pt"), std::string::npos);
}

TEST(LazyContent, ConcurrentReadersSeeTheSameBytes) {
  auto cache = std::make_shared<ContentCache>(2);
  std::vector<std::unique_ptr<LazyContent>> files;
  std::atomic<int> calls = 0;
  for (int i = 0; i < 16; ++i) {
    files.push_back(
        std::make_unique<LazyContent>(Counting("f" + std::to_string(i), &calls), cache));
  }
  std::atomic<int> wrong = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        const int i = (t * 7 + round) % 16;
        if (ReadAll(*files[i]) != "f" + std::to_string(i) + "-bytes") ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_LE(cache->size(), 2u);
}

// The cache holds bytes, not files: small contents count as
// kMinEntryBytes each, a large one pushes out the rest, and the one built
// last is kept even past the limit.
TEST(ContentCache, IsSizedByBytes) {
  constexpr uint64_t kMin = ContentCache::kMinEntryBytes;
  auto cache = std::make_shared<ContentCache>(3 * kMin - 1);
  std::atomic<int> calls = 0;
  std::vector<std::unique_ptr<LazyContent>> small;
  for (int i = 0; i < 3; ++i) {
    small.push_back(
        std::make_unique<LazyContent>(Counting("s" + std::to_string(i), &calls), cache));
    ReadAll(*small.back());
  }
  EXPECT_EQ(cache->size(), 2u);  // three would be 3 * kMin
  EXPECT_EQ(cache->bytes(), 2 * kMin);
  LazyContent big(
      []() -> Result<std::shared_ptr<const FileContent>> {
        return std::shared_ptr<const FileContent>(
            std::make_shared<InlineContent>(std::string(4 * kMin, 'x')));
      },
      cache);
  EXPECT_EQ(big.size(), 4 * kMin);
  EXPECT_EQ(cache->size(), 1u);  // alone, and kept though past the limit
  EXPECT_EQ(cache->bytes(), 4 * kMin);
  EXPECT_EQ(ReadAll(*small[0]), "s0-bytes");  // rebuilt, and the big one dropped
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_EQ(cache->bytes(), kMin);
}

}  // namespace
}  // namespace ucfs
