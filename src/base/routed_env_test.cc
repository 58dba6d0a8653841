#include <gtest/gtest.h>

#include <memory>

#include "ucfs/base/env.h"

namespace ucfs {
namespace {

TEST(RoutedEnv, PathsBelowTheDirectoryGoToItsEnv) {
  auto base = std::make_shared<MemEnv>();
  auto below = std::make_shared<MemEnv>();
  base->WriteFile("/src/a", "source");
  base->WriteFile("/upperfoo/x", "a sibling sharing the prefix");
  below->WriteFile("/upper/ck/latest", "global_step12");
  auto env = NewRoutedEnv(base, "/upper", below);
  EXPECT_EQ(*env->ReadSmallFile("/src/a"), "source");
  EXPECT_EQ(*env->ReadSmallFile("/upper/ck/latest"), "global_step12");
  EXPECT_EQ(*env->ReadSmallFile("/upperfoo/x"), "a sibling sharing the prefix");
  auto listed = env->ListDir("/upper");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "ck");
  EXPECT_FALSE(env->Stat("/src/ck").ok());
  EXPECT_TRUE(env->Stat("/upper/ck").ok());
}

}  // namespace
}  // namespace ucfs
