#include "ucfs/checkpoint/batch_size.h"

#include <gtest/gtest.h>

namespace ucfs {
namespace {

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(BatchSize, DescribesTheSavedBatch) {
  EXPECT_EQ(DescribeBatch({16, 4, 2}, 2),
            "train_batch_size 16 = micro batch 4 \u00d7 gradient accumulation 2 \u00d7 2 ranks");
  // HF fills train_batch_size; DeepSpeed derives it when only micro is set.
  EXPECT_EQ(DescribeBatch({std::nullopt, 4, std::nullopt}, 3),
            "train_batch_size 12 = micro batch 4 \u00d7 gradient accumulation 1 \u00d7 3 ranks");
  EXPECT_EQ(DescribeBatch({}, 2), "");
}

TEST(BatchSize, SaysTheAccumulationThatKeepsTheGlobalBatch) {
  // 16 = 4 × 2 × 2: at 4 ranks accumulation 1, at 1 rank 4.
  std::string four = BatchAdvice({16, 4, 2}, 2, 4);
  EXPECT_TRUE(Has(four, "at 4 ranks set gradient_accumulation_steps to 1")) << four;
  EXPECT_TRUE(Has(four, "4 \u00d7 1 \u00d7 4 = 16")) << four;
  EXPECT_TRUE(Has(BatchAdvice({16, 4, 2}, 2, 1), "gradient_accumulation_steps to 4"));
  // The same world size, or too little known: nothing to say.
  EXPECT_EQ(BatchAdvice({16, 4, 2}, 2, 2), "");
  EXPECT_EQ(BatchAdvice({16, std::nullopt, 2}, 2, 4), "");
}

TEST(BatchSize, SaysWhenNoAccumulationKeepsIt) {
  // 16 = 4 × 2 × 2; at 3 ranks 4 × 3 = 12 does not divide 16.
  std::string three = BatchAdvice({16, 4, 2}, 2, 3);
  EXPECT_TRUE(Has(three, "at 3 ranks no gradient accumulation keeps the global batch of 16"))
      << three;
  EXPECT_TRUE(Has(three, "4 \u00d7 3 does not divide it")) << three;
  EXPECT_TRUE(Has(three, "the run was saved with train_batch_size 16")) << three;
}

}  // namespace
}  // namespace ucfs
