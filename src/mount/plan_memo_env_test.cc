#include "mount/plan_memo_env.h"

#include <gtest/gtest.h>

#include "ucfs/base/counting_env.h"

namespace ucfs {
namespace {

// While the plan is made each question goes below once; after Forget, each
// time (the daemon sees a tag saved later).
TEST(PlanMemoEnv, AsksOnceWhilePlanningThenAlways) {
  auto mem = std::make_shared<MemEnv>();
  mem->WriteFile("/ck/latest", "global_step4");
  mem->WriteFile("/ck/global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt", "small rank file");
  mem->WriteFile("/ck/big.json", std::string(70 << 10, 'x'));
  auto counting = std::make_shared<CountingEnv>(mem);
  PlanMemoEnv memo(counting);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(memo.Stat("/ck/latest").ok());
    EXPECT_FALSE(memo.Stat("/ck/missing").ok());  // a "no" is an answer too
    ASSERT_TRUE(memo.ListDir("/ck").ok());
    EXPECT_EQ(*memo.ReadSmallFile("/ck/latest"), "global_step4");
  }
  EXPECT_EQ(counting->counts().stats, 2u);  // two paths (`latest`'s stat is its open's)
  EXPECT_EQ(counting->counts().listings, 1u);
  EXPECT_EQ(counting->counts().opens, 1u);
  // Rank files and large files are opened each time: a plan holds none whole.
  counting->Reset();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(memo.Open("/ck/global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt").ok());
    ASSERT_TRUE(memo.Open("/ck/big.json").ok());
  }
  EXPECT_EQ(counting->counts().opens, 4u);
  // A confined Env remembers with it, its paths apart.
  auto confined = memo.Confine("/ck");
  ASSERT_TRUE(confined.ok());
  counting->Reset();
  ASSERT_TRUE((*confined)->Stat("/ck/latest").ok());
  ASSERT_TRUE((*confined)->Stat("/ck/latest").ok());
  EXPECT_EQ(counting->counts().stats, 1u);
  // A directory made forgets what was remembered.
  ASSERT_TRUE(memo.MakeDir("/ck/new", 0755, 0).ok());
  counting->Reset();
  ASSERT_TRUE(memo.ListDir("/ck").ok());
  EXPECT_EQ(counting->counts().listings, 1u);
  // After the plan, every question goes below.
  memo.Forget();
  counting->Reset();
  mem->WriteFile("/ck/latest", "global_step8");
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(memo.Stat("/ck/latest").ok());
    ASSERT_TRUE(memo.ListDir("/ck").ok());
    ASSERT_TRUE((*confined)->Stat("/ck/latest").ok());
  }
  EXPECT_EQ(*memo.ReadSmallFile("/ck/latest"), "global_step8");
  EXPECT_EQ(counting->counts().stats, 4u);
  EXPECT_EQ(counting->counts().listings, 2u);
}

}  // namespace
}  // namespace ucfs
