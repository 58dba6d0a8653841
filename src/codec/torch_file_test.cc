#include "ucfs/codec/torch_file.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_support.h"
#include "ucfs/base/env.h"

namespace ucfs {
namespace {

ZipRecord Named(std::string name, uint64_t offset) {
  ZipRecord r;
  r.name = std::move(name);
  r.data_offset = offset;
  return r;
}

// Indexed lookups answer exactly as the linear search does: the first of
// equal names, nothing for a record outside the prefix or a prefix alone.
TEST(TorchFileSummary, IndexedLookupsAnswerAsTheLinearSearch) {
  TorchFileSummary s;
  s.prefix = "archive";
  std::vector<std::string> relative;
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) relative.push_back("data/" + std::to_string(rng() % 2500));
  relative.insert(relative.end(), {"data.pkl", "version", "data/1", "", ".data/version"});
  for (size_t i = 0; i < relative.size(); ++i) {
    s.records.push_back(Named("archive/" + relative[i], i));
    if (i % 3 == 0) s.small_records.emplace_back(relative[i], std::to_string(i));
  }
  s.records.push_back(Named("other/data/5", 9999));
  s.records.push_back(Named("archive", 9998));
  s.records.push_back(Named("archivex/data/6", 9997));
  TorchFileSummary linear = s;
  s.IndexNames();

  std::vector<std::string> asked = relative;
  for (int i = 0; i < 2600; ++i) asked.push_back("data/" + std::to_string(i));
  asked.insert(asked.end(), {"other/data/5", "x/data/6", "data/", "data", "zzz", "5", "archive"});
  for (const std::string& name : asked) {
    const ZipRecord* want = linear.Find(name);
    const ZipRecord* got = s.Find(name);
    ASSERT_EQ(want == nullptr, got == nullptr) << name;
    if (want != nullptr) EXPECT_EQ(want->data_offset, got->data_offset) << name;
    const std::string* small_want = linear.SmallRecord(name);
    const std::string* small_got = s.SmallRecord(name);
    ASSERT_EQ(small_want == nullptr, small_got == nullptr) << name;
    if (small_want != nullptr) EXPECT_EQ(*small_want, *small_got) << name;
  }
  EXPECT_EQ(s.Find("data/1")->data_offset, linear.Find("data/1")->data_offset);
  EXPECT_EQ(s.Find("other/data/5"), nullptr);
}

// What SummarizeTorchFile and DecodeSummary give is indexed: a copy keeps
// answering from its own records.
TEST(TorchFileSummary, SummariesComeIndexed) {
  MemEnv env;
  const std::string path = testing::TestDataDir() +
                           "/fixtures/z3_fp32_ws2/checkpoint/global_step4/"
                           "zero_pp_rank_0_mp_rank_00_optim_states.pt";
  env.WriteFile("/optim.pt", testing::ReadFile(path));
  auto summary = SummarizeTorchFile(env, "/optim.pt");
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  auto decoded = DecodeSummary(EncodeSummary(*summary));
  ASSERT_TRUE(decoded.ok());
  for (const TorchFileSummary* s : {&*summary, &*decoded}) {
    TorchFileSummary copy = *s;
    for (const ZipRecord& rec : s->records) {
      const std::string relative = rec.name.substr(s->prefix.size() + 1);
      const ZipRecord* found = copy.Find(relative);
      ASSERT_NE(found, nullptr) << rec.name;
      EXPECT_EQ(found->data_offset, rec.data_offset);
      EXPECT_TRUE(found >= copy.records.data() &&
                  found < copy.records.data() + copy.records.size());
    }
    EXPECT_NE(copy.SmallRecord("version"), nullptr);
  }
}

}  // namespace
}  // namespace ucfs
