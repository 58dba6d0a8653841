#include "views/native_expert_names.h"

#include <gtest/gtest.h>

namespace ucfs {
namespace {

TEST(NativeExpertNames, LocalToGlobalAsDeepSpeedRenames) {
  const std::string name = "moe.deepspeed_moe.experts.deepspeed_experts.1.fc2.bias";
  auto local = ParseLocalExpert(name);
  ASSERT_TRUE(local);
  EXPECT_EQ(local->module, "moe");
  EXPECT_EQ(local->id, "1");
  // EP rank 1 of 2 local experts: global expert 3.
  EXPECT_EQ(GlobalExpertName(name, *local, 1, 2),
            "moe.deepspeed_moe.experts.deepspeed_experts.3.fc2.bias");
  EXPECT_EQ(GlobalExpertName(name, *local, 0, 2), name);
}

TEST(NativeExpertNames, TheLastIdCountsAndEveryOccurrenceIsReplaced) {
  const std::string name =
      "a.deepspeed_moe.experts.deepspeed_experts.0.b.deepspeed_moe.experts.deepspeed_experts.0.w";
  auto local = ParseLocalExpert(name);
  ASSERT_TRUE(local);
  EXPECT_EQ(local->module, "a.deepspeed_moe.experts.deepspeed_experts.0.b");
  EXPECT_EQ(GlobalExpertName(name, *local, 2, 4),
            "a.deepspeed_moe.experts.deepspeed_experts.8.b.deepspeed_moe.experts.deepspeed_experts."
            "8.w");
}

TEST(NativeExpertNames, NoIdIsNoLocalExpert) {
  EXPECT_FALSE(ParseLocalExpert("moe.deepspeed_moe.gate.wg.weight"));
  EXPECT_FALSE(ParseLocalExpert("x.deepspeed_moe.experts.deepspeed_experts.w"));
}

}  // namespace
}  // namespace ucfs
